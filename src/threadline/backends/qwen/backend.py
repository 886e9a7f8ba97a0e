"""Qwen Code backend: a long-lived `qwen --acp` per cwd, threads multiplexed as ACP sessions
(the kit's `AcpPool`): streamed text and thoughts, approvals (`session/request_permission`),
`session/cancel`, `session/load` for resume. The model (`thread/start.model`) is passed as
`--model`; the API and its key come from qwen's own configuration (OPENAI_API_KEY,
OPENAI_BASE_URL, OPENAI_MODEL or ~/.qwen/settings.json)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .. import base as b
from ..kit.acp import AcpPool
from .acp import QwenAcpSession
from .invocation import acp_argv
from .spec import SPEC

__all__ = ["QwenBackend", "create"]


class QwenBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)
        self._pool = AcpPool("qwen --acp")

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        argv = acp_argv(self.binary(settings), settings)
        async with self._pool.host(
            argv, settings.cwd, dict(settings.env), session_id=settings.backend_session_id
        ) as host:
            session = QwenAcpSession(host, settings)
            async with session.opened():
                yield session


def create() -> QwenBackend:
    return QwenBackend()
