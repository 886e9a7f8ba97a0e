"""The HTTP request in front of a WebSocket upgrade, read with h11 before trio-websocket sees
the connection: plain GETs are answered here (`/readyz`, `/healthz` → 200 without auth, any
other → 400), an upgrade carrying `Origin` is refused (403: browsers are never let in), one
without valid credentials gets 401. An upgrade that passes is replayed, bytes unchanged, to
trio-websocket (`Replay`)."""

from __future__ import annotations

from dataclasses import dataclass

import h11
import trio

__all__ = ["HEALTH_PATHS", "Head", "Replay", "answer", "read_head"]

HEALTH_PATHS = ("/readyz", "/healthz")
#: The request line and headers must fit in this many bytes.
HEAD_LIMIT = 16 * 1024


@dataclass(frozen=True)
class Head:
    """A request's method, target and headers (lower-case names; the last value wins)."""

    method: str
    target: str
    headers: dict[str, str]

    @property
    def upgrade(self) -> bool:
        return "websocket" in self.headers.get("upgrade", "").lower()


async def read_head(stream: trio.abc.Stream) -> tuple[Head | None, bytes, h11.Connection]:
    """The request head (None when the bytes are no HTTP request) and every byte read."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=HEAD_LIMIT)
    raw = bytearray()
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return None, bytes(raw), conn
        if event is h11.NEED_DATA:
            data = await stream.receive_some(4096)
            raw += data
            conn.receive_data(bytes(data))
            continue
        if not isinstance(event, h11.Request):
            return None, bytes(raw), conn
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
        head = Head(event.method.decode("latin-1"), event.target.decode("latin-1"), headers)
        return head, bytes(raw), conn


async def answer(stream: trio.abc.Stream, conn: h11.Connection, status: int, body: str) -> None:
    """Send a short plain-text response and close."""
    data = (body + "\n").encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(data))),
        ("connection", "close"),
    ]
    try:
        out = conn.send(h11.Response(status_code=status, headers=headers)) or b""
        out += conn.send(h11.Data(data=data)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(out)
    except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await stream.aclose()


class Replay(trio.abc.Stream):
    """`inner`, whose first received bytes are `prefix` again (the head read above)."""

    def __init__(self, prefix: bytes, inner: trio.abc.Stream) -> None:
        self._prefix = prefix
        self._inner = inner

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            chunk, self._prefix = self._prefix[:size], self._prefix[size:]
            return chunk
        return bytes(await self._inner.receive_some(max_bytes))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        self._prefix = b""
        await self._inner.aclose()
