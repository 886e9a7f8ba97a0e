"""One JSON-RPC connection over a pair of byte streams (stdin/stdout in production).

Reads lines, routes responses to our own requests to the `Peer`, enforces the Codex wire rules
(initialize first, once), dispatches requests through `Dispatcher` and runs each handler in its
own task so a slow request never blocks the reading of approval answers. Every request gets
exactly one response or error; malformed input gets the right JSON-RPC error and the
connection keeps serving."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from .dispatch import Dispatcher, PreparedCall
from .errors import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, RpcError
from .framing import LineReader, LineTooLong
from .limits import DEFAULT_MAX_REQUEST
from .peer import Peer, _Error, _ErrorObject, _Result

__all__ = ["DEFAULT_MAX_REQUEST", "Connection", "Reply"]

log = logging.getLogger("threadline.rpc")


class Reply:
    """A handler result with a follow-up run right after the response is queued — e.g. the
    turn runner may only emit `turn/started` once the `turn/start` response is out."""

    __slots__ = ("result", "then")

    def __init__(self, result: Any, then: Callable[[], Awaitable[None]]) -> None:
        self.result = result
        self.then = then


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


class Connection:
    def __init__(
        self,
        peer: Peer,
        dispatcher: Dispatcher,
        *,
        on_initialize: Callable[[PreparedCall], Awaitable[Any]],
        max_line: int = DEFAULT_MAX_REQUEST,
    ) -> None:
        self.peer = peer
        self._dispatcher = dispatcher
        self._on_initialize = on_initialize
        self._max_line = max_line
        self.initialized = False
        self._decoder = msgspec.json.Decoder()

    async def serve(self, stream: trio.abc.ReceiveStream) -> None:
        """Serve until EOF on `stream`. Handler tasks run in an inner nursery, so when this
        returns every request has been answered (or cancelled from outside)."""
        reader = LineReader(stream, max_line=max(self._max_line, 1))
        await self.serve_messages(reader.receive_line)

    async def serve_messages(self, receive: Callable[[], Awaitable[bytes | None]]) -> None:
        """Serve the messages `receive` returns (None at the end; `LineTooLong` for one that
        was skipped) — lines of a byte stream, or a WebSocket's text frames."""
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    line = await receive()
                except LineTooLong as exc:
                    log.warning("skipped an oversized request line: %s", exc)
                    await self.peer.respond_error(
                        None,
                        INVALID_REQUEST,
                        f"Invalid request: message too large: {exc}; it was skipped",
                        {"limit": exc.limit},
                    )
                    continue
                if line is None:
                    break
                try:
                    await self.handle_line(line, nursery)
                except Exception:
                    # Last line of defence: one bad message must never end the connection.
                    log.exception("internal error while handling a message")
                    await self.peer.respond_error(None, INTERNAL_ERROR, "Internal error")

    async def handle_line(self, line: bytes, nursery: trio.Nursery) -> None:
        # Blank means JSON whitespace only (RFC 8259: space, tab, CR; LF ends the line).
        # bytes.strip() also dropped \x0b and \x0c: a line of those is no JSON at all, yet
        # it went unanswered, so the client never learned that its line was lost.
        if not line.strip(b" \t\r"):
            return
        try:
            message = self._decoder.decode(line)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
            # msgspec raises UnicodeDecodeError (not DecodeError) for invalid UTF-8 inside a
            # JSON string, and RecursionError for very deeply nested arrays; uncaught, either
            # tore down the whole server (silently, with exit 0).
            log.warning("unparsable line (%d bytes): %s", len(line), exc)
            await self.peer.respond_error(None, PARSE_ERROR, f"Parse error: {exc}")
            return
        if isinstance(message, list):
            if not message:
                await self.peer.respond_error(None, INVALID_REQUEST, "Invalid request: empty batch")
                return
            if not self.initialized:
                # A batch may initialize: finish it before reading on, as a single initialize
                # request is. Run as a task, it raced the next line, which could be refused
                # with "Not initialized" although the client had sent initialize first.
                await self._run_batch(message)
            else:
                nursery.start_soon(self._run_batch, message)
            return
        response = await self._handle_message(message, nursery, batch=False)
        if response is not None:
            await self.peer.send_message(response)

    async def _run_batch(self, messages: list[Any]) -> None:
        responses = []
        follow_ups: list[Callable[[], Awaitable[None]]] = []
        async with trio.open_nursery() as inner:
            for message in messages:
                response = await self._handle_message(
                    message, inner, batch=True, follow_ups=follow_ups
                )
                if response is not None:
                    responses.append(response)
        if responses:
            await self.peer.send_message(responses)
        # Follow-ups (e.g. `turn/started`) run only once the batch answer is queued, as for a
        # single request: a client must see the `turn/start` response before the turn's events.
        for then in follow_ups:
            await then()

    async def _handle_message(
        self,
        message: Any,
        nursery: trio.Nursery,
        *,
        batch: bool,
        follow_ups: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> Any:
        """Process one message. Returns an immediate response (an error), or None when the
        answer comes later from a handler task (or never, for notifications/responses).
        In a batch the handler runs inline and its response is returned."""
        if not isinstance(message, dict):
            return _invalid(None, "expected an object")
        has_id = "id" in message
        rid = message.get("id")
        method = message.get("method")
        if method is None and has_id and self._route_response(rid, message):
            return None
        invalid = _invalid_request(message)
        if invalid is not None:
            return invalid
        assert isinstance(method, str)
        if not has_id:
            await self._handle_notification(method, message, nursery)
            return None
        assert rid is not None

        if method == "initialize":
            if self.initialized:
                return _Error(id=rid, error=_ErrorObject(INVALID_REQUEST, "Already initialized"))
            try:
                call = self._dispatcher.prepare(message)
                result = await self._on_initialize(call)
            except RpcError as exc:
                return _Error(id=rid, error=_ErrorObject(exc.code, exc.message, exc.data))
            self.initialized = True
            return _Result(id=rid, result=result)
        if not self.initialized:
            return _Error(id=rid, error=_ErrorObject(INVALID_REQUEST, "Not initialized"))
        try:
            call = self._dispatcher.prepare(message)
        except RpcError as exc:
            return _Error(id=rid, error=_ErrorObject(exc.code, exc.message, exc.data))
        if batch:
            return await self._execute(rid, call, send=False, follow_ups=follow_ups)
        nursery.start_soon(self._execute, rid, call)
        return None

    def _route_response(self, rid: Any, message: dict[str, Any]) -> bool:
        """Route a client's answer to one of our requests; False if `message` is not one."""
        if "result" in message or "error" in message:
            result = message.get("result")
            raw = msgspec.Raw(msgspec.json.encode(result)) if "result" in message else msgspec.Raw()
            self.peer.route_response(rid, raw, message.get("error"))
            return True
        if not self.peer.issued(rid):
            return False
        # A response to one of our requests with neither `result` nor `error`: route it as
        # a malformed answer (the approval router fails closed: decline) instead of
        # answering the client's response with an error and leaving the request pending.
        log.warning("response to request %r has neither result nor error", rid)
        self.peer.route_response(
            rid,
            msgspec.Raw(),
            {"code": INVALID_REQUEST, "message": "response has neither result nor error"},
        )
        return True

    async def _handle_notification(
        self, method: str, message: dict[str, Any], nursery: trio.Nursery
    ) -> None:
        if method == "initialized":
            return
        # `initialize` is a request only: as a notification after the handshake it used to run
        # the handler, silently replacing the client's notification opt-outs (and re-checking
        # every backend's CLI), where the request form is refused with "Already initialized".
        if (
            method == "initialize"
            or not self.initialized
            or not self._dispatcher.has_method(method)
        ):
            log.info("ignoring notification %r", method)
            return
        try:
            call = self._dispatcher.prepare(message)
        except RpcError as exc:
            log.warning("ignoring notification %r: %s", method, exc.message)
            return
        nursery.start_soon(self._execute, None, call)

    async def _execute(
        self,
        rid: Any,
        call: PreparedCall,
        send: bool = True,
        follow_ups: list[Callable[[], Awaitable[None]]] | None = None,
    ) -> Any:
        then: Callable[[], Awaitable[None]] | None = None
        try:
            result = await call.handler(call.params)
            if isinstance(result, Reply):
                then = result.then
                result = result.result
            response: Any = _Result(id=rid, result=result)
        except RpcError as exc:
            response = _Error(id=rid, error=_ErrorObject(exc.code, exc.message, exc.data))
        except Exception as exc:
            log.exception("internal error in %s", call.method)
            response = _Error(id=rid, error=_ErrorObject(INTERNAL_ERROR, f"Internal error: {exc}"))
        if rid is None:
            response = None
        elif send:
            await self.peer.send_message(response)
            response = None
        if then is not None:
            if follow_ups is not None:
                follow_ups.append(then)
            else:
                await then()
        return response


def _invalid(rid: Any, why: str) -> _Error:
    return _Error(id=rid, error=_ErrorObject(INVALID_REQUEST, f"Invalid request: {why}"))


def _invalid_request(message: dict[str, Any]) -> _Error | None:
    """The error for a request or notification that breaks JSON-RPC's rules, or None."""
    has_id = "id" in message
    if has_id and not _valid_id(message.get("id")):
        return _invalid(None, "id must be a string or an integer")
    reply_id = message.get("id") if has_id else None
    if not isinstance(message.get("method"), str):
        return _invalid(reply_id, "missing or non-string 'method'")
    jsonrpc = message.get("jsonrpc", "2.0")
    if jsonrpc != "2.0":
        return _invalid(reply_id, f"unsupported jsonrpc version {jsonrpc!r}")
    if "params" in message and not isinstance(message["params"], (dict, list)):
        return _invalid(reply_id, "params must be an object")
    return None
