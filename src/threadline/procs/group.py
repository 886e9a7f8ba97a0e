"""Running agent CLIs as killable process groups.

Every agent CLI (claude, codex, gemini, opencode) runs through `open_group_process`:

* The CLI starts in a new session, so it leads its own process group (pgid == pid) and a
  single `killpg` reaches everything it spawned that stayed in the group.
* Leaving the context for any reason (normal exit, exception, cancellation) runs `terminate()`
  shielded: SIGTERM to the group and to escaped descendants, up to `grace` seconds for them to
  go, then SIGKILL, then reap. Descendants that called `setsid()` (OpenCode's bash tool does)
  have left the group, so they are found through /proc parent links and remembered, because
  once their parent dies they are reparented to init and can no longer be traced to us.
* stderr is drained continuously into a bounded tail (for error messages) so a chatty CLI
  can never block on a full pipe; each line is logged at DEBUG on ``threadline.cli``.
* stdin is always passed explicitly (devnull or a pipe): the CLI must never inherit the
  protocol's stdin. Nothing is ever written to our stdout.

`PR_SET_PDEATHSIG` is deliberately not used: trio spawns from a worker thread and the signal
would fire when that thread exits, killing a healthy CLI. Linux only (/proc, killpg).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import msgspec
import trio

from threadline.rpc.framing import DEFAULT_MAX_LINE, LineReader, LineTooLong

from . import early as _early
from .executables import CliNotExecutable, CliNotFound, ProcessError, resolve_executable
from .ledger import current_ledger

__all__ = [
    "DEFAULT_MAX_LINE",
    "CliNotExecutable",
    "CliNotFound",
    "GroupProcess",
    "LineTooLong",
    "ProcessError",
    "child_env",
    "descendant_pids",
    "exit_status",
    "group_members",
    "open_group_process",
    "processes_gone",
    "resolve_executable",
]

_log = logging.getLogger(__name__)
_cli_log = logging.getLogger("threadline.cli")

_POLL = 0.02  # longest poll period while waiting for a signalled group to empty
_POLL_FIRST = 0.001  # first poll period: it doubles up to _POLL (most groups go at once)
_TRACK_INTERVAL = 0.5  # how often descendants are remembered while the CLI runs
_KILL_SETTLE = 1.0  # SIGKILL is asynchronous; how long to wait for the kernel to finish
_CHUNK = 64 * 1024
_JSON = msgspec.json.Decoder()
_LOG_LINE_MAX = 8 * 1024  # longest stderr line written to the debug log


class _Child(Protocol):
    """What a GroupProcess needs of its leader: `trio.Process`, or `_AdoptedProcess`."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> trio.abc.SendStream | None: ...
    @property
    def stdout(self) -> trio.abc.ReceiveStream | None: ...
    @property
    def stderr(self) -> trio.abc.ReceiveStream | None: ...
    def poll(self) -> int | None: ...
    async def wait(self) -> int: ...


def _fd_stream(file: Any) -> trio.lowlevel.FdStream:
    fd = os.dup(file.fileno())
    file.close()
    return trio.lowlevel.FdStream(fd)


class _AdoptedProcess:
    """A process started before the engine (procs/early.py), with trio streams on its pipes."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin: trio.abc.SendStream | None = _fd_stream(popen.stdin)
        self.stdout: trio.abc.ReceiveStream | None = _fd_stream(popen.stdout)
        self.stderr: trio.abc.ReceiveStream | None = _fd_stream(popen.stderr)

    def poll(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        while self._popen.poll() is None:
            # Not reaped yet (poll() reaps), so the pid is still this process's: a pidfd
            # becomes readable when it exits.
            pidfd = os.pidfd_open(self.pid)
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
        return self._popen.wait()


def exit_status(code: int) -> str:
    """How a CLI ended, in words a user understands: ``exit code 3``, or for a negative status
    (a signal: kill -9, the OOM killer) ``killed by SIGKILL`` rather than ``exit code -9``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def child_env(
    overrides: Mapping[str, str | None] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A copy of `base` (default: our environment) with `overrides` applied; None removes a key."""
    env = dict(os.environ if base is None else base)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# --------------------------------------------------------------------------- /proc helpers


@dataclass(frozen=True, slots=True)
class _Stat:
    pid: int
    state: str
    ppid: int
    pgrp: int
    start: int  # start time in clock ticks since boot: tells a reused pid apart

    @property
    def dead(self) -> bool:
        # Z: zombie (exited, waiting to be reaped), X: dead. Neither can be signalled usefully.
        return self.state in ("Z", "X")


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:  # gone (ENOENT/ESRCH) or not readable
        return None
    # comm (field 2) may contain spaces and parentheses; everything after the last ")" is fixed.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return _Stat(pid, rest[0].decode("ascii"), int(rest[1]), int(rest[2]), int(rest[19]))
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def _scan() -> dict[int, _Stat]:
    """Every process on the system (the authoritative, but slower, view)."""
    out: dict[int, _Stat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = _read_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def _walk(roots: Iterable[int], snapshot: Mapping[int, _Stat]) -> dict[int, _Stat]:
    """Descendants of `roots` (roots excluded) by ppid links in `snapshot`, zombies included."""
    children: dict[int, list[int]] = {}
    for st in snapshot.values():
        children.setdefault(st.ppid, []).append(st.pid)
    roots = set(roots)
    found: dict[int, _Stat] = {}
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found and child not in roots:
                found[child] = snapshot[child]
                stack.append(child)
    return found


@functools.cache
def _have_children_files() -> bool:
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _walk_fast(roots: Iterable[int]) -> dict[int, _Stat]:
    """Like `_walk` but reads /proc/<pid>/task/<tid>/children, costing O(tree) not O(system).

    The kernel documents these files as racy while children come and go, so this is used only
    for the periodic best-effort bookkeeping; `terminate()` uses the full scan.
    """
    if not _have_children_files():
        return _walk(roots, _scan())
    roots = set(roots)
    found: dict[int, _Stat] = {}
    stack = list(roots)
    while stack:
        parent = stack.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(p) for p in f.read().split()]
            except (OSError, ValueError):
                continue
            for child in kids:
                if child in found or child in roots:
                    continue
                st = _read_stat(child)
                if st is not None:
                    found[child] = st
                    stack.append(child)
    return found


@functools.cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _monotonic_to_ticks(when: float) -> int:
    """`when` (time.monotonic()) as a /proc start time (clock ticks since boot), rounded
    down by one more tick: a process started at `when` never compares as earlier."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - (time.monotonic() - when)
    return int(since_boot * _clock_ticks()) - 1


def processes_gone(processes: Mapping[int, int]) -> bool:
    """Whether none of `processes` (pid -> start time) still runs (zombies count as gone)."""
    for pid, start in processes.items():
        st = _read_stat(pid)
        if st is not None and st.start == start and not st.dead:
            return False
    return True


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return []  # fast path: no process at all in that group
    except PermissionError:
        pass  # the group exists; we just may not signal all of it
    return sorted(st.pid for st in _scan().values() if st.pgrp == pgid and not st.dead)


def descendant_pids(pid: int) -> list[int]:
    """Live (non-zombie) descendants of `pid`, following ppid links in /proc/<p>/stat.

    Only descendants still linked to `pid` are found: when a process dies its children are
    reparented to init (or a subreaper), which is why `GroupProcess` remembers what it saw.
    """
    return sorted(p for p, st in _walk([pid], _scan()).items() if not st.dead)


def _kill(pid: int, sig: int, *, group: bool = False) -> None:
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass  # already gone
    except PermissionError:
        # e.g. a descendant that switched uid (sudo); nothing more we can do about it.
        _log.debug(
            "no permission to send signal %d to %s %d", sig, "group" if group else "pid", pid
        )


# --------------------------------------------------------------------------- GroupProcess


class GroupProcess:
    """A running CLI leading its own process group. Created by `open_group_process` only."""

    pid: int
    pgid: int
    argv: list[str]

    def __init__(
        self,
        proc: _Child,
        argv: list[str],
        name: str,
        *,
        max_line: int,
        stderr_tail_bytes: int,
        grace: float,
        exit_drain: float,
    ) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self.pid = proc.pid
        self.pgid = proc.pid  # start_new_session=True: setsid() made the child a group leader
        self.argv = argv
        self.name = name
        self._grace = grace
        self._exit_drain = exit_drain

        self._stdout = LineReader(proc.stdout, max_line)
        self._stdout_done = False
        self._read_scope: trio.CancelScope | None = None

        self._stdin_closed = proc.stdin is None
        self._write_lock = trio.Lock()

        self._tail = bytearray()
        self._tail_cap = max(0, stderr_tail_bytes)
        self._tail_truncated = False
        self._err_line = bytearray()  # partial stderr line awaiting its newline (for logging)
        #: Called with each line the CLI writes to stderr from now on (in the drain task: it
        #: must not block).
        self.on_stderr_line: Callable[[str], None] | None = None
        self._stderr_eof = trio.Event()

        self._leader_exited = False
        # pid -> start time of every descendant seen so far. Escaped (setsid) descendants are
        # only reachable through this once their parent has died.
        self._known: dict[int, int] = {}
        self._terminating = False
        self._terminated = trio.Event()
        self._nursery: trio.Nursery | None = None  # set by open_group_process
        #: Processes still alive after the SIGKILL of terminate() (unkillable, e.g. state D).
        self.survivors: list[int] = []

    def __repr__(self) -> str:
        return f"<GroupProcess {self.name} pid={self.pid} returncode={self._proc.poll()}>"

    @property
    def returncode(self) -> int | None:
        """Exit status of the leader (negative: killed by that signal), None while it runs."""
        return self._proc.poll()

    # ---------------------------------------------------------------- stdout / stdin

    async def read_json_object(self) -> dict[str, Any] | None:
        """The next stdout line that is a JSON object (other lines skipped); None at the end."""
        while (line := await self.read_line_or_skip()) is not None:
            try:
                value = _JSON.decode(line)
            except msgspec.DecodeError:
                continue
            if isinstance(value, dict):
                return value
        return None

    async def read_line_or_skip(self) -> bytes | None:
        """`read_line`, with oversized lines skipped instead of raised."""
        while True:
            try:
                return await self.read_line()
            except LineTooLong:
                continue

    async def read_line(self) -> bytes | None:
        """Next stdout line without its newline; None at EOF.

        Also None once the leader has exited and no line arrives within `exit_drain` seconds:
        a backgrounded grandchild can keep the pipe open long after the CLI is done. After the
        first None, every call returns None. Raises LineTooLong for an oversized line, which is
        skipped, so the next call continues with the following line.
        """
        if self._stdout_done:
            return None
        # A line already read from the pipe: no deadline, cancel scope or waitpid needed
        # (these cost more than the line itself in a burst of small deltas).
        line = self._stdout.buffered_line()
        if line is not None:
            return line
        with trio.CancelScope() as scope:
            if self._leader_exited or self._proc.poll() is not None:
                self._leader_exited = True
                scope.deadline = trio.current_time() + self._exit_drain
            self._read_scope = scope
            try:
                line = await self._stdout.receive_line()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                line = None  # the context already closed the pipe
            finally:
                self._read_scope = None
        if scope.cancelled_caught or line is None:
            self._stdout_done = True
            return None
        return line

    async def write(self, data: bytes) -> None:
        """Write to the CLI's stdin (requires stdin="pipe")."""
        stdin = self._proc.stdin
        if stdin is None:
            raise ProcessError(f"{self.name}: stdin is not a pipe")
        if self._stdin_closed:
            raise ProcessError(f"{self.name}: stdin is closed")
        try:
            async with self._write_lock:  # keeps concurrent writes whole and in order
                await stdin.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._stdin_closed = True
            detail = f": {exc.__cause__}" if exc.__cause__ is not None else ""
            raise ProcessError(f"{self.name}: cannot write to stdin{detail}") from exc

    async def close_stdin(self) -> None:
        """Close the CLI's stdin (it sees EOF). Idempotent."""
        self._stdin_closed = True
        if self._proc.stdin is not None:
            await self._proc.stdin.aclose()

    async def wait(self) -> int:
        """Wait for the leader to exit and return its status.

        Also gives the stderr drain up to `exit_drain` to reach EOF, so `stderr_tail()` holds
        what the CLI wrote just before exiting.
        """
        rc = await self._proc.wait()
        self._leader_exited = True
        with trio.move_on_after(self._exit_drain):
            await self._stderr_eof.wait()
        return rc

    # ---------------------------------------------------------------- stderr

    def stderr_tail(self, max_chars: int = 4000) -> str:
        """The last stderr output (up to `max_chars` characters), decoded and stripped."""
        if max_chars <= 0:
            return ""
        data = bytes(self._tail)
        if self._tail_truncated:
            # The cut may have split a UTF-8 sequence; drop its orphaned continuation bytes.
            start = 0
            while start < min(len(data), 3) and 0x80 <= data[start] < 0xC0:
                start += 1
            data = data[start:]
        return data.decode("utf-8", errors="replace").strip()[-max_chars:]

    async def _drain_stderr(self) -> None:
        stream = self._proc.stderr
        assert stream is not None
        try:
            while True:
                chunk = await stream.receive_some(_CHUNK)
                if not chunk:
                    break
                self._keep_tail(chunk)
                if self.on_stderr_line is not None or _cli_log.isEnabledFor(logging.DEBUG):
                    self._log_lines(chunk)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        except Exception:  # never let a drain failure tear down the caller's work
            _log.exception("%s: reading stderr failed", self.name)
        finally:
            if self._err_line:
                self._log_line(bytes(self._err_line))
                self._err_line.clear()
            self._stderr_eof.set()

    def _keep_tail(self, chunk: bytes | bytearray) -> None:
        self._tail += chunk
        excess = len(self._tail) - self._tail_cap
        if excess > 0:
            del self._tail[:excess]
            self._tail_truncated = True

    def _log_lines(self, chunk: bytes | bytearray) -> None:
        self._err_line += chunk
        *lines, rest = bytes(self._err_line).split(b"\n")
        for line in lines:
            self._log_line(line)
        self._err_line[:] = rest[:_LOG_LINE_MAX]

    def _log_line(self, line: bytes) -> None:
        text = line[:_LOG_LINE_MAX].decode("utf-8", errors="replace").rstrip("\r")
        _cli_log.debug("%s: %s", self.name, text)
        if self.on_stderr_line is not None:
            try:
                self.on_stderr_line(text)
            except Exception:  # the caller's bug must not stop the drain
                _log.exception("%s: the stderr line callback failed", self.name)

    # ---------------------------------------------------------------- group bookkeeping

    def _leader_unreaped(self) -> bool:
        # While the leader is unreaped its pid (and so our pgid) cannot be reused by anyone.
        return self._proc.poll() is None

    def _known_alive(self) -> dict[int, _Stat]:
        """Remembered descendants that still run (same pid *and* start time: not a reused pid)."""
        alive: dict[int, _Stat] = {}
        for pid, start in list(self._known.items()):
            st = _read_stat(pid)
            if st is None or st.start != start or st.dead:
                del self._known[pid]  # keeps the map small for long-running CLIs
            else:
                alive[pid] = st
        return alive

    def _remember(self, found: Mapping[int, _Stat]) -> None:
        escaped: dict[int, int] = {}
        for st in found.values():
            if not st.dead:
                self._known[st.pid] = st.start
                if st.pgrp != self.pgid:
                    escaped[st.pid] = st.start
        ledger = current_ledger()
        if escaped and ledger is not None:
            ledger.add_escaped(self.pgid, escaped)

    def _track(self) -> None:
        """Cheap periodic snapshot of descendants (see `_walk_fast`)."""
        roots = set(self._known_alive())
        if self._leader_unreaped():
            roots.add(self.pid)
        self._remember(_walk_fast(roots))

    def _refresh(self) -> tuple[list[int], dict[int, _Stat]]:
        """Full scan: remember new descendants; return (live group members, live escapees)."""
        snapshot = _scan()
        members = [st.pid for st in snapshot.values() if st.pgrp == self.pgid and not st.dead]
        roots = set(members) | set(self._known_alive())
        if self._leader_unreaped():
            roots.add(self.pid)
        self._remember(_walk(roots, snapshot))
        escaped = {p: st for p, st in self._known_alive().items() if st.pgrp != self.pgid}
        return members, escaped

    def alive_members(self) -> list[int]:
        """Live pids in our group plus live descendants that left it (setsid/setpgid)."""
        members, escaped = self._refresh()
        return sorted(set(members) | set(escaped))

    def _signal_all(
        self, sig: int, snapshot: tuple[list[int], dict[int, _Stat]] | None = None
    ) -> None:
        members, escaped = self._refresh() if snapshot is None else snapshot
        # Once the leader is reaped and the group is empty, the pgid may belong to someone else.
        if members or self._leader_unreaped():
            _kill(self.pgid, sig, group=True)
        for pid, st in escaped.items():
            if st.pgrp == pid:
                _kill(pid, sig, group=True)  # it leads its own group: take that group too
            _kill(pid, sig)

    def _leftovers(self) -> tuple[bool, list[int]]:
        leader_running, left, _ = self._leftovers_snapshot()
        return leader_running, left

    def _leftovers_snapshot(
        self,
    ) -> tuple[bool, list[int], tuple[list[int], dict[int, _Stat]]]:
        leader_running = self._leader_unreaped()  # poll() also reaps an exited leader
        members, escaped = self._refresh()
        return leader_running, sorted(set(members) | set(escaped)), (members, escaped)

    def kill_escaped(self, since: float, grace: float | None = None) -> dict[int, int]:
        """Kill the commands the CLI started since `since` (a `time.monotonic()` value) in
        process groups of their own, without touching the CLI: SIGTERM now, SIGKILL to what
        is left after `grace` seconds (default: the group's grace), in the background.
        Returns the pids signalled.

        Every agent CLI runs a tool's shell in a new session (claude, gemini and opencode
        `detached`, codex through its sandbox helper), so a command is a descendant of the
        CLI that leads a group other than ours. Only such escape points that started at or
        after `since` are taken, with everything below them: a background process the CLI
        started earlier is left alone, and so is anything still in the CLI's own group."""
        if self._terminating:
            return {}
        since_ticks = _monotonic_to_ticks(since)
        known = self._known_alive()
        roots = set(known)
        if self._leader_unreaped():
            roots.add(self.pid)
        # (Descendants remembered earlier are roots of the walk, which leaves them out.)
        tree = {**known, **_walk_fast(roots)}
        self._remember(tree)  # terminate() must still find them if the CLI dies now
        picked = {
            pid: st
            for pid, st in tree.items()
            if not st.dead and st.pgrp == pid != self.pgid and st.start >= since_ticks
        }
        if not picked:
            return {}
        # Everything below a picked escape point belongs to that command (nested sessions:
        # codex's sandbox helper runs bwrap, which starts another session for the command).
        targets = {p: st for p, st in _walk(picked, tree).items() if not st.dead}
        targets.update(picked)
        _log.debug("%s: SIGTERM to the commands %s", self.name, sorted(targets))
        for pid, st in targets.items():
            if st.pgrp == pid:
                _kill(pid, signal.SIGTERM, group=True)
            _kill(pid, signal.SIGTERM)
        if self._nursery is not None:
            wait = self._grace if grace is None else grace
            self._nursery.start_soon(self._escalate, targets, wait)
        return {pid: st.start for pid, st in targets.items()}

    async def _escalate(self, targets: Mapping[int, _Stat], grace: float) -> None:
        """SIGKILL whatever of `targets` (and their groups) outlives `grace` seconds."""
        deadline = trio.current_time() + grace
        delay = _POLL_FIRST
        while True:
            left = {}
            for pid, old in targets.items():
                st = _read_stat(pid)
                if st is not None and st.start == old.start and not st.dead:
                    left[pid] = st
            if not left:
                return
            if trio.current_time() >= deadline:
                break
            await trio.sleep(delay)
            delay = min(delay * 2, _POLL)
        _log.debug("%s: SIGKILL to the commands %s after %.1fs", self.name, sorted(left), grace)
        for pid, st in left.items():
            if st.pgrp == pid:
                _kill(pid, signal.SIGKILL, group=True)
            _kill(pid, signal.SIGKILL)

    async def terminate(self, grace: float | None = None) -> None:
        """Kill the whole group and escaped descendants: SIGTERM, up to `grace` s, SIGKILL.

        Idempotent and safe when the leader is already dead. Runs shielded, so once started it
        finishes (within about grace + 1 s) even if the caller is cancelled.
        """
        if self._terminating:
            await self._terminated.wait()
            return
        self._terminating = True
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as nursery:
                    # Whoever read the CLI's stdout is done with it by now; a CLI that writes
                    # on its way out must not block on the full pipe (qwen's agent answers its
                    # cancelled prompt with ~0.5 MB, and was only SIGKILLed after the grace).
                    nursery.start_soon(self._discard_stdout)
                    await self._terminate(self._grace if grace is None else grace)
                    nursery.cancel_scope.cancel()
        finally:
            self._terminated.set()

    async def _discard_stdout(self) -> None:
        stream = self._proc.stdout
        assert stream is not None
        with contextlib.suppress(
            trio.ClosedResourceError, trio.BrokenResourceError, trio.BusyResourceError
        ):
            while await stream.receive_some(_CHUNK):
                pass

    async def _terminate(self, grace: float) -> None:
        # (The snapshot also remembers descendants before anything is signalled.)
        leader_running, left, snapshot = self._leftovers_snapshot()
        if not leader_running and not left:
            return
        _log.debug("%s: SIGTERM to group %d and %s", self.name, self.pgid, left)
        self._signal_all(signal.SIGTERM, snapshot)
        deadline = trio.current_time() + grace
        delay = _POLL_FIRST
        while True:  # polling /proc: there is no event for "the group is empty"
            # Most CLIs and commands go within a millisecond or two of SIGTERM: poll soon,
            # then less often (a fixed 20 ms period made every cancel wait 20 ms or more).
            with trio.move_on_after(delay):
                await self._proc.wait()
            delay = min(delay * 2, _POLL)
            leader_running, left = self._leftovers()
            if not leader_running and not left:
                return
            if trio.current_time() >= deadline:
                break
        _log.debug("%s: SIGKILL to group %d and %s after %.1fs", self.name, self.pgid, left, grace)
        self._signal_all(signal.SIGKILL)
        await self._proc.wait()
        with trio.move_on_after(_KILL_SETTLE):
            while self._leftovers()[1]:  # noqa: ASYNC110 - SIGKILL lands asynchronously
                await trio.sleep(_POLL)
        left = self._leftovers()[1]
        if left:
            _log.warning("%s: processes survived SIGKILL: %s", self.name, left)
        self.survivors = left

    async def _watch(self) -> None:
        """Remember descendants while the leader runs; on its exit, bound the pending read."""
        while not self._leader_exited:
            with trio.move_on_after(_TRACK_INTERVAL):
                await self._proc.wait()
            self._track()
            if self._proc.poll() is not None:
                self._leader_exited = True
        scope = self._read_scope
        if scope is not None:
            scope.deadline = min(scope.deadline, trio.current_time() + self._exit_drain)


# --------------------------------------------------------------------------- context manager


def _check_before_spawn(
    command: str, env: Mapping[str, str] | None, cwd: str | None, label: str
) -> str:
    # A few stat() calls: cheap enough to run on the event loop.
    exe = resolve_executable(command, env)
    if cwd is not None and not os.path.isdir(cwd):
        raise ProcessError(f"{label}: working directory {cwd} does not exist")
    return exe


def _spawn_error(exc: OSError, label: str, exe: str, cwd: str | None) -> ProcessError:
    if cwd is not None and exc.filename == cwd:
        return ProcessError(f"{label}: cannot use working directory {cwd}: {exc.strerror}")
    if isinstance(exc, FileNotFoundError):
        # The binary was checked, so this is usually its #! interpreter (e.g. node) missing.
        return CliNotFound(f"{label}: cannot execute {exe}: {exc.strerror} (missing interpreter?)")
    if isinstance(exc, PermissionError):
        return CliNotExecutable(f"{label}: cannot execute {exe}: {exc.strerror}")
    if exc.errno == errno.ENOEXEC:
        return CliNotExecutable(f"{label}: cannot execute {exe}: not a valid executable")
    return ProcessError(f"{label}: cannot start {exe}: {exc}")


async def _start(
    argv: list[str],
    stdin: Literal["pipe", "devnull"],
    cwd: str | None,
    env: Mapping[str, str] | None,
    early: _early.Eligible | None,
) -> tuple[_Child, list[str]]:
    """The process `argv` as a new session: the one started early if it is that very process
    (and its own argv), else a new one."""
    adopted = None
    if early is not None and stdin == "pipe":
        adopted = _early.take(argv, cwd, env if env is not None else os.environ, early)
    if adopted is not None:
        popen, argv = adopted
        try:
            return _AdoptedProcess(popen), argv
        except OSError:
            os.killpg(popen.pid, signal.SIGKILL)
            raise
    proc = await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.PIPE if stdin == "pipe" else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    return proc, argv


@asynccontextmanager
async def open_group_process(
    argv: Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: Literal["pipe", "devnull"] = "devnull",
    max_line: int = DEFAULT_MAX_LINE,
    stderr_tail_bytes: int = 64 * 1024,
    grace: float = 2.0,
    exit_drain: float = 0.2,
    name: str | None = None,
    early: _early.Eligible | None = None,
) -> AsyncIterator[GroupProcess]:
    """Run `argv` in its own session/process group; kill the group when the context exits.

    `argv[0]` is resolved with `resolve_executable` (on `env`'s PATH) before anything is
    spawned, and replaced by the absolute path. `env` None means our environment. `early`
    (a session process, stdin a pipe): it may be the process started before the engine
    (procs/early.py).
    """
    if not argv:
        raise ValueError("argv must not be empty")
    label = name or os.path.basename(argv[0]) or argv[0]
    exe = _check_before_spawn(argv[0], env, cwd, label)
    full_argv = [exe, *argv[1:]]
    try:
        proc, full_argv = await _start(full_argv, stdin, cwd, env, early)
    except OSError as exc:
        raise _spawn_error(exc, label, exe, cwd) from exc

    # No checkpoint between the spawn and this try: the process can never be left behind.
    gp = GroupProcess(
        proc,
        full_argv,
        label,
        max_line=max_line,
        stderr_tail_bytes=stderr_tail_bytes,
        grace=grace,
        exit_drain=exit_drain,
    )
    _log.debug("%s: started pid %d: %s", label, gp.pid, full_argv)
    ledger = current_ledger()
    if ledger is not None:
        ledger.add_group(gp.pgid)
    body_exc: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            gp._nursery = nursery
            nursery.start_soon(gp._drain_stderr)
            nursery.start_soon(gp._watch)
            try:
                yield gp
            except BaseException as exc:
                # Re-raised below, outside the nursery, so callers get their own exception
                # rather than an ExceptionGroup wrapping it.
                body_exc = exc
            finally:
                with trio.CancelScope(shield=True):
                    await gp.terminate()
                    # Collect the final stderr for stderr_tail(); an unkillable straggler
                    # holding the pipe must not block us.
                    with trio.move_on_after(exit_drain):
                        await gp._stderr_eof.wait()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await gp.terminate()  # no-op unless the nursery itself failed
            if ledger is not None and not gp.survivors:
                ledger.remove_group(gp.pgid)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    await stream.aclose()  # our pipe ends; a straggler then gets EPIPE
    if body_exc is not None:
        raise body_exc
