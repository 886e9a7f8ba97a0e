"""Agent processes shared by threads: one per (command, cwd, key), closed a while after its
last session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import trio

from ....procs.early import ANY, Eligible
from ..spawn import running
from .host import AcpHost, StderrHandler
from .offer import SessionOffer

__all__ = ["AcpPool"]

#: How long an agent process with no sessions stays up (the next thread reuses it).
IDLE_CLOSE_SECONDS = 120.0


class AcpPool:
    """One agent process per (argv, cwd), shared by the threads in that cwd."""

    def __init__(
        self,
        name: str,
        on_stderr_line: StderrHandler | None = None,
        early: Eligible = ANY,
        before_start: Callable[[Mapping[str, str]], None] | None = None,
    ) -> None:
        self.name = name
        self.on_stderr_line = on_stderr_line
        #: Called with an agent's environment right before it is started.
        self.before_start = before_start
        #: How an agent of the pool may be a process started early (procs/early.py).
        self.early = early
        self._nursery: trio.Nursery | None = None
        self._hosts: dict[tuple[tuple[str, ...], str], AcpHost] = {}
        self._lock = trio.Lock()

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @property
    def defaults(self) -> SessionOffer | None:
        """What a running agent of the pool offered its first new session (its models), if
        any agent runs: the most recently started one's."""
        offers = [h.defaults for h in self._hosts.values() if h.alive and h.defaults]
        return offers[-1] if offers else None

    @asynccontextmanager
    async def host(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        key_extra: str = "",
        session_id: str | None = None,
    ) -> AsyncIterator[AcpHost]:
        """A running agent for `argv` in `cwd` (`key_extra`: whatever else must match for two
        threads to share a process, e.g. the permission config in its environment).

        `session_id`: the ACP session about to be loaded on it. If that session's last prompt
        (an interrupted turn's, see `AcpSession.run_turn`) is still unanswered on the agent,
        the load waits for the answer first; an agent that gave up on it past its deadline
        was retired meanwhile, and a new one is started."""
        if self._nursery is None:
            # No server nursery: a private process for this session.
            if self.before_start is not None:
                self.before_start(env)
            host = AcpHost(argv, cwd, env, self.name, self.on_stderr_line, self.early)
            async with running(host.run, host.stop):
                yield host
            return
        key = (tuple(argv), cwd + "\0" + key_extra)
        while True:
            async with self._lock:
                found = self._hosts.get(key)
                if found is None or not found.alive or found.retired:
                    if self.before_start is not None:
                        self.before_start(env)
                    found = AcpHost(argv, cwd, env, self.name, self.on_stderr_line, self.early)
                    await self._nursery.start(found.run)
                    self._hosts[key] = found
                busy = found.prompts.get(session_id) if session_id else None
                if busy is None or busy.done.is_set():
                    host = found
                    host.refs += 1
                    host.linger = True
                    if host._idle_scope is not None:
                        host._idle_scope.cancel()
                        host._idle_scope = None
                    break
            # (Bounded: an unanswered interrupted prompt has a deadline; see `_Prompt`.)
            await busy.done.wait()
        try:
            yield host
        finally:
            host.refs -= 1
            if host.refs == 0 and (host.retired or not host.linger):
                if self._hosts.get(key) is host:
                    del self._hosts[key]
                host.stop()
            elif host.refs == 0 and self._nursery is not None:
                self._nursery.start_soon(self._close_when_idle, key, host)

    async def _close_when_idle(self, key: tuple[tuple[str, ...], str], host: AcpHost) -> None:
        with trio.CancelScope() as scope:
            host._idle_scope = scope
            await trio.sleep(IDLE_CLOSE_SECONDS)
            if host.refs == 0:
                if self._hosts.get(key) is host:
                    del self._hosts[key]
                host.stop()
