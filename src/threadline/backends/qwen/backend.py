"""Qwen Code backend: a long-lived `qwen --acp` per cwd, threads multiplexed as ACP sessions
(the kit's `AcpPool`): streamed text and thoughts, approvals (`session/request_permission`),
`session/cancel`, `session/load` for resume. The model (`thread/start.model`) is passed as
`--model`; the API and its key come from qwen's own configuration (OPENAI_API_KEY,
OPENAI_BASE_URL, OPENAI_MODEL or ~/.qwen/settings.json).

tui mode (`config.mode: "tui"`): the interactive qwen in a tmux session (tui.py)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from .. import base as b
from ..kit.acp import AcpAgent, AcpHost, AcpPool, AcpSession, PooledAcpBackend
from ..kit.native import NativeSession
from .acp import QwenAcpSession, acp_stderr_line
from .invocation import acp_argv
from .native import qwen_sessions
from .spec import SPEC
from .tui import open_qwen_tui

__all__ = ["QwenBackend", "create"]

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


class QwenBackend(PooledAcpBackend):
    def __init__(self) -> None:
        super().__init__(SPEC, AcpPool("qwen --acp", acp_stderr_line))

    def agent(self, settings: b.SessionSettings, binary: str) -> AcpAgent:
        return AcpAgent(acp_argv(binary, settings), dict(settings.env))

    def new_session(self, host: AcpHost, settings: b.SessionSettings) -> AcpSession:
        return QwenAcpSession(host, settings)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        if settings.mode != "tui":
            async with super().session(settings) as session:
                yield session
            return
        async with open_qwen_tui(settings, self.binary(settings)) as tui:
            yield tui

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
        """qwen's record of the session: `~/.qwen/projects/<project>/chats/<id>.jsonl`."""
        if not _SAFE_ID.match(session_id):
            return []
        home = env.get("HOME") or os.path.expanduser("~")
        projects = os.path.join(glob.escape(home), ".qwen", "projects")
        return glob.glob(os.path.join(projects, "*", "chats", f"{session_id}.jsonl"))

    def native_sessions(self, env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
        return qwen_sessions(env, cwd)


def create() -> QwenBackend:
    return QwenBackend()
