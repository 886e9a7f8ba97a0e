"""Line transports: where a JSON-RPC `Endpoint` reads lines from and writes lines to.

A transport is anything with `read_line()` and `write()`: `StreamTransport` over a pair of trio
byte streams (in-memory streams, sockets, a spawned process's pipes), or a
`backends.process.GroupProcess`, which already reads and writes its CLI's stdio that way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import trio

from .framing import DEFAULT_MAX_LINE, LineReader

__all__ = ["LineTransport", "StreamTransport", "Trace", "TracedTransport"]

#: Sees every line, without its newline: ("send" | "receive", line).
Trace = Callable[[Literal["send", "receive"], bytes], None]


class LineTransport(Protocol):
    async def read_line(self) -> bytes | None:
        """The next line without its newline; None once the peer's output has ended.
        May raise `framing.LineTooLong` (the line is skipped; reading goes on)."""

    async def write(self, data: bytes) -> None:
        """Write whole `\\n`-terminated lines; concurrent calls never interleave. Any exception
        means the peer cannot be written to any more."""


class StreamTransport:
    """A `LineTransport` over a send stream and a receive stream."""

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        max_line: int = DEFAULT_MAX_LINE,
    ) -> None:
        self._send = send
        self._reader = LineReader(receive, max_line)
        self._lock = trio.Lock()

    async def read_line(self) -> bytes | None:
        return await self._reader.receive_line()

    async def write(self, data: bytes) -> None:
        async with self._lock:
            await self._send.send_all(data)

    async def aclose(self) -> None:
        """Close the sending side (the peer sees EOF) once no line is half written."""
        async with self._lock:
            await self._send.aclose()


class TracedTransport:
    """A transport that shows every line it carries to `trace` (a wire log, a transcript)."""

    def __init__(self, inner: LineTransport, trace: Trace) -> None:
        self._inner = inner
        self._trace = trace

    async def read_line(self) -> bytes | None:
        line = await self._inner.read_line()
        if line is not None:
            self._trace("receive", line)
        return line

    async def write(self, data: bytes) -> None:
        for line in data.removesuffix(b"\n").split(b"\n"):
            self._trace("send", line)
        await self._inner.write(data)
