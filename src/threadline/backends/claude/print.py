"""Claude Code's print mode: `claude -p --output-format stream-json` spawned per turn."""

from __future__ import annotations

import os

from .. import base as b
from ..kit.per_turn import PerTurnCliSession, prompt_with_bootstrap
from .invocation import ClaudeSession, _env, _failure_from_exit, _finish_turn
from .mcp import failure_message, server_rules

__all__ = ["ClaudePrintSession"]


class ClaudePrintSession(ClaudeSession, PerTurnCliSession):
    process_name = "claude -p"

    def argv(self) -> list[str]:
        if self.settings.approval_policy != "never":
            return self.claude_argv("-p")
        flags, allowed = _unattended_flags()
        # A process per turn: the policy of this turn decides (the stream mode's CLI outlives
        # a policy change, so there the approval router decides for every call).
        allowed += server_rules(self.settings.mcp_servers, all_servers=True)
        return self.claude_argv("-p", *flags, allowed=allowed)

    def process_env(self) -> dict[str, str]:
        return _env(self.settings)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper = self.mapper()
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        async with self.turn_process(prompt_with_bootstrap(turn)) as proc:
            while (message := await proc.read_json_object()) is not None:
                await self.note_init(message, ctx)
                for name in self.new_failures(message):
                    # (print mode has no control channel to ask claude for the reason)
                    await ctx.emit(b.Warning(failure_message(name, None)))
                if message.get("type") == "result":
                    self._check_resumable(message)
                    return await _finish_turn(mapper.result(message), ctx, self._usage)
                for event in mapper.feed(message):
                    await ctx.emit(event)
                if mapper.give_up is not None:
                    return b.TurnOutcome("failed", mapper.give_up)  # (stops the CLI)
            await proc.wait()
            raise _failure_from_exit(proc, "exited without a result")


def _unattended_flags() -> tuple[list[str], list[str]]:
    """The flags and `--allowedTools` rules of a run that asks nothing (policy `never`)."""
    # The CLI refuses --dangerously-skip-permissions as root; there, pre-approve the tools.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        tools = ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "WebFetch", "WebSearch"]
        return ["--permission-mode", "acceptEdits"], tools
    return ["--dangerously-skip-permissions"], []
