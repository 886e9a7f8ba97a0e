"""The process ledger: which process groups this server runs, on disk, so that the next server
can kill what a SIGKILLed one left behind.

A server killed with SIGKILL cannot clean up, and `PR_SET_PDEATHSIG` does not mix with trio (it
fires when trio's spawning worker thread exits, not when the server dies). So each running CLI
is recorded as (pgid, leader start time) plus the escaped descendants seen so far (pid, start
time), in `<state dir>/run/<server pid>.json`, rewritten atomically on every change and deleted
once nothing of the server's runs. At start-up a server reaps the files of servers that are
gone: a recorded group is killed only while it still has a member that started no earlier than
its recorded leader (a pgid cannot be reused while any member lives), and an escaped pid only
when its start time still matches. A pid reused by an unrelated process is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

__all__ = ["ProcessLedger", "current_ledger", "proc_stat", "set_ledger"]

_log = logging.getLogger("threadline.process")

_REAP_GRACE = 1.0  # seconds between SIGTERM and SIGKILL for leftovers of a dead server


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgrp, start time in clock ticks) of `pid`, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return rest[0].decode("ascii"), int(rest[2]), int(rest[19])
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _mkdirs_private(path: Path) -> None:
    """Create `path` and any missing parent with mode 0700 (makedirs' mode covers the leaf
    only)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)


def _alive(pid: int, start: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st[2] == start and st[0] not in ("Z", "X")


def _group_members(pgid: int, not_before: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st is not None and st[1] == pgid and st[2] >= not_before and st[0] not in ("Z", "X"):
                members.append(int(name))
    return members


class ProcessLedger:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        own = proc_stat(self.pid)
        self.start = own[2] if own else 0
        self.path = directory / f"{self.pid}.json"
        #: pgid -> (leader start, {escaped pid: start})
        self._groups: dict[int, tuple[int, dict[int, int]]] = {}

    # -- this server's record --------------------------------------------------------------------

    def add_group(self, pgid: int) -> None:
        st = proc_stat(pgid)
        self._groups[pgid] = (st[2] if st else 0, {})
        self._write()

    def add_escaped(self, pgid: int, pids: dict[int, int]) -> None:
        entry = self._groups.get(pgid)
        if entry is None or pids.keys() <= entry[1].keys():
            return
        entry[1].update(pids)
        self._write()

    def remove_group(self, pgid: int) -> None:
        if self._groups.pop(pgid, None) is not None:
            self._write()

    def _write(self) -> None:
        if not self._groups:
            with contextlib.suppress(OSError):
                self.path.unlink()
            return
        record = {
            "server": {"pid": self.pid, "start": self.start},
            "groups": [
                {"pgid": pgid, "start": start, "escaped": [[p, s] for p, s in escaped.items()]}
                for pgid, (start, escaped) in self._groups.items()
            ],
        }
        try:
            _mkdirs_private(self.directory)
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            os.replace(tmp, self.path)
        except OSError as exc:  # bookkeeping must never break a turn
            _log.warning("cannot write the process ledger %s: %s", self.path, exc)

    # -- leftovers of dead servers ---------------------------------------------------------------

    def reap_stale(self) -> list[int]:
        """Kill the processes recorded by servers that no longer run; return their pids."""
        try:
            files = [p for p in self.directory.glob("*.json") if p != self.path]
        except OSError:
            return []
        killed: list[int] = []
        for path in files:
            try:
                record = json.loads(path.read_text())
                server = record["server"]
                if _alive(int(server["pid"]), int(server["start"])):
                    continue  # another live server sharing this state dir
                killed += self._kill_recorded(record["groups"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                _log.warning("ignoring unreadable process ledger %s: %s", path, exc)
            with contextlib.suppress(OSError):
                path.unlink()
        if killed:
            _log.warning(
                "killed %d processes left behind by a server that died: %s", len(killed), killed
            )
        return killed

    def _kill_recorded(self, groups: list[dict[str, Any]]) -> list[int]:
        targets: list[tuple[int, bool]] = []  # (pgid or pid, is a group)
        found: list[int] = []
        for group in groups:
            pgid, start = int(group["pgid"]), int(group["start"])
            members = _group_members(pgid, start)
            if members:
                targets.append((pgid, True))
                found += members
            for pid, pid_start in group.get("escaped", []):
                if _alive(int(pid), int(pid_start)):
                    targets.append((int(pid), False))
                    found.append(int(pid))
        if not targets:
            return []
        _signal(targets, signal.SIGTERM)
        deadline = time.monotonic() + _REAP_GRACE
        while time.monotonic() < deadline and any(_running(p) for p in found):
            time.sleep(0.02)
        _signal(targets, signal.SIGKILL)
        return sorted(set(found))


def _running(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _signal(targets: list[tuple[int, bool]], sig: int) -> None:
    for target, is_group in targets:
        try:
            if is_group:
                os.killpg(target, sig)
            else:
                os.kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


_LEDGER: ProcessLedger | None = None


def set_ledger(ledger: ProcessLedger | None) -> None:
    global _LEDGER
    _LEDGER = ledger


def current_ledger() -> ProcessLedger | None:
    return _LEDGER
