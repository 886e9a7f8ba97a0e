"""Starting an agent CLI as a process group."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import trio

from ...procs.early import ANY, Eligible
from ...procs.group import GroupProcess, ProcessError, open_group_process
from .. import base as b
from .cli_binary import resolve_cli

__all__ = ["LiveCliSession", "open_cli_process", "open_session_process", "running"]


def open_cli_process(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, **options: Any
) -> AbstractAsyncContextManager[GroupProcess]:
    """`open_group_process` for an agent CLI: when its binary is missing (even one that was
    there when the thread started), the error names the command that installs it."""
    return open_group_process([resolve_cli(argv[0], env), *argv[1:]], env=env, **options)


@asynccontextmanager
async def open_session_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    name: str,
    early: Eligible = ANY,
) -> AsyncIterator[GroupProcess]:
    """A CLI that lives as long as its session, talked to over its stdin: given 3 s to exit
    when the block ends; one that cannot be started or talked to is a BackendError. It may be
    the process started before the engine (procs/early.py)."""
    try:
        async with open_cli_process(
            argv, cwd=cwd, env=env, stdin="pipe", name=name, grace=3.0, early=early
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


class LiveCliSession(b.BackendSession):
    """A session whose CLI lives as long as it does, talked to over its stdin.

    `run_process` (run it with `running(session.run_process, session.close)`) starts the CLI,
    lets `opened(proc, nursery)` start reading it and do the handshake, and says it has started;
    after `close()` it closes the CLI's stdin and gives it `exit_grace` seconds to exit (none
    when a turn was `cut_off`: its group is terminated at once). However the CLI ends, the
    session is unhealthy, `exited` is set and `ended()` runs. A subclass's `__init__` sets
    `settings`, `exited` and `closing`."""

    settings: b.SessionSettings
    proc: GroupProcess | None = None
    #: How the CLI may be a process started early (procs/early.py).
    early: Eligible = ANY
    exited: trio.Event
    closing: trio.Event
    #: The CLI's name in process errors and logs.
    process_name: str
    #: How long the CLI may take to exit once its stdin is closed.
    exit_grace: float = 3.0

    def argv(self) -> list[str]:
        raise NotImplementedError

    def process_env(self) -> dict[str, str]:
        raise NotImplementedError

    async def opened(self, proc: GroupProcess, nursery: trio.Nursery) -> None:
        """Start reading the CLI (in `nursery`, which lives as long as the process) and talk
        to it until it is ready for a turn."""

    def ended(self) -> None:
        """The CLI is gone: wake whatever waits for its output."""

    def close(self) -> None:
        self.closing.set()

    async def run_process(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with open_session_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=self.process_env(),
                name=self.process_name,
                early=self.early,
            ) as proc:
                self.proc = proc
                async with trio.open_nursery() as nursery:
                    await self.opened(proc, nursery)
                    task_status.started()
                    await self.closing.wait()
                    # The rule: an idle CLI gets stdin EOF and `exit_grace` to exit by itself
                    # (claude writes its transcript then); one whose turn was cut off would
                    # only exit once that turn ends (claude: not within its 5 s), so its group
                    # is terminated at once (SIGTERM, the group's grace, SIGKILL) on leaving.
                    if not self.cut_off:
                        await proc.close_stdin()
                        with trio.move_on_after(self.exit_grace):
                            await proc.wait()
                    nursery.cancel_scope.cancel()
        finally:
            self.healthy = False
            self.exited.set()
            self.ended()
