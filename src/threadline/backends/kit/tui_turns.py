"""What the tui sessions whose prompts threadline types into the CLI (claude, qwen, gemini)
share: the pane, whether a turn runs, the prompt a person typed, and how a turn takes its
prompt."""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import trio

from .. import base as b
from .tmux import TmuxPane

__all__ = ["PaneTurns"]


class PaneTurns(abc.ABC):
    """Mixed in before `BackendSession` (its `stop_commands` is this one's)."""

    #: The CLI's name in messages ("claude is not running").
    cli_name: ClassVar[str]
    healthy: bool

    def init_pane_turns(self) -> None:
        self.pane: TmuxPane | None = None
        #: The prompt hook of a prompt a person typed (see `wait_outside_turn`).
        self._outside: dict[str, Any] | None = None
        self._in_turn = False
        self._interrupted_at: float | None = None

    def stop_commands(self, since: float) -> None:
        """Kill the commands the CLI started since `since` (its shell runs each in a process
        group of its own)."""
        if self.pane is not None and self._in_turn:
            self.pane.proc.kill_escaped(since)

    def live_pane(self) -> TmuxPane:
        """The pane, its CLI running; SessionLost (the session unhealthy) when it is not."""
        pane = self.pane
        if pane is None or not pane.alive:
            self.healthy = False
            raise b.SessionLost(f"{self.cli_name} is not running")
        return pane

    async def _failure(self, pane: TmuxPane, what: str) -> b.BackendError:
        """The error that ends the session: `what` happened, with the CLI's last screen (its
        scrollback too once it has exited); the session is unhealthy."""
        self.healthy = False
        try:
            screen = (await pane.capture(history=not pane.alive)).strip()
            if ended := await pane.ended():
                what += f" ({ended})"
        except b.BackendError:
            screen = ""
        tail = "\n".join(line for line in screen.splitlines() if line.strip())[-2000:]
        message = f"{self.cli_name} {what}" + (f"; its screen: {tail}" if tail else "")
        return b.BackendError(message, codex_error_info="other", additional_details=tail or None)

    async def stop_retrying(self, pane: TmuxPane) -> None:
        """Escape ends the CLI's retries of an API it cannot use (once a turn: an interrupt
        was that key already)."""
        if self._interrupted_at is None and pane.alive:
            self._interrupted_at = trio.current_time()
            await pane.keys("Escape")

    async def paste_prompt(self, pane: TmuxPane, text: str) -> None:
        """Paste `text` into the CLI's input; the session's error when the CLI has exited."""
        if not await pane.paste(text):
            raise await self._failure(pane, "exited before taking the prompt")

    @abc.abstractmethod
    async def _submit(self, pane: TmuxPane, text: str) -> dict[str, Any] | None:
        """Type `text` into the CLI; its prompt hook's payload, or None when the turn was
        interrupted before the CLI took it."""

    async def take_prompt(
        self, pane: TmuxPane, turn: b.TurnInput, ctx: b.TurnContext, text: str
    ) -> dict[str, Any] | None:
        """The turn's prompt hook payload: the one a person typed (an outside turn), or the
        one `text` gets once typed (the role bootstrap then counts as delivered); None when
        interrupted before the CLI took it."""
        if turn.outside:
            prompt, self._outside = self._outside or {}, None
            return prompt
        submitted = await self._submit(pane, text)
        if submitted is not None and turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        return submitted
