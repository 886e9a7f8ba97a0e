"""Gemini CLI backend.

ACP mode (default): a long-lived `gemini --acp` per cwd, threads multiplexed as ACP sessions
(`backends/kit/acp.py`): streamed text and thoughts, real approvals (`session/request_permission`),
`session/cancel`, `session/load` for resume.

Headless mode (`config.mode: "headless"`): `gemini -p … -o stream-json` per turn with
`--session-id` on the first turn and `--resume` after; approvals by policy only
(`--approval-mode`); cancel kills the CLI's process group and every descendant (the shell tool
runs in its own process group, so a group signal alone leaves it behind).

Facts (gemini 0.61.0, reference/gemini-cli.md): a relaunched child ignores signals to the parent
(`GEMINI_CLI_NO_RELAUNCH=1` keeps one process); exit codes 41 auth, 42 input, 55 untrusted
folder, HTTP status & 0xFF for API errors; an ACP `session/load` within the same wall-clock
minute as the session file's name wipes the session — we wait for the next minute.

tui mode (`config.mode: "tui"`): the interactive gemini in a tmux session (tui.py).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial

from .. import base as b
from ..kit.acp import AcpAgent, AcpHost, AcpPool, AcpSession, PooledAcpBackend
from ..kit.native import NativeSession
from .acp import GeminiAcpSession, _wait_out_session_minute
from .headless import GeminiHeadlessSession
from .invocation import _env, _model_flags
from .mcp import DEBUG_LOG
from .native import gemini_sessions
from .sessions import prune_empty, session_files
from .spec import SPEC
from .tui import open_gemini_tui

__all__ = ["GeminiBackend"]

log = logging.getLogger("threadline.backend.gemini")


class GeminiBackend(PooledAcpBackend):
    per_turn_mode = "headless"

    def __init__(self) -> None:
        # (Never started early, procs/early.py: each agent has a debug log of its own.)
        super().__init__(SPEC, AcpPool("gemini --acp", before_start=_before_agent_start))
        self._logs: str | None = None

    def _debug_log(self) -> str:
        """The path of a new agent's debug log (where it names the MCP servers that failed to
        start), in a private directory removed when threadline exits."""
        if self._logs is None:
            self._logs = tempfile.mkdtemp(prefix="threadline-gemini-acp-")
            weakref.finalize(self, shutil.rmtree, self._logs, ignore_errors=True)
        return os.path.join(self._logs, f"{uuid.uuid4().hex}.log")

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        if settings.mode != "tui":
            async with super().session(settings) as session:
                yield session
            return
        async with open_gemini_tui(settings, self.binary(settings)) as tui:
            yield tui

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
        return session_files(env, session_id)

    def native_sessions(self, env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
        return gemini_sessions(env, cwd)

    def per_turn_session(self, settings: b.SessionSettings, binary: str) -> b.BackendSession:
        return GeminiHeadlessSession(settings, binary)

    def agent(self, settings: b.SessionSettings, binary: str) -> AcpAgent:
        env = _env(settings)
        if not env.get(DEBUG_LOG):  # (an agent may serve later threads' servers too)
            env[DEBUG_LOG] = self._debug_log()
        return AcpAgent([binary, "--acp", *_model_flags(settings)], env)

    def new_session(self, host: AcpHost, settings: b.SessionSettings) -> AcpSession:
        session = GeminiAcpSession(host, settings, "gemini")
        session.before_load = partial(_wait_out_session_minute, env=_env(settings))
        session.debug_log = host.env.get(DEBUG_LOG)
        return session


def _before_agent_start(env: Mapping[str, str]) -> None:
    """Right before an agent starts and runs gemini's session cleanup: the empty duplicates
    that would make that cleanup delete a session's whole history go first (sessions.py)."""
    for path in prune_empty(env):
        log.info("removed gemini's empty duplicate session file %s", path)


def create() -> GeminiBackend:
    return GeminiBackend()
