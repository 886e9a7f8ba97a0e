"""Starting an agent CLI as a process group."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from ...procs.group import GroupProcess, open_group_process
from .cli_binary import resolve_cli

__all__ = ["open_cli_process"]


def open_cli_process(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, **options: Any
) -> AbstractAsyncContextManager[GroupProcess]:
    """`open_group_process` for an agent CLI: when its binary is missing (even one that was
    there when the thread started), the error names the command that installs it."""
    return open_group_process([resolve_cli(argv[0], env), *argv[1:]], env=env, **options)
