"""Claude Code's print mode: `claude -p --output-format stream-json` spawned per turn."""

from __future__ import annotations

import os

import msgspec

from ...procs.group import LineTooLong, ProcessError
from .. import base as b
from ..kit.spawn import open_cli_process
from .invocation import (
    _base_argv,
    _env,
    _failure_from_exit,
    _finish_turn,
    _missing_session,
    _session_flag,
    _UsageTotals,
)
from .mapping import ClaudeTurnMapper, api_url

__all__ = ["ClaudePrintSession"]


class ClaudePrintSession(b.BackendSession):
    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        self.settings = settings
        self.binary = binary
        self._usage = _UsageTotals()
        self.unsaved = unsaved if unsaved is not None else set()

    def argv(self) -> list[str]:
        flags, _ = _session_flag(self.settings, self.unsaved)
        argv = [*_base_argv(self.settings, self.binary), "-p", *flags]
        if self.settings.approval_policy == "never":
            argv += _unattended_flags()
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper = ClaudeTurnMapper(cwd=self.settings.cwd, url=api_url(self.settings.env))
        prompt = f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        decoder = msgspec.json.Decoder()
        try:
            async with open_cli_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=_env(self.settings),
                stdin="pipe",
                name="claude -p",
            ) as proc:
                await proc.write(prompt.encode())
                await proc.close_stdin()
                while True:
                    try:
                        line = await proc.read_line()
                    except LineTooLong:
                        continue
                    if line is None:
                        break
                    try:
                        message = decoder.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if not isinstance(message, dict):
                        continue
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
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None


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
