"""OpenCode backend.

ACP mode (default): a long-lived `opencode acp` per cwd (its start-up costs seconds, so never
per turn), threads multiplexed as ACP sessions (`backends/kit/acp.py`).

Run mode (`config.mode: "run"`): `opencode run --format json` per turn, prompt on stdin then
EOF (run reads all of stdin; an open pipe hangs it), `PWD` = the thread's cwd (run prefers
`$PWD` over its real cwd), `--session <id>` for later turns (never `--continue`, which picks the
project's latest session). No interactive approvals: `approvalPolicy: never` → `--auto`;
otherwise OpenCode's own rules. Cancel kills the group and every descendant — the bash tool
runs its commands in their own session, outside the CLI's process group.

OpenCode allows every tool by default, so the thread's approval policy is passed down as
`OPENCODE_PERMISSION` (merged over the user's config): ask for bash/edit/webfetch unless the
policy is `never`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...procs.early import Eligible
from .. import base as b
from ..kit.acp import AcpAgent, AcpHost, AcpPool, AcpSession, PooledAcpBackend
from ..kit.native import NativeSession
from .acp import OpenCodeAcpSession, _acp_stderr_line
from .api import LOG_FLAGS
from .invocation import _env
from .mcp import servers_key
from .run import OpenCodeRunSession
from .sessions import delete_session, list_sessions
from .spec import SPEC

__all__ = ["OpenCodeBackend"]

log = logging.getLogger("threadline.backend.opencode")


class OpenCodeBackend(PooledAcpBackend):
    per_turn_mode = "run"

    def __init__(self) -> None:
        # Its permission rules and the update switch are threadline's settings, not secrets.
        early = Eligible(env_keys=("OPENCODE_DISABLE_AUTOUPDATE", "OPENCODE_PERMISSION"))
        super().__init__(SPEC, AcpPool("opencode acp", _acp_stderr_line, early))

    async def delete_session(self, env: Mapping[str, str], cwd: str, session_id: str) -> str | None:
        return await delete_session(env, cwd, session_id)

    def native_sessions(self, env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
        return list_sessions(env, cwd)

    def per_turn_session(self, settings: b.SessionSettings, binary: str) -> b.BackendSession:
        return OpenCodeRunSession(settings, binary)

    def agent(self, settings: b.SessionSettings, binary: str) -> AcpAgent:
        env = _env(settings, with_model=False)  # (set per session: `OpenCodeAcpSession`)
        # Threads with other permissions or config need an agent of their own; so do threads
        # with other MCP servers (OpenCode adds a session's servers to its whole directory).
        key = env["OPENCODE_PERMISSION"] + env.get("OPENCODE_CONFIG_CONTENT", "")
        key += servers_key(settings.mcp_servers)
        return AcpAgent([binary, "acp", "--cwd", settings.cwd, *LOG_FLAGS], env, key)

    def new_session(self, host: AcpHost, settings: b.SessionSettings) -> AcpSession:
        return OpenCodeAcpSession(host, settings)


def create() -> OpenCodeBackend:
    return OpenCodeBackend()
