"""`connect_url`: the Python client over a running listener server, `ws://IP:PORT` or
`unix://PATH` (one JSON-RPC message per text frame), instead of a spawned one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from trio_websocket import wrap_client_stream

from ..remote.address import parse_listen
from ..rpc.ws_lines import WsLineStream
from ._client import ApprovalHandler, Client, connected

__all__ = ["connect_url"]

_MAX_MESSAGE = 64 * 1024 * 1024


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
        frames = WsLineStream(ws)
        client = Client(frames, frames, approval_handler=approval_handler)
        async with connected(client, initialize=initialize, client_name=client_name) as c:
            yield c
        nursery.cancel_scope.cancel()
