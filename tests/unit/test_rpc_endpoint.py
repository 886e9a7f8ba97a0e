"""`threadline.rpc.endpoint.Endpoint` against a scripted peer: requests and their answers,
notifications and requests from the peer, timeouts, and the peer going away."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import pytest
import trio
import trio.testing

from tests.support.json_peer import JsonLinePeer
from threadline.rpc.endpoint import (
    Endpoint,
    Incoming,
    PeerClosed,
    RequestTimeout,
    ResponseError,
)
from threadline.rpc.errors import RpcError
from threadline.rpc.transport import StreamTransport, TracedTransport


class Peer(JsonLinePeer):
    def __init__(self) -> None:
        super().__init__()
        self.transport = StreamTransport(self.their_send, self.their_receive)

    async def close(self) -> None:
        await self.to_them.aclose()


async def test_answers_reach_their_requests_in_any_order_and_errors_raise() -> None:
    peer = Peer()
    endpoint = Endpoint(peer.transport, name="the agent")
    results: dict[str, Any] = {}

    async def call(method: str, params: Any) -> None:
        try:
            results[method] = await endpoint.request(method, params)
        except ResponseError as exc:
            results[method] = exc

    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        nursery.start_soon(call, "first", {"n": 1})
        first = await peer.read()
        nursery.start_soon(call, "second", None)
        second = await peer.read()
        assert first == {"jsonrpc": "2.0", "id": first["id"], "method": "first", "params": {"n": 1}}
        assert second == {"jsonrpc": "2.0", "id": second["id"], "method": "second"}
        assert first["id"] != second["id"]
        error = {"code": -32602, "message": "bad", "data": {"field": "n"}}
        await peer.write({"id": second["id"], "error": error})
        await peer.write({"id": first["id"], "result": {"ok": True}})
        await peer.write({"id": True, "result": "a bool id is nobody's"})
        await trio.testing.wait_all_tasks_blocked()
        await peer.close()

    assert results["first"] == {"ok": True}
    failure = results["second"]
    assert isinstance(failure, ResponseError) and isinstance(failure, RpcError)
    assert (failure.method, failure.code, failure.message) == ("second", -32602, "bad")
    assert failure.data == {"field": "n"}
    assert str(failure) == "second: bad (JSON-RPC error -32602)"


async def test_requests_and_their_answers_are_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="threadline.rpc")
    peer = Peer()
    endpoint = Endpoint(peer.transport, name="the agent")

    async def answer(error: bool) -> None:
        request = await peer.read()
        reply = {"error": {"code": 1, "message": "no"}} if error else {"result": "yes"}
        await peer.write({"id": request["id"], **reply})

    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        nursery.start_soon(answer, False)
        await endpoint.request("session/new", {})
        nursery.start_soon(answer, True)
        with pytest.raises(ResponseError):
            await endpoint.request("session/prompt", {})
        await peer.close()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG] == [
        "the agent: request 1 session/new",
        "the agent: response 1 (session/new)",
        "the agent: request 2 session/prompt",
        "the agent: response 2 (session/prompt) error",
    ]


async def test_a_request_times_out_and_its_late_answer_is_dropped() -> None:
    peer = Peer()
    endpoint = Endpoint(peer.transport)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        with pytest.raises(RequestTimeout) as info:
            await endpoint.request("slow", {}, timeout=0.05)
        assert info.value.method == "slow"
        late = await peer.read()
        await peer.write({"id": late["id"], "result": "too late"})
        # The connection still works.
        nursery.start_soon(peer.read)
        sent = trio.Event()

        async def answer_next() -> None:
            await sent.wait()
            await peer.write({"id": late["id"] + 1, "result": "on time"})

        nursery.start_soon(answer_next)
        assert await endpoint.request("fast", sent=sent, timeout=5) == "on time"
        await peer.close()


async def test_notifications_in_order_and_requests_answered_by_the_handler() -> None:
    peer = Peer()
    seen: list[tuple[str, Any]] = []

    async def on_notification(note: Incoming) -> None:
        seen.append((note.method, note.json_params()))

    async def on_request(request: Incoming) -> Any:
        params = request.json_params()
        if request.method == "add":
            return params["a"] + params["b"]
        if request.method == "refuse":
            raise RpcError(-32001, "not now", {"retry": True})
        raise KeyError(request.method)

    endpoint = Endpoint(peer.transport, on_message=on_notification, on_request=on_request)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        await peer.write({"method": "progress", "params": {"step": 1}})
        await peer.write(b"not json at all\n")
        await peer.write({"method": "progress"})
        await peer.write({"jsonrpc": "2.0", "id": "a", "method": "add", "params": {"a": 2, "b": 3}})
        assert await peer.read() == {"jsonrpc": "2.0", "id": "a", "result": 5}
        await peer.write({"id": 7, "method": "refuse", "params": {}})
        assert await peer.read() == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32001, "message": "not now", "data": {"retry": True}},
        }
        await peer.write({"id": 8, "method": "crash"})
        crashed = await peer.read()
        assert crashed["id"] == 8 and crashed["error"]["code"] == -32603
        await peer.close()
    assert seen == [("progress", {"step": 1}), ("progress", None)]


async def test_without_a_request_handler_requests_get_method_not_found() -> None:
    peer = Peer()
    endpoint = Endpoint(peer.transport)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        await peer.write({"id": 1, "method": "fs/read_text_file", "params": {}})
        answer = await peer.read()
        assert answer["id"] == 1 and answer["error"]["code"] == -32601
        await peer.close()


async def test_without_a_request_handler_on_message_sees_requests_in_order() -> None:
    peer = Peer()
    queue_send, queue = trio.open_memory_channel[Incoming](10)

    async def on_message(message: Incoming) -> None:
        await queue_send.send(message)

    endpoint = Endpoint(peer.transport, on_message=on_message)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        await peer.write({"method": "item/started", "params": {"itemId": "c1"}})
        await peer.write({"id": 3, "method": "item/commandExecution/requestApproval"})
        await peer.write({"method": "item/completed", "params": {"itemId": "c1"}})
        seen = [await queue.receive() for _ in range(3)]
        assert [(m.method, m.id) for m in seen] == [
            ("item/started", None),
            ("item/commandExecution/requestApproval", 3),
            ("item/completed", None),
        ]
        await endpoint.respond(3, {"decision": "decline"})
        assert await peer.read() == {"jsonrpc": "2.0", "id": 3, "result": {"decision": "decline"}}
        await endpoint.respond_error(4, -32601, "no such method")
        assert (await peer.read())["error"] == {"code": -32601, "message": "no such method"}
        await peer.close()


async def test_when_the_peer_goes_away_on_eof_runs_then_pending_requests_fail() -> None:
    peer = Peer()
    events: list[str] = []
    handler_cancelled = trio.Event()

    async def on_eof() -> None:
        events.append("eof")

    async def on_request(_request: Incoming) -> Any:
        try:
            await trio.sleep_forever()
        finally:
            handler_cancelled.set()

    endpoint = Endpoint(peer.transport, name="codex", on_request=on_request, on_eof=on_eof)

    async def pending() -> None:
        with pytest.raises(PeerClosed) as info:
            await endpoint.request("thread/start", {})
        events.append(str(info.value))

    async with trio.open_nursery() as nursery:
        await nursery.start(endpoint.run)
        nursery.start_soon(pending)
        await peer.read()
        await peer.write({"id": 1, "method": "approve", "params": {}})
        await trio.testing.wait_all_tasks_blocked()
        await peer.close()
    assert events == ["eof", "thread/start: codex closed its output"]
    assert handler_cancelled.is_set()
    with pytest.raises(PeerClosed):
        await endpoint.request("thread/list")


class _BrokenPipe:
    async def read_line(self) -> bytes | None:
        await trio.sleep_forever()
        return None

    async def write(self, data: bytes) -> None:
        raise OSError("stdin is closed")


async def test_a_failed_write_is_peer_closed() -> None:
    endpoint = Endpoint(_BrokenPipe(), name="gemini")
    with pytest.raises(PeerClosed, match="cannot write to gemini: stdin is closed"):
        await endpoint.request("session/new", {})
    with pytest.raises(PeerClosed):
        await endpoint.notify("session/cancel", {})


_ECHO = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    print(json.dumps({"method": "log", "params": {"saw": message["method"]}}), flush=True)
    print(json.dumps({"id": message["id"], "result": message.get("params")}), flush=True)
"""


async def test_over_a_child_process_pipes_with_a_trace() -> None:
    lines: list[tuple[str, bytes]] = []
    notes: list[Any] = []

    async def on_notification(note: Incoming) -> None:
        notes.append(note.json_params())

    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    transport = StreamTransport(proc.stdin, proc.stdout)
    traced = TracedTransport(transport, lambda side, line: lines.append((side, line)))
    endpoint = Endpoint(traced, on_message=on_notification, on_eof=proc.wait)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)
            assert await endpoint.request("echo", {"x": [1, 2]}, timeout=30) == {"x": [1, 2]}
            await transport.aclose()
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert notes == [{"saw": "echo"}]
    assert [side for side, _ in lines] == ["send", "receive", "receive"]
    assert json.loads(lines[0][1])["method"] == "echo"
    assert endpoint.closed is not None
