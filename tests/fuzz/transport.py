"""The fuzz harness's WebSocket transport: a real listener (`threadline app-server --listen
ws://127.0.0.1:0`) and one WebSocket to it, behind the interface of the stdio `ServerProcess`.

Each input line goes out as one text frame; every message the server sends is validated against
`schemas/` (and Codex's schema) and queued exactly as a stdout line is. Lines that cannot be
one text frame of a working connection (invalid UTF-8: the server fails the connection with 1007;
over the request cap: 1009) are not sent here: the frame-level suite (`test_ws_frames`) covers
them."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from tests.support.client import ServerProcess
from tests.support.ws_client import Listening, listening_server

#: The client's own limit on a message from the server (a batch answer may be large).
CLIENT_MAX_MESSAGE = 64 * 1024 * 1024


def unfit_for_frames(data: bytes, cap: int) -> str | None:
    """Why these input lines cannot each be one text frame of a connection that stays open."""
    for line in data.split(b"\n"):
        if len(line) > cap:
            return "ws: a frame over the cap closes the connection (1009)"
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return "ws: invalid UTF-8 in a text frame closes the connection (1007)"
    return None


class WsServer(ServerProcess):
    """A listener process and one WebSocket to it, used as the stdio `ServerProcess` is."""

    def __init__(self, listening: Listening, ws: WebSocketConnection, nursery: trio.Nursery):
        super().__init__(listening.proc, nursery)
        self.ws = ws
        self.stderr = listening.stderr  # the listener's stderr, drained by listening_server
        #: Set when the WebSocket closed before the test closed it.
        self.lost: str | None = None
        self._closing = False

    def _deliver(self, text: str) -> None:
        line = text.encode()
        self.raw_lines.append(line)
        try:
            message = json.loads(line)
        except ValueError:
            self.schema_errors.append(f"non-JSON text frame: {line[:300]!r}")
            return
        self.all_messages.append(message)
        self._validate(message)
        if isinstance(message, dict) and "method" not in message:
            waiter = self._waiters.pop(message.get("id"), None)
            if waiter is not None:
                waiter.send_nowait(message)
                return
        self.events_send.send_nowait(message)

    async def read_frames(self) -> None:
        try:
            while True:
                message = await self.ws.get_message()
                if isinstance(message, bytes):
                    self.schema_errors.append(f"a binary frame from the server: {message[:80]!r}")
                    continue
                self._deliver(message)
        except ConnectionClosed as exc:
            if not self._closing:
                self.lost = f"the WebSocket closed: {exc.reason}"
        finally:
            self.stdout_closed.set()

    async def send_raw(self, data: bytes) -> None:
        """Each line (the text between newlines) as one text frame, in order."""
        lines = data.split(b"\n")
        if lines and not lines[-1]:
            lines.pop()  # the newline that ends the last line
        async with self._send_lock:
            for line in lines:
                await self.ws.send_message(line.decode("utf-8"))

    async def close(self) -> None:
        self._closing = True
        with trio.move_on_after(5):
            await self.ws.aclose()


@contextlib.asynccontextmanager
async def running_ws_server(
    nursery: trio.Nursery, home: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[WsServer]:
    """Start a listener and connect; on exit close the WebSocket, SIGTERM the listener, require
    exit 0 (listening_server) and valid messages."""
    async with listening_server(home, "ws://127.0.0.1:0", env=env) as listening:
        stream = await trio.open_tcp_stream(*listening.http)
        async with stream, trio.open_nursery() as conn:
            ws = await wrap_client_stream(
                conn, stream, "localhost", "/", max_message_size=CLIENT_MAX_MESSAGE
            )
            server = WsServer(listening, ws, nursery)
            conn.start_soon(server.read_frames)
            yield server
            await server.close()
            conn.cancel_scope.cancel()
        assert not server.schema_errors, "\n".join(server.schema_errors[:5])
