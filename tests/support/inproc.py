"""Run the real `Server` in-process over an in-memory stream pair, with a small client API
like the subprocess one (`tests.support.client`).

Every message the server writes is decoded, recorded in order (`all_messages`) and validated
against `schemas/` (`validate_outbound`); leaving the context fails the test if any message
did not match. Responses go to their waiting request; notifications and server→client
requests are queued for the test, in order.

    async with inproc_server({"test": backend}, tmp_path) as client:
        tid = await client.start_thread()
        done, events = await client.run_turn(tid, "hi")
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

from threadline.backends.base import Backend
from threadline.rpc.framing import LineReader
from threadline.server.app import Server
from threadline.server.config import ServerConfig
from threadline.store import ThreadStore

from .schema_check import validate_outbound

__all__ = ["NO_ANSWER", "InProcClient", "RawReply", "inproc_server", "methods_of"]


class _NoAnswer:
    def __repr__(self) -> str:
        return "NO_ANSWER"


#: Return this from an `on_request` callback to leave a server request unanswered.
NO_ANSWER: Any = _NoAnswer()


class RawReply:
    """Return this from an `on_request` callback to send `message` as-is (the request id is
    filled in when the message has no "id")."""

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message


OnRequest = Callable[[dict[str, Any]], Any]


def methods_of(events: list[dict[str, Any]]) -> list[str]:
    return [e["method"] for e in events if "method" in e]


class InProcClient:
    def __init__(self, stream: trio.abc.Stream, server: Server) -> None:
        self.stream = stream
        self.server = server
        self._next_id = 0
        self._waiters: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._methods: dict[Any, str] = {}
        self._events_send, self._events = trio.open_memory_channel[dict[str, Any]](math.inf)
        self._backlog: list[dict[str, Any]] = []
        #: Every outbound message, in the order the server wrote them.
        self.all_messages: list[dict[str, Any]] = []
        self.schema_errors: list[str] = []
        self.closed = trio.Event()
        self._send_lock = trio.Lock()

    # -- plumbing --------------------------------------------------------------------------------

    async def _read(self) -> None:
        reader = LineReader(self.stream)
        try:
            while (line := await reader.receive_line()) is not None:
                decoded = json.loads(line)
                # A batch answer is a JSON array of responses: handle each like a line.
                for message in decoded if isinstance(decoded, list) else [decoded]:
                    self._received(message)
        finally:
            self.closed.set()

    def expect_response(self, request_id: Any, method: str) -> None:
        """Validate the response to a request sent by hand (`send`) as `method`'s result."""
        self._methods[request_id] = method

    def _received(self, message: Any) -> None:
        self.all_messages.append(message)
        try:
            validate_outbound(message, self._methods)
        except AssertionError as exc:
            self.schema_errors.append(str(exc))
        if isinstance(message, dict) and "method" not in message:
            waiter = self._waiters.pop(message.get("id"), None)
            if waiter is not None:
                waiter.send_nowait(message)
                return
        self._events_send.send_nowait(message)

    async def send(self, message: Any) -> None:
        async with self._send_lock:
            await self.stream.send_all(json.dumps(message).encode() + b"\n")

    async def answer(self, request_id: Any, result: Any) -> None:
        await self.send({"id": request_id, "result": result})

    async def request(self, method: str, params: Any = None, *, timeout: float = 10) -> Any:
        """Send a request; return the whole response message (result or error)."""
        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self._waiters[rid] = send
        self._methods[rid] = method
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        with trio.fail_after(timeout):
            return await recv.receive()

    async def call(self, method: str, params: Any = None, *, timeout: float = 10) -> Any:
        response = await self.request(method, params, timeout=timeout)
        if "error" in response:
            raise AssertionError(f"{method} failed: {response['error']}")
        return response["result"]

    async def call_error(self, method: str, params: Any = None) -> dict[str, Any]:
        """Send a request that must fail; return its error object."""
        response = await self.request(method, params)
        assert "error" in response, f"{method} unexpectedly succeeded: {response}"
        return response["error"]  # type: ignore[no-any-return]

    async def next_event(self, timeout: float = 10) -> dict[str, Any]:
        if self._backlog:
            return self._backlog.pop(0)
        with trio.fail_after(timeout):
            return await self._events.receive()

    def pending_events(self) -> list[dict[str, Any]]:
        """Everything queued right now, without waiting."""
        out, self._backlog = self._backlog, []
        while True:
            try:
                out.append(self._events.receive_nowait())
            except trio.WouldBlock:
                return out

    async def wait_for(
        self,
        pred: Callable[[dict[str, Any]], bool],
        timeout: float = 10,
        seen: list[dict[str, Any]] | None = None,
        *,
        keep_others: bool = False,
    ) -> dict[str, Any]:
        """Consume events until one matches `pred`. Others are appended to `seen`; with
        `keep_others` they stay queued for later instead."""
        kept: list[dict[str, Any]] = []
        try:
            with trio.fail_after(timeout):
                while True:
                    event = await self.next_event(timeout)
                    if pred(event):
                        return event
                    if seen is not None:
                        seen.append(event)
                    if keep_others:
                        kept.append(event)
        finally:
            self._backlog[:0] = kept

    async def no_event(self, wait: float = 0.05) -> None:
        """Assert that nothing arrives for `wait` seconds."""
        with trio.move_on_after(wait):
            event = await self.next_event(wait + 1)
            raise AssertionError(f"unexpected event: {event}")

    # -- protocol helpers ------------------------------------------------------------------------

    async def initialize(self) -> Any:
        return await self.call("initialize", {"clientInfo": {"name": "tests", "version": "0"}})

    async def start_thread(self, **params: Any) -> str:
        """`thread/start` (default backend "test", cwd /tmp); consumes its `thread/started`."""
        params.setdefault("modelProvider", "test")
        params.setdefault("cwd", "/tmp")
        result = await self.call("thread/start", params)
        tid: str = result["thread"]["id"]
        await self.wait_for(
            lambda e: e.get("method") == "thread/started" and e["params"]["thread"]["id"] == tid,
            keep_others=True,
        )
        return tid

    async def start_turn(
        self, thread_id: str, text: str | list[dict[str, Any]], **params: Any
    ) -> dict[str, Any]:
        """`turn/start`; returns its result (`{"turn": {...}}`)."""
        inputs = [{"type": "text", "text": text}] if isinstance(text, str) else text
        result: dict[str, Any] = await self.call(
            "turn/start", {"threadId": thread_id, "input": inputs, **params}
        )
        return result

    async def reply(self, event: dict[str, Any], on_request: OnRequest | None) -> None:
        """Answer a server request with `on_request(event)` (default: decline)."""
        answer = on_request(event) if on_request else {"decision": "decline"}
        if inspect.isawaitable(answer):
            answer = await answer
        if answer is NO_ANSWER:
            return
        if isinstance(answer, RawReply):
            message = dict(answer.message)
            message.setdefault("id", event["id"])
            await self.send(message)
            return
        await self.answer(event["id"], answer)

    async def collect_turn(
        self,
        turn_id: str,
        *,
        on_request: OnRequest | None = None,
        timeout: float = 10,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Consume events until this turn's `turn/completed`; answer server requests with
        `on_request`. Returns (turn/completed event, every event seen, including it)."""
        events: list[dict[str, Any]] = []
        with trio.fail_after(timeout):
            while True:
                event = await self.next_event(timeout)
                events.append(event)
                if "id" in event and "method" in event:
                    await self.reply(event, on_request)
                if (
                    event.get("method") == "turn/completed"
                    and event["params"]["turn"]["id"] == turn_id
                ):
                    return event, events

    async def run_turn(
        self,
        thread_id: str,
        text: str | list[dict[str, Any]] = "hello",
        *,
        on_request: OnRequest | None = None,
        timeout: float = 10,
        **params: Any,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start a turn and collect its events until `turn/completed`."""
        result = await self.start_turn(thread_id, text, **params)
        return await self.collect_turn(result["turn"]["id"], on_request=on_request, timeout=timeout)

    async def close(self) -> None:
        """EOF to the server (as a client closing stdin)."""
        await self.stream.send_stream.aclose()  # type: ignore[attr-defined]


@asynccontextmanager
async def inproc_server(
    backends: Mapping[str, Backend],
    home: Path,
    *,
    config: ServerConfig | None = None,
    store: ThreadStore | None = None,
    initialize: bool = True,
    check_schema: bool = True,
) -> AsyncIterator[InProcClient]:
    """Serve `backends` over an in-memory stream pair; yield a connected client. On exit the
    client sends EOF and the server must shut down cleanly within a few seconds."""
    config = config or ServerConfig(default_backend=next(iter(backends)), interrupt_grace=0.2)
    server = Server(config, store or ThreadStore(home), backends)
    client_stream, server_stream = trio.testing.memory_stream_pair()
    client = InProcClient(client_stream, server)
    server_done = trio.Event()

    async def serve() -> None:
        try:
            await server.serve(server_stream, server_stream)
        finally:
            server_done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        nursery.start_soon(client._read)
        if initialize:
            await client.initialize()
        failed = True
        try:
            yield client
            failed = False
        finally:
            await client.close()
            with trio.move_on_after(10) as waited:
                await server_done.wait()
            nursery.cancel_scope.cancel()
            if not failed:
                assert not waited.cancelled_caught, "the server did not shut down after EOF"
                if check_schema:
                    assert not client.schema_errors, "\n".join(client.schema_errors[:5])
