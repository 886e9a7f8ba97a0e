"""One thread on any ACP agent: the kit's session, with what the agent offers checked first."""

from __future__ import annotations

import shlex
from typing import Any

from .. import base as b
from ..kit.acp import AcpHost, AcpSession
from .images import image_blocks, image_count

__all__ = ["GenericAcpSession"]


class GenericAcpSession(AcpSession):
    """Resumes (`session/load`) and sends images only if the agent's `initialize` answer
    offers them (`agentCapabilities.loadSession`, `promptCapabilities.image`)."""

    def __init__(self, host: AcpHost, settings: b.SessionSettings, command: list[str]) -> None:
        super().__init__(host, settings, "acp")
        self.command = shlex.join(command)
        self._images: list[dict[str, Any]] = []

    def _capability(self, *path: str) -> bool:
        found: Any = self.host.init_result.get("agentCapabilities")
        for key in path:
            found = found.get(key) if isinstance(found, dict) else None
        return found is True

    async def open(self) -> None:
        if self.settings.backend_session_id and not self._capability("loadSession"):
            raise b.BackendError(
                f"`{self.command}` cannot load a session (its ACP initialize answer does not"
                " offer loadSession), so this thread's conversation cannot be resumed; start"
                " a new thread",
                codex_error_info="other",
            )
        await super().open()

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self._images = []
        count = image_count(turn.input)
        if count and not self._capability("promptCapabilities", "image"):
            await ctx.emit(
                b.Warning(
                    f"`{self.command}` does not accept images: {count} left out of the prompt"
                )
            )
        elif count:
            self._images, problems = await image_blocks(turn.input, self.settings.cwd)
            for problem in problems:
                await ctx.emit(b.Warning(f"image left out of the prompt: {problem}"))
        return await super().run_turn(turn, ctx)

    def prompt_content(self, turn: b.TurnInput) -> list[dict[str, Any]]:
        return [*super().prompt_content(turn), *self._images]
