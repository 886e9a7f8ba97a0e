"""The other end of the connection: everything we send, and responses to our own requests.

Outbound messages are encoded here and queued to the single writer task. Server→client
requests get integer ids from our own counter (independent of client ids); the reader hands
every response line to `Peer.route_response`, which wakes the waiting request. Responses to
ids we never issued (or already gave up on) are logged and ignored."""

from __future__ import annotations

import logging
import time
from typing import Any

import msgspec
import trio

from ..channels import send_ready
from .errors import RpcError

__all__ = ["Peer", "PeerGone", "PeerResponse", "thread_of"]

log = logging.getLogger("threadline.rpc")


class PeerGone(Exception):
    """The client went away (stdin EOF) or the connection is closing."""


# Envelopes: "jsonrpc" first (kw_only lets a defaulted field lead) and always present.


class _Notification(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: Any
    emittedAtMs: int


class _Request(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: int | str
    method: str
    params: Any


class _Result(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: int | str
    result: Any


class _ErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = None


class _Error(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: int | str | None
    error: _ErrorObject


class PeerResponse(msgspec.Struct, frozen=True):
    """The client's answer to one of our requests: `result` (raw JSON) or an `error` object."""

    result: msgspec.Raw = msgspec.Raw()
    error: dict[str, Any] | None = None


def thread_of(params: Any) -> str | None:
    """The thread a message is about: its `threadId`, or `thread.id` (`thread/started`)."""
    tid = getattr(params, "thread_id", None)
    if tid is None:
        tid = getattr(getattr(params, "thread", None), "id", None)
    return tid if isinstance(tid, str) else None


class Peer:
    def __init__(self, outbox: trio.MemorySendChannel[bytes]) -> None:
        self._outbox = outbox
        self._encoder = msgspec.json.Encoder()
        self._next_id = 0
        self._pending: dict[int, trio.MemorySendChannel[PeerResponse]] = {}
        self._closed = False
        #: Notification methods the client opted out of (initialize capabilities).
        self.opt_out: frozenset[str] = frozenset()
        #: Threads the client unsubscribed from (`thread/unsubscribe`): their notifications
        #: are not sent.
        self.unsubscribed: set[str] = set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def _send(self, message: Any) -> None:
        if self._closed:
            return
        line = self._encoder.encode(message) + b"\n"
        try:
            await send_ready(self._outbox, line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._closed = True

    async def send_message(self, message: Any) -> None:
        """Send an already-built envelope (or a list of them, for a batch answer)."""
        await self._send(message)

    def subscribers(self, thread_id: str) -> int:
        """How many connections follow `thread_id` (this one, unless it unsubscribed)."""
        return 0 if thread_id in self.unsubscribed else 1

    async def announce(self, method: str, params: Any) -> None:
        """A notification for every connection, subscribed to its thread or not."""
        if method not in self.opt_out:
            await self._send(
                _Notification(method=method, params=params, emittedAtMs=time.time_ns() // 1_000_000)
            )

    async def notify(self, method: str, params: Any) -> None:
        if method in self.opt_out or (self.unsubscribed and thread_of(params) in self.unsubscribed):
            return
        await self._send(
            _Notification(method=method, params=params, emittedAtMs=time.time_ns() // 1_000_000)
        )

    async def respond(self, request_id: int | str, result: Any) -> None:
        await self._send(_Result(id=request_id, result=result))

    async def respond_error(
        self, request_id: int | str | None, code: int, message: str, data: Any = None
    ) -> None:
        await self._send(_Error(id=request_id, error=_ErrorObject(code, message, data)))

    async def respond_rpc_error(self, request_id: int | str | None, err: RpcError) -> None:
        await self.respond_error(request_id, err.code, err.message, err.data)

    def allocate_id(self) -> int:
        rid = self._next_id
        self._next_id += 1
        return rid

    async def request(
        self, method: str, params: Any, request_id: int | None = None, *, linger: bool = False
    ) -> PeerResponse:
        """Send a server→client request and wait for its response.

        Cancellation (turn interrupted, timeout) withdraws the request: a late answer is then
        ignored. Raises PeerGone if the client is or goes away. `linger` (the caller bounds the
        wait) lets a server with several connections wait for one to attach (see `Hub`)."""
        if self._closed:
            raise PeerGone("client disconnected")
        rid = self.allocate_id() if request_id is None else request_id
        # Ids may come from a shared counter (several connections): count them as issued.
        self._next_id = max(self._next_id, rid + 1)
        send, recv = trio.open_memory_channel[PeerResponse](1)
        self._pending[rid] = send
        try:
            await self._send(_Request(id=rid, method=method, params=params))
            if self._closed:
                # The outbox broke while sending: no answer can ever come (waiting would hang).
                raise PeerGone("client disconnected")
            try:
                return await recv.receive()
            except trio.EndOfChannel:
                raise PeerGone("client disconnected") from None
        finally:
            self._pending.pop(rid, None)
            send.close()
            recv.close()

    def issued(self, request_id: Any) -> bool:
        """Whether `request_id` is one we have sent (pending or not)."""
        return (
            isinstance(request_id, int)
            and not isinstance(request_id, bool)
            and 0 <= request_id < self._next_id
        )

    def route_response(self, request_id: Any, result: msgspec.Raw, error: Any) -> None:
        # We only issue integer ids; bool is excluded because True == 1 would otherwise
        # resolve request 1 with a client's `{"id": true, ...}`.
        is_ours = isinstance(request_id, int) and not isinstance(request_id, bool)
        chan = self._pending.pop(request_id, None) if is_ours else None
        if chan is None:
            log.warning("ignoring a response to unknown request id %r", request_id)
            return
        err = error if isinstance(error, dict) else None
        if error is not None and err is None:
            err = {"code": -32603, "message": f"malformed error object: {error!r}"}
        try:
            chan.send_nowait(PeerResponse(result=result, error=err))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            log.warning("dropping a duplicate response to request id %r", request_id)

    def close(self) -> None:
        """The client is gone: every pending request fails with PeerGone; nothing more is sent."""
        self._closed = True
        for chan in self._pending.values():
            chan.close()
        self._pending.clear()
