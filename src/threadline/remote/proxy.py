"""`threadline proxy`: this process's stdin/stdout bridged to a running listener server, so
`ssh host threadline proxy` gives any stdio client a remote threadline (SSH secures the
transport). Each stdin line goes out as one text frame; each frame comes back as one stdout
line. It ends when the server goes away, or when stdin has closed and every request sent has
been answered (as the stdio server answers what it read before EOF); then it closes the
connection, and the server's turns go on."""

from __future__ import annotations

import logging
import os
import sys

import msgspec
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
#: After stdin's EOF, how long to wait for the answers still due.
_DRAIN_SECONDS = 60.0


class _Ids(msgspec.Struct):
    id: int | str | None = None
    method: str | None = None


_IDS = msgspec.json.Decoder(_Ids | list[_Ids])


def _requests(data: bytes) -> list[int | str]:
    """The ids of the requests in one message (or batch); [] when it is none or unreadable."""
    try:
        decoded = _IDS.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return []
    batch = decoded if isinstance(decoded, list) else [decoded]
    return [m.id for m in batch if m.id is not None and m.method is not None]


def _responses(data: bytes) -> list[int | str]:
    try:
        decoded = _IDS.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return []
    batch = decoded if isinstance(decoded, list) else [decoded]
    return [m.id for m in batch if m.id is not None and m.method is None]


class _Due:
    """Requests forwarded and not answered yet."""

    def __init__(self) -> None:
        self.ids: set[int | str] = set()
        self.changed = trio.Event()

    def answered(self, ids: list[int | str]) -> None:
        self.ids.difference_update(ids)
        self.changed.set()
        self.changed = trio.Event()

    async def drained(self) -> None:
        while self.ids:
            await self.changed.wait()


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
        due = _Due()
        nursery.start_soon(_upstream, ws, stdin, nursery.cancel_scope, due)
        await _downstream(ws, stdout, due)
        nursery.cancel_scope.cancel()


async def _upstream(
    ws: WebSocketConnection, stdin: trio.abc.ReceiveStream, scope: trio.CancelScope, due: _Due
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
                due.ids.update(_requests(line))
                await ws.send_message(line.decode("utf-8", errors="replace"))
        with trio.move_on_after(_DRAIN_SECONDS):
            await due.drained()
    except ConnectionClosed:
        pass
    with trio.move_on_after(2):
        await ws.aclose()
    scope.cancel()


async def _downstream(ws: WebSocketConnection, stdout: trio.abc.SendStream, due: _Due) -> None:
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
        due.answered(_responses(data))


def proxy_main(address: ListenAddress, token: str | None) -> int:
    try:
        trio.run(run_proxy, address, token)
    except ProxyError as exc:
        sys.stderr.write(f"threadline proxy: {exc}\n")
        return 1
    return 0
