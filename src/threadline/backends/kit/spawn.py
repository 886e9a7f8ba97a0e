"""Starting an agent CLI as a process group."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import trio

from ...procs.group import GroupProcess, ProcessError, open_group_process
from .. import base as b
from .cli_binary import resolve_cli

__all__ = ["open_cli_process", "open_session_process", "running"]


def open_cli_process(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, **options: Any
) -> AbstractAsyncContextManager[GroupProcess]:
    """`open_group_process` for an agent CLI: when its binary is missing (even one that was
    there when the thread started), the error names the command that installs it."""
    return open_group_process([resolve_cli(argv[0], env), *argv[1:]], env=env, **options)


@asynccontextmanager
async def open_session_process(
    argv: Sequence[str], *, cwd: str, env: Mapping[str, str], name: str
) -> AsyncIterator[GroupProcess]:
    """A CLI that lives as long as its session, talked to over its stdin: given 3 s to exit
    when the block ends; one that cannot be started or talked to is a BackendError."""
    try:
        async with open_cli_process(
            argv, cwd=cwd, env=env, stdin="pipe", name=name, grace=3.0
        ) as proc:
            yield proc
    except ProcessError as exc:
        raise b.BackendError(str(exc), codex_error_info="other") from None


@asynccontextmanager
async def running(
    run: Callable[..., Awaitable[Any]], stop: Callable[[], None]
) -> AsyncIterator[None]:
    """`run` (a task that says when it has started, as `nursery.start` wants) in a nursery of
    its own for the block; `stop()`, which makes `run` return, when the block ends."""
    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        try:
            yield
        finally:
            stop()
