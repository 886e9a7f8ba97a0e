"""`Coalescing`: the byte stream under a server WebSocket, and the connection's data writer.

trio-websocket writes every message with its own `send_all` behind a lock (a syscall and a task
switch each: ~6x slower than stdio's coalesced writes on a stream of small deltas). So the
connection's outgoing data frames are built here and a burst of them goes out in one write
(`send_text`). They are the simplest frames RFC 6455 has (server to client: final, text, no
mask, no extension negotiated), so their header is written here: wsproto's frame serializer
copies each payload twice and made the listener 0.70x stdio's throughput instead of 0.95x
(benchmarks/p7_listen.py). trio-websocket and wsproto still do the handshake, all reading and
parsing, and the control frames (ping, pong, close), whose writes pass through `send_all`; one
lock orders all writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import trio

__all__ = ["Coalescing", "text_frame"]

#: One write holds at most about this many bytes of frames.
LIMIT = 256 * 1024


class Coalescing(trio.abc.Stream):
    def __init__(self, inner: trio.abc.Stream) -> None:
        self._inner = inner
        self._lock = trio.Lock()  # one inner send at a time (data, pings, pongs, close)

    async def send_text(self, messages: Sequence[bytes], still_open: Callable[[], bool]) -> bool:
        """Send each message (UTF-8 JSON) as one final text frame, in as few writes as
        `LIMIT` allows; False (nothing sent) once `still_open()` says the close handshake
        has begun: no data frame may follow a close frame."""
        chunk = bytearray()
        async with self._lock:
            if not still_open():
                return False
            for message in messages:
                chunk += text_frame(message)
                if len(chunk) >= LIMIT:
                    await self._inner.send_all(bytes(chunk))
                    chunk.clear()
            if chunk:
                await self._inner.send_all(bytes(chunk))
        return True

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        async with self._lock:
            await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return bytes(await self._inner.receive_some(max_bytes))

    async def aclose(self) -> None:
        await self._inner.aclose()


def text_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame holding `payload` (RFC 6455 section 5.2: the 7-bit length,
    or 126 + a 16-bit length, or 127 + a 64-bit length, in network order)."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 1 << 16:
        return b"\x81\x7e" + size.to_bytes(2, "big") + payload
    return b"\x81\x7f" + size.to_bytes(8, "big") + payload
