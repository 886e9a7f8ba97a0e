"""A WebSocket client connection as the newline-delimited byte stream the JSON-RPC layer
reads and writes: each line written is one text frame, each frame received reads as one
line (the Python client's `ws://` transport, and the codex tui mode's link to its
app-server)."""

from __future__ import annotations

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

__all__ = ["WsLineStream"]


class WsLineStream(trio.abc.Stream):
    def __init__(self, ws: WebSocketConnection) -> None:
        self._ws = ws

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            for line in bytes(data).split(b"\n"):
                if line:
                    await self._ws.send_message(line.decode())
        except ConnectionClosed as exc:
            raise trio.BrokenResourceError(str(exc)) from None

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            message = await self._ws.get_message()
        except ConnectionClosed:
            return b""
        return (message.encode() if isinstance(message, str) else message) + b"\n"

    async def aclose(self) -> None:
        await self._ws.aclose()
