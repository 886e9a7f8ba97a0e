"""The server side of one WebSocket (trio-websocket over wsproto), with two repairs.

- A frame wsproto cannot accept (invalid UTF-8 in a text message: 1007; any other protocol
  error, such as an unknown opcode: 1002) comes out of wsproto as a `CloseConnection` event
  while the connection is still OPEN. trio-websocket answers a close only in REMOTE_CLOSING, so
  it dropped the socket without a close frame (the client saw 1006). That event is reported in
  REMOTE_CLOSING here, so trio-websocket sends wsproto's close frame, with wsproto's code, before
  it closes the socket (RFC 6455 §7.1.7).
- trio-websocket measures a message's size with `len()`: characters for text, so a text message
  of up to 4x the cap in UTF-8 bytes got through. The cap is counted in bytes here, as on stdio
  (and as Codex does); a message over it fails the connection the same way, with 1009."""

from __future__ import annotations

from collections.abc import Generator

import trio
from trio_websocket import WebSocketConnection
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection, Event, Message

__all__ = ["accept_websocket"]


class _ServerConnection(WSConnection):
    def __init__(self, max_message_bytes: int) -> None:
        super().__init__(ConnectionType.SERVER)
        self._max = max_message_bytes
        self._size = 0  # bytes of the message being received
        self._failed = False

    @property
    def state(self) -> ConnectionState:
        state = super().state
        if self._failed and state is ConnectionState.OPEN:
            return ConnectionState.REMOTE_CLOSING  # until the close frame is sent
        return state

    def events(self) -> Generator[Event]:
        for event in super().events():
            if isinstance(event, CloseConnection) and super().state is ConnectionState.OPEN:
                self._failed = True  # wsproto's verdict on a bad frame, not the client's close
            elif isinstance(event, Message):
                self._size += _size(event.data)
                if self._size > self._max:
                    self._failed = True
                    yield CloseConnection(1009, f"message over {self._max} bytes")
                    return
                if event.message_finished:
                    self._size = 0
            yield event


def _size(data: str | bytes) -> int:
    return len(data) if isinstance(data, bytes) or data.isascii() else len(data.encode())


async def accept_websocket(
    nursery: trio.Nursery, stream: trio.abc.Stream, *, max_message_size: int
) -> WebSocketConnection:
    """Accept the upgrade on `stream` (`trio_websocket.wrap_server_stream` and `accept()`, with
    the connection above); the reader task runs in `nursery`. Messages may have up to
    `max_message_size` bytes."""
    connection = WebSocketConnection(
        stream, _ServerConnection(max_message_size), max_message_size=max_message_size
    )
    nursery.start_soon(connection._reader_task)
    request = await connection._get_request()
    return await request.accept()
