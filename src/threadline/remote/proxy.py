"""`threadline proxy`: this process's stdin/stdout bridged to a running listener server, so
`ssh host threadline proxy` gives any stdio client a remote threadline (SSH secures the
transport). Each stdin line goes out as one text frame; each frame comes back as one stdout
line. It ends when stdin closes (the connection is then closed) or the server goes away."""

from __future__ import annotations

import logging
import os
import sys

import trio
from trio_websocket import (
    ConnectionClosed,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

from ..rpc.framing import LineReader, LineTooLong
from .address import ListenAddress

__all__ = ["ProxyError", "run_proxy"]

log = logging.getLogger("threadline.proxy")

_MAX_MESSAGE = 64 * 1024 * 1024


class ProxyError(Exception):
    """The server cannot be reached or refused the connection (message says why)."""


async def _open(address: ListenAddress) -> trio.SocketStream:
    try:
        if address.kind == "unix":
            return await trio.open_unix_socket(address.path)
        return await trio.open_tcp_stream(address.host, address.port)
    except OSError as exc:
        raise ProxyError(f"cannot connect to {address.url()}: {exc.strerror or exc}") from None


async def run_proxy(address: ListenAddress, token: str | None) -> None:
    """Bridge stdio to the server at `address` until either side ends."""
    headers = [(b"Authorization", f"Bearer {token}".encode())] if token else None
    stream = await _open(address)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    async with stream, stdin, stdout, trio.open_nursery() as nursery:
        try:
            ws = await wrap_client_stream(
                nursery,
                stream,
                "localhost",
                "/",
                extra_headers=headers,
                max_message_size=_MAX_MESSAGE,
            )
        except HandshakeError as exc:
            raise ProxyError(f"{address.url()} refused the connection: {exc}") from None
        nursery.start_soon(_upstream, ws, stdin, nursery.cancel_scope)
        await _downstream(ws, stdout)
        nursery.cancel_scope.cancel()


async def _upstream(
    ws: WebSocketConnection, stdin: trio.abc.ReceiveStream, scope: trio.CancelScope
) -> None:
    reader = LineReader(stdin, max_line=_MAX_MESSAGE)
    try:
        while True:
            try:
                line = await reader.receive_line()
            except LineTooLong as exc:
                log.warning("dropped an oversized line: %s", exc)
                continue
            if line is None:
                break
            if line.strip():
                await ws.send_message(line.decode("utf-8", errors="replace"))
    except ConnectionClosed:
        pass
    with trio.move_on_after(2):
        await ws.aclose()
    scope.cancel()


async def _downstream(ws: WebSocketConnection, stdout: trio.abc.SendStream) -> None:
    while True:
        try:
            message = await ws.get_message()
        except ConnectionClosed:
            return
        data = message.encode() if isinstance(message, str) else message
        try:
            await stdout.send_all(data + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return


def proxy_main(address: ListenAddress, token: str | None) -> int:
    try:
        trio.run(run_proxy, address, token)
    except ProxyError as exc:
        print(f"threadline proxy: {exc}", file=sys.stderr)
        return 1
    return 0
