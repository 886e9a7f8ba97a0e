"""A `codex app-server` of one thread listening on a loopback WebSocket (tui mode): its TUI
attaches with `codex --remote ws://…` and threadline is a second client on the same server.

Measured on codex 0.169.0: `--listen ws://127.0.0.1:0` picks a free port and prints it on
stderr (`listening on: ws://127.0.0.1:<port>`) once it listens; every JSON-RPC message is one
text frame. The server is threadline's own child (process ledger, killed with its group):
no daemon of Codex's runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio
from trio_websocket import wrap_client_stream

from ...procs.group import GroupProcess
from ...rpc.transport import StreamTransport
from ...rpc.ws_lines import WsLineStream
from .. import base as b
from .host import EXIT_GRACE, CodexHost
from .invocation import _exit_error

__all__ = ["CodexWsHost"]

log = logging.getLogger("threadline.backend.codex")

_LISTENING = re.compile(r"listening on: (ws://127\.0\.0\.1:(\d+))")
#: How long the app-server may take to listen.
_LISTEN_TIMEOUT = 30.0
_MAX_MESSAGE = 64 * 1024 * 1024


class CodexWsHost(CodexHost):
    """`CodexHost` over a WebSocket: `url` is where the TUI attaches (set once it listens)."""

    def __init__(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> None:
        super().__init__([*argv, "--listen", "ws://127.0.0.1:0"], cwd, env)
        self.url: str | None = None

    @asynccontextmanager
    async def _link(self, proc: GroupProcess, nursery: trio.Nursery) -> AsyncIterator[Any]:
        """A WebSocket connection to the app-server, once it listens."""
        url, port = await self._listening()
        self.url = url
        async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
            ws = await wrap_client_stream(
                nursery, stream, "127.0.0.1", "/", max_message_size=_MAX_MESSAGE
            )
            frames = WsLineStream(ws)
            yield StreamTransport(frames, frames)

    async def _shut_down(self, proc: GroupProcess) -> None:
        """Stopping: a listening app-server does not end at stdin's EOF."""
        with trio.CancelScope(shield=True):
            await proc.terminate(EXIT_GRACE)

    async def _listening(self) -> tuple[str, int]:
        """The server's URL and port, once its stderr says it listens."""
        proc = self.proc
        assert proc is not None
        with trio.move_on_after(_LISTEN_TIMEOUT):
            while proc.returncode is None:
                found = _LISTENING.search(proc.stderr_tail(8000))
                if found:
                    return found.group(1), int(found.group(2))
                await trio.sleep(0.02)
            raise _exit_error(proc, "exited during start-up")
        raise b.BackendError(
            f"codex app-server did not listen within {_LISTEN_TIMEOUT:.0f} s",
            codex_error_info="other",
        )
