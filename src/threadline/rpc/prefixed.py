"""Streams whose first received bytes are ones already read from them (a look-ahead)."""

from __future__ import annotations

import trio

__all__ = ["PrefixedReceiveStream", "PrefixedStream"]


class PrefixedReceiveStream(trio.abc.ReceiveStream):
    """`inner`, after `prefix` (bytes read from it before, handed out again first)."""

    def __init__(self, prefix: bytes, inner: trio.abc.ReceiveStream) -> None:
        self._prefix = prefix
        self._receiving = inner

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            chunk, self._prefix = self._prefix[:size], self._prefix[size:]
            return chunk
        return bytes(await self._receiving.receive_some(max_bytes))

    async def aclose(self) -> None:
        self._prefix = b""
        await self._receiving.aclose()


class PrefixedStream(PrefixedReceiveStream, trio.abc.Stream):
    """A two-way `inner` whose receiving side starts with `prefix`."""

    def __init__(self, prefix: bytes, inner: trio.abc.Stream) -> None:
        super().__init__(prefix, inner)
        self._inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()
