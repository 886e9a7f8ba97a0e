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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from .. import base as b
from ..kit.acp import AcpPool, PooledAcpBackend, open_acp_session
from .acp import OpenCodeAcpSession, _acp_stderr_line
from .api import LOG_FLAGS
from .invocation import _env
from .run import OpenCodeRunSession
from .spec import SPEC

__all__ = ["OpenCodeBackend"]

log = logging.getLogger("threadline.backend.opencode")


# -- run mode -------------------------------------------------------------------------------


# -- ACP mode --------------------------------------------------------------------------------------


# -- backend ---------------------------------------------------------------------------------------


class OpenCodeBackend(PooledAcpBackend):
    def __init__(self) -> None:
        super().__init__(SPEC, AcpPool("opencode acp", _acp_stderr_line))

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == "run":
            yield OpenCodeRunSession(settings, binary)
            return
        env = _env(settings)
        key = env["OPENCODE_PERMISSION"] + env.get("OPENCODE_CONFIG_CONTENT", "")
        argv = [binary, "acp", "--cwd", settings.cwd, *LOG_FLAGS]
        async with open_acp_session(
            self._pool, settings, argv, env, OpenCodeAcpSession, key_extra=key
        ) as session:
            yield session


def create() -> OpenCodeBackend:
    return OpenCodeBackend()
