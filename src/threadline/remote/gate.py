"""The HTTP request in front of a WebSocket upgrade, read with h11 before trio-websocket sees
the connection: plain GETs are answered here (`/readyz`, `/healthz` → 200 without auth, any
other → 400), an upgrade carrying `Origin` is refused (403: browsers are never let in), one
without valid credentials gets 401. An upgrade that passes is replayed, bytes unchanged, to
trio-websocket (`rpc.prefixed.PrefixedStream`)."""

from __future__ import annotations

from dataclasses import dataclass

import h11
import trio

__all__ = ["HEALTH_PATHS", "Head", "answer", "read_head"]

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
