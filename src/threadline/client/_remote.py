"""`connect_url`: the Python client over a running listener server, `ws://IP:PORT` or
`unix://PATH` (one JSON-RPC message per text frame), instead of a spawned one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from ..remote.address import parse_listen
from ._client import ApprovalHandler, Client, connected

__all__ = ["connect_url"]

_MAX_MESSAGE = 64 * 1024 * 1024


class _FrameStream(trio.abc.Stream):
    """A WebSocket as a newline-delimited byte stream: each line written is one text frame,
    each frame received reads as one line."""

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


@asynccontextmanager
async def connect_url(
    url: str,
    *,
    token: str | None = None,
    approval_handler: ApprovalHandler | None = None,
    initialize: bool = True,
    client_name: str = "threadline.client",
) -> AsyncIterator[Client]:
    """Connect to a server started with `--listen URL`; `token` is sent as the bearer token
    (`--ws-auth`). Leaving the block closes the connection; the server and its turns go on."""
    address = parse_listen(url, default_unix="")
    if address.kind == "unix":
        stream = await trio.open_unix_socket(address.path)
    elif address.kind == "ws":
        stream = await trio.open_tcp_stream(address.host, address.port)
    else:
        raise ValueError(f"connect_url needs a ws:// or unix:// URL, not {url}")
    headers = [(b"Authorization", f"Bearer {token}".encode())] if token else None
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery, stream, "localhost", "/", extra_headers=headers, max_message_size=_MAX_MESSAGE
        )
        frames = _FrameStream(ws)
        client = Client(frames, frames, approval_handler=approval_handler)
        async with connected(client, initialize=initialize, client_name=client_name) as c:
            yield c
        nursery.cancel_scope.cancel()
