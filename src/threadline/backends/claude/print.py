"""Claude Code's print mode: `claude -p --output-format stream-json` spawned per turn."""

from __future__ import annotations

import os

from .. import base as b
from ..kit.per_turn import PerTurnCliSession, prompt_with_bootstrap
from .invocation import ClaudeSession, _env, _failure_from_exit, _finish_turn
from .mapping import ClaudeTurnMapper, api_url

__all__ = ["ClaudePrintSession"]


class ClaudePrintSession(ClaudeSession, PerTurnCliSession):
    process_name = "claude -p"

    def argv(self) -> list[str]:
        argv = self.claude_argv("-p")
        if self.settings.approval_policy == "never":
            argv += _unattended_flags()
        return argv

    def process_env(self) -> dict[str, str]:
        return _env(self.settings)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper = ClaudeTurnMapper(cwd=self.settings.cwd, url=api_url(self.settings.env))
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        async with self.turn_process(prompt_with_bootstrap(turn)) as proc:
            while (message := await proc.read_json_object()) is not None:
                await self.note_init(message, ctx)
                if message.get("type") == "result":
                    self._check_resumable(message)
                    return await _finish_turn(mapper.result(message), ctx, self._usage)
                for event in mapper.feed(message):
                    await ctx.emit(event)
                if mapper.give_up is not None:
                    return b.TurnOutcome("failed", mapper.give_up)  # (stops the CLI)
            await proc.wait()
            raise _failure_from_exit(proc, "exited without a result")


def _unattended_flags() -> list[str]:
    # The CLI refuses --dangerously-skip-permissions as root; there, pre-approve the tools.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return [
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Bash,Edit,Write,MultiEdit,NotebookEdit,WebFetch,WebSearch",
        ]
    return ["--dangerously-skip-permissions"]
