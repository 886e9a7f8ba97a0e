"""Claude Code's print mode: `claude -p --output-format stream-json` spawned per turn."""

from __future__ import annotations

import os

from .. import base as b
from ..kit.per_turn import open_turn_process, prompt_with_bootstrap
from ..kit.usage import UsageTotals
from .invocation import (
    _base_argv,
    _env,
    _failure_from_exit,
    _finish_turn,
    _missing_session,
    _session_flag,
)
from .mapping import ClaudeTurnMapper, api_url

__all__ = ["ClaudePrintSession"]


class ClaudePrintSession(b.BackendSession):
    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        self.settings = settings
        self.binary = binary
        self._usage = UsageTotals()
        self.unsaved = unsaved if unsaved is not None else set()

    def argv(self) -> list[str]:
        flags, _ = _session_flag(self.settings, self.unsaved)
        argv = [*_base_argv(self.settings, self.binary), "-p", *flags]
        if self.settings.approval_policy == "never":
            argv += _unattended_flags()
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper = ClaudeTurnMapper(cwd=self.settings.cwd, url=api_url(self.settings.env))
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        async with open_turn_process(
            self.argv(),
            prompt=prompt_with_bootstrap(turn),
            cwd=self.settings.cwd,
            env=_env(self.settings),
            name="claude -p",
        ) as proc:
            while (message := await proc.read_json_object()) is not None:
                if message.get("type") == "system" and message.get("subtype") == "init":
                    sid = message.get("session_id")
                    if isinstance(sid, str):
                        await ctx.set_backend_session_id(sid)
                        self.settings.backend_session_id = sid
                        self.unsaved.discard(sid)
                if message.get("type") == "result":
                    missing = _missing_session(message)
                    if missing is not None:
                        # Never saved (an earlier turn was killed first): the engine runs
                        # the turn again, which starts the conversation afresh.
                        self.unsaved.add(missing)
                        raise b.SessionLost(
                            f"claude has no saved conversation {missing}; starting it afresh"
                        )
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
