"""A CLI run once per turn: the prompt goes in on its stdin, JSON objects come out on its
stdout (claude print, codex exec, gemini headless, opencode run)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from ...procs.group import GroupProcess, ProcessError
from .. import base as b
from .spawn import open_cli_process

__all__ = ["PerTurnCliSession", "open_turn_process", "prompt_with_bootstrap"]


def prompt_with_bootstrap(turn: b.TurnInput) -> str:
    """The turn's text, after the role bootstrap when the turn carries one."""
    return f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text


@asynccontextmanager
async def open_turn_process(
    argv: Sequence[str],
    *,
    prompt: str,
    cwd: str,
    env: Mapping[str, str],
    name: str,
    on_stderr_line: Callable[[str], None] | None = None,
) -> AsyncIterator[GroupProcess]:
    """Start the CLI with `prompt` written to its stdin (then closed); read its output with
    `read_json_object()`. The process group is killed when the block exits; a CLI that
    cannot be started or talked to is a BackendError."""
    try:
        async with open_cli_process(argv, cwd=cwd, env=env, stdin="pipe", name=name) as proc:
            if on_stderr_line is not None:
                proc.on_stderr_line = on_stderr_line
            await proc.write(prompt.encode())
            await proc.close_stdin()
            yield proc
    except ProcessError as exc:
        raise b.BackendError(str(exc), codex_error_info="other") from None


class PerTurnCliSession(b.BackendSession):
    """A session that runs its CLI once per turn (`turn_process`), as `argv()` and
    `process_env()` say; `process_name` names it in errors."""

    settings: b.SessionSettings
    process_name: str

    def argv(self) -> list[str]:
        raise NotImplementedError

    def process_env(self) -> dict[str, str]:
        raise NotImplementedError

    def turn_process(
        self,
        prompt: str,
        *,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> AbstractAsyncContextManager[GroupProcess]:
        """This turn's CLI in the thread's cwd, `prompt` on its stdin (`env`: instead of
        `process_env()`)."""
        return open_turn_process(
            self.argv(),
            prompt=prompt,
            cwd=self.settings.cwd,
            env=self.process_env() if env is None else env,
            name=self.process_name,
            on_stderr_line=on_stderr_line,
        )
