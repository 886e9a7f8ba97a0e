"""Qwen Code backend: a long-lived `qwen --acp` per cwd, threads multiplexed as ACP sessions
(the kit's `AcpPool`): streamed text and thoughts, approvals (`session/request_permission`),
`session/cancel`, `session/load` for resume. The model (`thread/start.model`) is passed as
`--model`; the API and its key come from qwen's own configuration (OPENAI_API_KEY,
OPENAI_BASE_URL, OPENAI_MODEL or ~/.qwen/settings.json)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .. import base as b
from ..kit.acp import AcpPool, PooledAcpBackend, open_acp_session
from .acp import QwenAcpSession
from .invocation import acp_argv
from .spec import SPEC

__all__ = ["QwenBackend", "create"]


class QwenBackend(PooledAcpBackend):
    def __init__(self) -> None:
        super().__init__(SPEC, AcpPool("qwen --acp"))

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        argv = acp_argv(self.binary(settings), settings)
        async with open_acp_session(
            self._pool, settings, argv, dict(settings.env), QwenAcpSession
        ) as session:
            yield session


def create() -> QwenBackend:
    return QwenBackend()
