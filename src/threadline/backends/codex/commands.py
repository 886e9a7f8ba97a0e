"""The commands one Codex thread runs, told apart from other threads' on a shared app-server.

The rule: Codex runs every command of a thread in a session of its own (its sandbox helper,
or the shell itself without a sandbox), with `CODEX_THREAD_ID=<the Codex thread id>` in its
environment (codex 0.169.0). A command of thread T is such an escape point (a descendant of
the app-server leading a process group other than the app-server's) whose environment names
T, with everything below it. Killing the app-server's process group, or every escape point
as `GroupProcess.kill_escaped` does, would also reach the other threads' commands.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping

import trio

from ...procs.group import descendant_pids, processes_gone
from ...procs.ledger import proc_stat

__all__ = ["escalate", "kill_thread_commands"]

_POLL = 0.02


def _stat(pid: int) -> tuple[int, int] | None:
    """(process group, start time in clock ticks since boot) of a live (not zombie) process."""
    st = proc_stat(pid)
    return None if st is None or st[0] in ("Z", "X") else (st[1], st[2])


def _thread_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    for entry in data.split(b"\0"):
        if entry.startswith(b"CODEX_THREAD_ID="):
            return entry.partition(b"=")[2].decode(errors="replace")
    return None


def _ticks(when: float) -> int:
    """`when` (time.monotonic()) as a /proc start time, one tick early."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - (time.monotonic() - when)
    return int(since_boot * os.sysconf("SC_CLK_TCK")) - 1


def _signal(pid: int, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_thread_commands(app_server: int, thread_id: str, since: float) -> dict[int, int]:
    """SIGTERM the commands Codex started for `thread_id` since `since` (a time.monotonic()
    value) under the app-server `app_server` (see the module docstring); pid → start time of
    every process signalled (`escalate` SIGKILLs what of them outlives a grace)."""
    since_ticks = _ticks(since)
    targets: dict[int, int] = {}
    for pid in descendant_pids(app_server):
        st = _stat(pid)
        if st is None or st[0] != pid or st[1] < since_ticks or pid in targets:
            continue
        if _thread_of(pid) != thread_id:
            continue
        targets[pid] = st[1]
        _signal(pid, signal.SIGTERM, group=True)
        for child in descendant_pids(pid):
            child_st = _stat(child)
            if child_st is not None:
                targets[child] = child_st[1]
                _signal(child, signal.SIGTERM, group=child_st[0] == child)
    return targets


async def escalate(targets: Mapping[int, int], grace: float) -> None:
    """SIGKILL whatever of `targets` (pid → start time) still runs after `grace` seconds."""
    with trio.move_on_after(grace):
        while not processes_gone(targets):  # noqa: ASYNC110 - polling /proc
            await trio.sleep(_POLL)
        return
    for pid, start in targets.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            _signal(pid, signal.SIGKILL, group=st[0] == pid)
