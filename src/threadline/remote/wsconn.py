"""The server side of one WebSocket (trio-websocket over wsproto), failing it with a close frame.

wsproto reports a frame it cannot accept (invalid UTF-8 in a text message: 1007; any other
protocol error, such as an unknown opcode: 1002) as a `CloseConnection` event while its
connection is still OPEN. trio-websocket answers a close only in REMOTE_CLOSING, so it dropped
the socket without a close frame (the client saw 1006). `_FailingConnection` reports that one
event in REMOTE_CLOSING, so trio-websocket sends wsproto's own close frame with wsproto's code
before it closes the socket (RFC 6455 §7.1.7: fail the connection with a close frame)."""

from __future__ import annotations

from collections.abc import Generator

import trio
from trio_websocket import WebSocketConnection
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection, Event

__all__ = ["accept_websocket"]


class _FailingConnection(WSConnection):
    def __init__(self) -> None:
        super().__init__(ConnectionType.SERVER)
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
            yield event


async def accept_websocket(
    nursery: trio.Nursery, stream: trio.abc.Stream, *, max_message_size: int
) -> WebSocketConnection:
    """Accept the upgrade on `stream` (`trio_websocket.wrap_server_stream` and `accept()`, with
    the connection above); the reader task runs in `nursery`."""
    connection = WebSocketConnection(
        stream, _FailingConnection(), max_message_size=max_message_size
    )
    nursery.start_soon(connection._reader_task)
    request = await connection._get_request()
    return await request.accept()
