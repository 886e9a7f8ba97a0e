"""The app-servers of a server's codex threads: one per (binary, flags, environment),
shared by every thread that needs that much to match, closed a while after its last thread.

What must match is what Codex takes only for the whole process: the binary, the environment
(CODEX_HOME and the rest; not PWD) and the `codexConfig` keys in `invocation.PROCESS_KEYS` (as
`-c` flags). Everything else of a thread (cwd, model, approval and sandbox policy,
instructions, MCP servers, the rest of `codexConfig`) goes in its `thread/start` /
`thread/resume` / `turn/start` params. A process that died under its threads
is replaced at once (the threads that were on it resume their Codex threads on the new one at
their next turn); a retired one (`CodexHost.retire`) takes no new thread.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from ..kit.spawn import running
from .host import CodexHost

__all__ = ["IDLE_CLOSE_SECONDS", "CodexPool"]

log = logging.getLogger("threadline.backend.codex")

#: How long an app-server with no thread stays up (the next thread reuses it).
IDLE_CLOSE_SECONDS = 120.0

_Key = tuple[tuple[str, ...], tuple[tuple[str, str], ...]]


class CodexPool:
    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self._hosts: dict[_Key, CodexHost] = {}
        self._lock = trio.Lock()

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    def live(self) -> list[CodexHost]:
        return [h for h in self._hosts.values() if h.alive]

    @asynccontextmanager
    async def host(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], *, shared: bool = True
    ) -> AsyncIterator[CodexHost]:
        """A running app-server for `argv` and `env` (started in `cwd` when a new one is
        needed). Not `shared`, or no server nursery: a process of the caller's own."""
        nursery = self._nursery
        if nursery is None or not shared:
            private = CodexHost(argv, cwd, env)
            async with running(private.run, private.stop):
                private.refs = 1
                yield private
            return
        key: _Key = (tuple(argv), tuple(sorted((k, v) for k, v in env.items() if k != "PWD")))
        async with self._lock:
            host = self._hosts.get(key)
            if host is None or not host.alive or host.retired:
                host = await self._start(key, argv, cwd, env)
            host.refs += 1
            host.linger = True
            if host.idle_scope is not None:
                host.idle_scope.cancel()
                host.idle_scope = None
        try:
            yield host
        finally:
            host.refs -= 1
            if host.refs == 0:
                if host.retired or not host.alive or not host.linger:
                    self._forget(key, host)
                    host.stop()
                else:
                    nursery.start_soon(self._close_when_idle, key, host)

    async def _start(
        self, key: _Key, argv: Sequence[str], cwd: str, env: dict[str, str]
    ) -> CodexHost:
        """A new process for `key` (the pool's lock held)."""
        assert self._nursery is not None
        host = CodexHost(argv, cwd, env)
        await self._nursery.start(host.run)
        self._hosts[key] = host
        self._nursery.start_soon(self._replace_when_crashed, key, host)
        return host

    async def _replace_when_crashed(self, key: _Key, host: CodexHost) -> None:
        """A process that ended by itself while threads were on it (a crash: their running
        turns failed) is replaced at once, so that their next turns resume their Codex
        threads without waiting for a start-up. The new one closes after the linger if no
        thread comes back."""
        await host.exited.wait()
        if host.stopping or host.refs == 0 or self._nursery is None:
            return
        async with self._lock:
            if self._hosts.get(key) is not host:
                return  # replaced already
            del self._hosts[key]
            try:
                new = await self._start(key, host.argv, host.cwd, host.env)
            except Exception as exc:
                log.warning("codex app-server: restart after a crash failed: %s", exc)
                return
        if new.refs == 0:
            self._nursery.start_soon(self._close_when_idle, key, new)

    def _forget(self, key: _Key, host: CodexHost) -> None:
        if self._hosts.get(key) is host:
            del self._hosts[key]

    async def _close_when_idle(self, key: _Key, host: CodexHost) -> None:
        with trio.CancelScope() as scope:
            host.idle_scope = scope
            await trio.sleep(IDLE_CLOSE_SECONDS)
            if host.refs == 0:
                self._forget(key, host)
                host.stop()
