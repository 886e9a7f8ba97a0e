"""Claude Code's print mode: `claude -p --output-format stream-json` spawned per turn, the turn's
user message written to its stdin as one stream-json message (images included)."""

from __future__ import annotations

import json
import os
from typing import Any

from .. import base as b
from ..kit.per_turn import PerTurnCliSession
from .content import COMPACT, user_line, user_message
from .invocation import ClaudeSession, _env, _failure_from_exit, _finish_turn
from .mapping import ClaudeTurnMapper
from .mcp import failure_message, server_rules

__all__ = ["ClaudePrintSession"]


class ClaudePrintSession(ClaudeSession, PerTurnCliSession):
    process_name = "claude -p"
    #: The running turn's output schema (`--json-schema`), or None.
    _schema: Any = None

    def argv(self) -> list[str]:
        mode = ["-p", "--input-format", "stream-json"]
        if self._schema is not None:
            mode += ["--json-schema", json.dumps(self._schema)]
        if self.settings.approval_policy != "never":
            return self.claude_argv(*mode)
        flags, allowed = _unattended_flags()
        # A process per turn: the policy of this turn decides (the stream mode's CLI outlives
        # a policy change, so there the approval router decides for every call).
        allowed += server_rules(self.settings.mcp_servers, all_servers=True)
        return self.claude_argv(*mode, *flags, allowed=allowed)

    def process_env(self) -> dict[str, str]:
        return _env(self.settings)

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        return frozenset()  # the next spawn reads the settings

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        content = await user_message(turn, self.settings.cwd)
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        self._schema = turn.output_schema
        try:
            mapper = self.mapper(structured=turn.output_schema is not None)
            return await self._run(user_line(content), mapper, ctx)
        finally:
            self._schema = None

    async def compact(self, ctx: b.TurnContext) -> b.TurnOutcome | None:
        return await self._run(user_line(COMPACT), self.mapper(compacting=True), ctx)

    async def _run(
        self, line: bytes, mapper: ClaudeTurnMapper, ctx: b.TurnContext
    ) -> b.TurnOutcome | None:
        async with self.turn_process(line.decode()) as proc:
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
