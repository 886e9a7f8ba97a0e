"""Codex backend.

App-server mode (default): a thread is a Codex thread on a `codex app-server`, driven over its
JSON-RPC (which is also ours): our thread ↔ its thread, our turn ↔ its turn. Its notifications
become normalized events (the engine re-applies every invariant, e.g. it closes the items
Codex leaves open on interrupt); its approval requests go through our approval router. One
app-server serves every thread of the server with the same binary, environment (CODEX_HOME,
...) and process-level `codexConfig` keys: `pool.CodexPool`, messages routed by Codex thread id
(`host.CodexHost`). Isolation holds per turn: a process that dies fails the turns it was
running (the other threads resume on a new process at their next turn); one that does not end
an abandoned turn is retired (new threads get a new process); an interrupt kills only its own
thread's commands (`commands`). `THREADLINE_CODEX_SHARED=0` gives each thread a process of its
own. The first thread pays the start-up (~0.2-0.5 s) at `thread/start` (pre-warm); later
threads only a `thread/start`.

Exec mode (`config.mode: "exec"`): `codex exec --json` per turn (`exec resume <id>` later),
prompt on stdin then EOF (exec blocks until stdin closes), no approvals: policy only via the
sandbox flags; cancel kills the process group.

tui mode (`config.mode: "tui"`): the interactive Codex TUI in a tmux session, attached with
`--remote` to an app-server of the thread's own that threadline also drives (tui.py).

Facts (codex 0.169.0, reference/codex-runtime.md): Codex retries an unreachable provider
forever unless `unbounded_connection_retries` is disabled; an interrupted app-server turn keeps
its running command alive (threadline kills the thread's own commands: `commands`); resume does
not keep the sandbox or approval policy (we send them again).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from ... import protocol as p
from .. import base as b
from ..kit.native import NativeSession
from ..kit.session_files import codex_rollouts
from .app_server import CodexAppServerSession, app_server_argv
from .exec import CodexExecSession
from .invocation import CodexCommand
from .native import codex_sessions
from .pool import CodexPool
from .spec import SPEC
from .tui import open_codex_tui

__all__ = ["CodexBackend"]

log = logging.getLogger("threadline.backend.codex")


class CodexBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)
        self._pool = CodexPool()
        #: The app-server sessions of this server's threads (`list_models` asks one).
        self._live: list[CodexAppServerSession] = []

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        codex = CodexCommand.resolved(self.binary(settings))
        if settings.mode == "exec":
            yield CodexExecSession(settings, codex)
            return
        if settings.mode == "tui":
            async with open_codex_tui(settings, codex) as tui:
                self._live.append(tui)
                try:
                    yield tui
                finally:
                    self._live.remove(tui)
            return
        shared = settings.env.get("THREADLINE_CODEX_SHARED", "1").strip() not in ("0", "false")
        argv = app_server_argv(codex, settings)
        async with self._pool.host(argv, settings.cwd, codex.env(settings), shared=shared) as host:
            session = CodexAppServerSession(settings, codex, host)
            try:
                await session.open()
                self._live.append(session)
                yield session
            finally:
                # The idle policy waited already: an app-server whose last thread it
                # released goes.
                host.linger = not session.released
                with trio.CancelScope(shield=True):
                    if session in self._live:
                        self._live.remove(session)
                    await session.detach()

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
        """Codex's rollout files of the thread (`$CODEX_HOME/sessions/…`, archived ones too)."""
        return codex_rollouts(env, session_id)

    def native_sessions(self, env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
        return codex_sessions(env, cwd)

    async def list_models(self) -> list[p.Model]:
        """Codex's own `model/list`, from an app-server running for one of the threads; the
        spec's models while none runs (starting one only to ask would cost ~0.2-0.5 s)."""
        for session in list(self._live):
            if session.healthy and not session.exited.is_set():
                models = await session.list_models()
                if models:
                    return models
        return self.models()


def create() -> CodexBackend:
    return CodexBackend()
