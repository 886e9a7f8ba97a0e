"""`Endpoint`: the calling side of a JSON-RPC connection over a `LineTransport`.

It sends requests (integer ids from its own counter) and waits for their responses, sends
notifications, and routes what the peer writes: a response wakes the request waiting for it;
a request from the peer runs `on_request` in a task of its own (so a slow answer never stalls
the reading), whose return value is the result and whose `RpcError` is the error response;
every other message (notifications, and requests when there is no `on_request`) is awaited by
`on_message` in arrival order. A request `on_message` receives is answered whenever its
receiver calls `respond`/`respond_error` (e.g. a turn loop that reads notifications and
requests from one queue); with neither hook it gets -32601.

`run()` is the one reader. When the peer's output ends it awaits `on_eof`, cancels the
request handlers still running and fails every pending request with `PeerClosed`.
Every message written carries `"jsonrpc": "2.0"`; incoming ones need not. Requests and their
answers are logged at DEBUG (logger `threadline.rpc`); to see the whole wire, give it a
`transport.TracedTransport`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from .errors import INTERNAL_ERROR, METHOD_NOT_FOUND, RpcError
from .framing import LineTooLong
from .transport import LineTransport

__all__ = [
    "Endpoint",
    "Incoming",
    "MessageHandler",
    "PeerClosed",
    "RequestHandler",
    "RequestTimeout",
    "ResponseError",
]

log = logging.getLogger("threadline.rpc")


class PeerClosed(Exception):
    """The connection ended (the peer's output closed, or it cannot be written to)."""


class ResponseError(RpcError):
    """The peer answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        self.args = (f"{method}: {message} (JSON-RPC error {code})",)
        self.method = method

    @classmethod
    def of(cls, method: str, error: Any) -> ResponseError:
        """From a response's `error` member, whatever shape the peer gave it."""
        if not isinstance(error, dict):
            return cls(method, INTERNAL_ERROR, f"malformed error object: {error!r}")
        code = error.get("code")
        return cls(
            method,
            code if isinstance(code, int) and not isinstance(code, bool) else INTERNAL_ERROR,
            str(error.get("message", "")),
            error.get("data"),
        )


class RequestTimeout(TimeoutError):
    """The peer did not answer a request within its timeout."""

    def __init__(self, method: str, timeout: float) -> None:
        super().__init__(f"no answer to {method} within {timeout:g} s")
        self.method = method
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class Incoming:
    """A notification (`id` None) or a request from the peer; `params` is its raw JSON."""

    method: str
    params: msgspec.Raw
    id: int | str | None = None

    def json_params(self) -> Any:
        """`params` decoded to plain JSON values (None when absent)."""
        return msgspec.json.decode(self.params) if self.params else None


class _Envelope(msgspec.Struct):
    # `Raw | None` does not decode objects (msgspec pitfall): an empty Raw means "absent".
    id: int | str | None = None
    method: str | None = None
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: Any = None


MessageHandler = Callable[[Incoming], Awaitable[None]]
#: Answers a request from the peer: the return value is the result; raising `RpcError`
#: answers with that error, any other exception with -32603.
RequestHandler = Callable[[Incoming], Awaitable[Any]]
_ENVELOPE = msgspec.json.Decoder(_Envelope)
_ENCODER = msgspec.json.Encoder()
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


class Endpoint:
    def __init__(
        self,
        transport: LineTransport,
        *,
        name: str = "the peer",
        on_message: MessageHandler | None = None,
        on_request: RequestHandler | None = None,
        on_eof: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`name` names the peer in errors and logs. `on_eof` runs when the peer's output
        ends, before the pending requests fail (e.g. to wait for a process's exit status
        that their errors name)."""
        self._transport = transport
        self.name = name
        self._on_message = on_message
        self._on_request = on_request
        self._on_eof = on_eof
        self._pending: dict[int, trio.MemorySendChannel[_Envelope | PeerClosed]] = {}
        self._next_id = 0
        #: Why the connection ended, once it has (requests then fail at once).
        self.closed: PeerClosed | None = None

    # -- sending -------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        sent: trio.Event | None = None,
        result_type: Any = Any,
    ) -> Any:
        """Send a request (`params`: a dict, a Struct, or None to omit them) and return its
        result decoded as `result_type` (default: plain JSON values; None when absent).
        `sent` is set once the request is written; `timeout` bounds the wait for the answer
        after that. Raises `ResponseError`, `RequestTimeout`, `PeerClosed`, or
        `msgspec.ValidationError` for a result that is not a `result_type`."""
        if self.closed is not None:
            raise PeerClosed(f"{method}: {self.closed}")
        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[_Envelope | PeerClosed](1)
        self._pending[rid] = send
        log.debug("%s: request %d %s", self.name, rid, method)
        try:
            await self._write(_message(method, params, rid))
            if sent is not None:
                sent.set()
            try:
                with trio.fail_after(math.inf if timeout is None else timeout):
                    answer = await recv.receive()
            except trio.TooSlowError:
                raise RequestTimeout(method, timeout or 0.0) from None
        finally:
            self._pending.pop(rid, None)
        if isinstance(answer, PeerClosed):
            raise PeerClosed(f"{method}: {answer}")
        failed = answer.error is not None
        log.debug("%s: response %d (%s)%s", self.name, rid, method, " error" if failed else "")
        if failed:
            raise ResponseError.of(method, answer.error)
        return msgspec.json.decode(answer.result, type=result_type) if answer.result else None

    async def notify(self, method: str, params: Any = None) -> None:
        await self._write(_message(method, params))

    async def respond(self, request_id: int | str, result: Any) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def respond_error(
        self, request_id: int | str | None, code: int, message: str, data: Any = None
    ) -> None:
        await self._write(_error(request_id, code, message, data))

    async def send_line(self, line: bytes) -> None:
        """Write one line as it is (no newline in it), e.g. a malformed one."""
        try:
            await self._transport.write(line + b"\n")
        except Exception as exc:  # whatever the transport raises, the peer is unreachable
            raise PeerClosed(f"cannot write to {self.name}: {exc}") from exc

    async def _write(self, message: dict[str, Any]) -> None:
        await self.send_line(_ENCODER.encode(message))

    # -- receiving -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read and route the peer's lines until its output ends (or this is cancelled)."""
        reason = f"{self.name} closed its output"
        try:
            async with trio.open_nursery() as handlers:
                task_status.started()
                try:
                    await self._read_loop(handlers)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    reason = f"the connection to {self.name} broke: {exc!r}"
                if self._on_eof is not None:
                    await self._on_eof()
                handlers.cancel_scope.cancel()  # nobody is left to read their answers
        finally:
            self.close(reason)

    def close(self, reason: str) -> None:
        """End the connection: pending and later requests fail with `PeerClosed(reason)`."""
        if self.closed is None:
            self.closed = PeerClosed(reason)
        for waiter in self._pending.values():
            waiter.send_nowait(self.closed)
        self._pending.clear()

    async def _read_loop(self, handlers: trio.Nursery) -> None:
        while (line := await self._read_line()) is not None:
            envelope = self._decode(line)
            if envelope is None:
                continue
            if envelope.method is None:
                self._resolve(envelope)
                continue
            incoming = Incoming(envelope.method, envelope.params, envelope.id)
            to_handler = self._on_request is not None or self._on_message is None
            if envelope.id is not None and to_handler:
                handlers.start_soon(self._answer, incoming)
            elif self._on_message is not None:
                await self._on_message(incoming)

    async def _read_line(self) -> bytes | None:
        """The peer's next line (an oversized one is skipped); None at its EOF."""
        while True:
            try:
                return await self._transport.read_line()
            except LineTooLong as exc:
                log.warning("%s wrote an oversized line: %s", self.name, exc)

    def _decode(self, line: bytes) -> _Envelope | None:
        try:
            return _ENVELOPE.decode(line)
        except _DECODE_ERRORS:
            log.info("%s wrote a line that is not a JSON-RPC message: %.200r", self.name, line)
            return None

    def _resolve(self, response: _Envelope) -> None:
        rid = response.id
        waiter = None
        if isinstance(rid, int) and not isinstance(rid, bool):  # ours are ints; True == 1
            waiter = self._pending.pop(rid, None)
        if waiter is None:
            log.warning("%s answered an unknown request id %r", self.name, rid)
            return
        waiter.send_nowait(response)

    async def _answer(self, request: Incoming) -> None:
        assert request.id is not None
        reply: dict[str, Any]
        try:
            if self._on_request is None:
                raise RpcError(METHOD_NOT_FOUND, f"{request.method} is not handled here")
            reply = {"jsonrpc": "2.0", "id": request.id, "result": await self._on_request(request)}
        except RpcError as exc:
            reply = _error(request.id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.exception("answering %s from %s failed", request.method, self.name)
            reply = _error(request.id, INTERNAL_ERROR, str(exc), None)
        try:
            await self._write(reply)
        except PeerClosed:
            log.info("%s went away before %s was answered", self.name, request.method)


def _message(method: str, params: Any, request_id: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        message["id"] = request_id
    message["method"] = method
    if params is not None:
        message["params"] = params
    return message


def _error(request_id: int | str | None, code: int, message: str, data: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
