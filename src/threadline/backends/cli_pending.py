"""Placeholder adapters for the CLI backends whose drivers are not written yet.

They are honest about it: `check()` really looks for the CLI and its version (so `initialize`
and `doctor` report what is installed), capabilities are all false, and a turn fails with a
message saying the driver is not implemented in this version."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from .. import __version__
from ..protocol import BackendCapabilities
from . import base as b
from .process import ProcessError, resolve_executable

__all__ = ["PendingCliBackend"]

_NONE = BackendCapabilities(
    approvals=False, interrupt=False, resume=False, deltas=False, reasoning=False
)


async def cli_version(path: str, timeout: float = 10.0) -> str | None:
    """First line of `<cli> --version`, or None."""
    with trio.move_on_after(timeout):
        try:
            result = await trio.run_process(
                [path, "--version"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=b"",
            )
        except OSError:
            return None
        text = (result.stdout or result.stderr).decode("utf-8", "replace").strip()
        return text.splitlines()[0] if text else None
    return None


class PendingCliBackend(b.Backend):
    def __init__(self, backend_id: str, binary: str, display_name: str, modes: tuple[str, ...]):
        self.id = backend_id
        self.binary = binary
        self.display_name = display_name
        self.modes = modes
        self.default_mode = modes[0]

    def capabilities(self, mode: str) -> BackendCapabilities:
        return _NONE

    async def check(self, cli_path: str | None = None) -> b.BackendCheck:
        try:
            path = resolve_executable(cli_path or self.binary)
        except ProcessError as exc:
            return b.BackendCheck(available=False, message=str(exc))
        version = await cli_version(path)
        return b.BackendCheck(
            available=False,
            path=path,
            version=version,
            message=f"the {self.id} driver is not implemented in threadline {__version__} yet",
        )

    @asynccontextmanager
    async def _session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        raise b.BackendError(
            f"the {self.id} backend is not implemented in threadline {__version__} yet; "
            'use modelProvider "mock" to try the protocol',
        )
        yield  # pragma: no cover

    def session(self, settings: b.SessionSettings) -> Any:
        return self._session(settings)
