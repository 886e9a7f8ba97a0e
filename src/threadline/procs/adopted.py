"""Process groups threadline did not start itself but answers for: a program a terminal
multiplexer runs for it (tmux starts a pane's program as a new session, pgid == pid).

`adopt_group_process(pid)` watches such a group like `open_group_process` watches its own:
recorded in the process ledger, its escaped descendants remembered (and recorded), and the
whole of it killed (SIGTERM, grace, SIGKILL) when the block ends, for any reason. Its exit
status is not ours to read (its parent reaps it): a group whose leader is gone reads 0.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .group import GroupProcess
from .ledger import current_ledger, proc_stat

__all__ = ["adopt_group_process"]


class _NoOutput(trio.abc.ReceiveStream):
    """The pipes of a process we did not start: none (read as EOF at once)."""

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        return b""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class _PidProcess:
    """A leader known by pid and start time only (a reused pid reads as gone)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        st = proc_stat(pid)
        self._start = st[2] if st is not None else -1
        self._rc: int | None = None if st is not None else 0
        self.stdin: trio.abc.SendStream | None = None
        self.stdout: trio.abc.ReceiveStream | None = _NoOutput()
        self.stderr: trio.abc.ReceiveStream | None = _NoOutput()

    def poll(self) -> int | None:
        if self._rc is None:
            st = proc_stat(self.pid)
            if st is None or st[2] != self._start or st[0] in ("Z", "X"):
                self._rc = 0
        return self._rc

    async def wait(self) -> int:
        while self.poll() is None:
            try:
                pidfd = os.pidfd_open(self.pid)
            except ProcessLookupError:
                self._rc = 0
                break
            try:
                if self.poll() is None:  # (checked after the open: the fd is this process's)
                    await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
        return self._rc or 0


@asynccontextmanager
async def adopt_group_process(
    pid: int, name: str, *, grace: float = 2.0
) -> AsyncIterator[GroupProcess]:
    """The process group led by `pid` (started by someone else as a new session), killed
    with everything it started when the block ends."""
    gp = GroupProcess(
        _PidProcess(pid),
        [name],
        name,
        max_line=1024,
        stderr_tail_bytes=0,
        grace=grace,
        exit_drain=0.0,
    )
    ledger = current_ledger()
    if ledger is not None:
        ledger.add_group(gp.pgid)
    body_exc: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            gp._nursery = nursery
            nursery.start_soon(gp._watch)
            try:
                yield gp
            except BaseException as exc:
                body_exc = exc  # (re-raised outside the nursery: not as a group)
            finally:
                with trio.CancelScope(shield=True):
                    await gp.terminate()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await gp.terminate()
            if ledger is not None and not gp.survivors:
                ledger.remove_group(gp.pgid)
    if body_exc is not None:
        raise body_exc
