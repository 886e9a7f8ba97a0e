"""Codex backend.

App-server mode (default): one `codex app-server` child per thread, driven over its own
JSON-RPC (which is also ours): our thread ↔ its thread, our turn ↔ its turn. Its notifications
become normalized events (the engine re-applies every invariant, e.g. it closes the items
Codex leaves open on interrupt); its approval requests go through our approval router. One
child per thread rather than one per server: a crash or a hung turn stays confined to its
thread, cancel and resume map 1:1, and the start-up (~0.2-0.5 s) is paid at `thread/start`
(pre-warm), not on a turn. The price is memory per open thread.

Exec mode (`config.mode: "exec"`): `codex exec --json` per turn (`exec resume <id>` later),
prompt on stdin then EOF (exec blocks until stdin closes), no approvals: policy only via the
sandbox flags; cancel kills the process group.

Facts (codex 0.169.0, reference/codex-runtime.md): Codex retries an unreachable provider
forever unless `unbounded_connection_retries` is disabled; an interrupted app-server turn keeps
its running command alive (threadline kills it, or else restarts the child); resume does not keep
the sandbox or approval policy (we send them again).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from ... import protocol as p
from .. import base as b
from ..kit.session_files import codex_rollouts
from ..kit.spawn import running
from .app_server import CodexAppServerSession
from .exec import CodexExecSession
from .invocation import CodexCommand
from .spec import SPEC

__all__ = ["CodexBackend"]

log = logging.getLogger("threadline.backend.codex")


class CodexBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)
        #: The app-servers running for this server's threads (`list_models` asks one).
        self._live: list[CodexAppServerSession] = []

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        codex = CodexCommand.resolved(self.binary(settings))
        if settings.mode == "exec":
            yield CodexExecSession(settings, codex)
            return
        session = CodexAppServerSession(settings, codex)
        async with running(session.run_process, session.close):
            self._live.append(session)
            try:
                yield session
            finally:
                self._live.remove(session)

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
        """Codex's rollout files of the thread (`$CODEX_HOME/sessions/…`, archived ones too)."""
        return codex_rollouts(env, session_id)

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
