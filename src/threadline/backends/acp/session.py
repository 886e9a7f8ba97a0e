"""One thread on any ACP agent: the kit's session, with what the agent offers checked first."""

from __future__ import annotations

import shlex

from .. import base as b
from ..kit.acp import AcpHost, AcpSession
from ..kit.acp.offer import agent_offers

__all__ = ["GenericAcpSession"]


class GenericAcpSession(AcpSession):
    """Resumes (`session/load`) only if the agent's `initialize` answer offers it
    (`agentCapabilities.loadSession`); images, model changes and forks likewise go only where
    the agent offers them (the kit's session checks)."""

    def __init__(self, host: AcpHost, settings: b.SessionSettings, command: list[str]) -> None:
        super().__init__(host, settings, "acp")
        self.command = shlex.join(command)

    async def open(self) -> None:
        if self.settings.backend_session_id and not agent_offers(
            self.host.init_result, "loadSession"
        ):
            raise b.BackendError(
                f"`{self.command}` cannot load a session (its ACP initialize answer does not"
                " offer loadSession), so this thread's conversation cannot be resumed; start"
                " a new thread",
                codex_error_info="other",
            )
        await super().open()
