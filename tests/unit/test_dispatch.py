"""threadline.rpc: Dispatcher (method lookup, params validation), Peer (our own requests and
the routing of the client's responses) and Connection (wire rules), all in-process."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from threadline.protocol.base import Base
from threadline.rpc.connection import Connection, Reply
from threadline.rpc.dispatch import Dispatcher, PreparedCall
from threadline.rpc.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
)
from threadline.rpc.peer import Peer, PeerGone

from .test_framing import ChunkStream

# -- Dispatcher ------------------------------------------------------------------------------


class ReadParams(Base, kw_only=True):
    thread_id: str
    include_turns: bool = False
    limit: int | None = None


class NoParams(Base, kw_only=True):
    pass


async def _echo(params: Any) -> Any:
    return params


def make_dispatcher() -> Dispatcher:
    return Dispatcher({"thread/read": (ReadParams, _echo), "thread/list": (NoParams, _echo)})


def prepare(message: dict[str, Any]) -> PreparedCall:
    return make_dispatcher().prepare(message)


def test_valid_call_is_decoded_into_the_params_struct() -> None:
    call = prepare(
        {"id": 1, "method": "thread/read", "params": {"threadId": "t", "includeTurns": True}}
    )
    assert call.method == "thread/read"
    assert call.params == ReadParams(thread_id="t", include_turns=True)
    assert call.handler is _echo


def test_jsonrpc_member_is_optional() -> None:
    a = prepare({"id": 1, "method": "thread/read", "params": {"threadId": "t"}})
    b = prepare({"jsonrpc": "2.0", "id": 1, "method": "thread/read", "params": {"threadId": "t"}})
    assert a.params == b.params


def test_unknown_method_is_32601_naming_it() -> None:
    with pytest.raises(RpcError) as info:
        prepare({"id": 1, "method": "thread/frobnicate", "params": {}})
    assert info.value.code == METHOD_NOT_FOUND
    assert "thread/frobnicate" in info.value.message


def test_wrong_type_is_32602_naming_the_field() -> None:
    with pytest.raises(RpcError) as info:
        prepare({"id": 1, "method": "thread/read", "params": {"threadId": "t", "limit": "ten"}})
    assert info.value.code == INVALID_PARAMS
    assert "thread/read" in info.value.message
    assert "$.limit" in info.value.message


def test_missing_field_is_32602_naming_the_field() -> None:
    with pytest.raises(RpcError) as info:
        prepare({"id": 1, "method": "thread/read", "params": {}})
    assert info.value.code == INVALID_PARAMS
    assert "threadId" in info.value.message


def test_array_params_are_32602() -> None:
    with pytest.raises(RpcError) as info:
        prepare({"id": 1, "method": "thread/read", "params": ["t"]})
    assert info.value.code == INVALID_PARAMS
    assert "object" in info.value.message


def test_empty_array_and_absent_params_mean_no_params() -> None:
    assert prepare({"id": 1, "method": "thread/list", "params": []}).params == NoParams()
    assert prepare({"id": 1, "method": "thread/list"}).params == NoParams()


@pytest.mark.parametrize("field", ["unknownField", "slot", "args", "kwargs", "context", "self"])
def test_unknown_fields_are_ignored(field: str) -> None:
    # "slot" collided with the dispatcher's own argument name (-32602 "multiple values").
    call = prepare({"id": 1, "method": "thread/read", "params": {"threadId": "t", field: 1}})
    assert call.params == ReadParams(thread_id="t")


def test_notifications_are_prepared_too() -> None:
    call = prepare({"method": "thread/read", "params": {"threadId": "t"}})
    assert call.params == ReadParams(thread_id="t")


def test_has_method() -> None:
    d = make_dispatcher()
    assert d.has_method("thread/read")
    assert not d.has_method("initialize")


# -- Peer ------------------------------------------------------------------------------------


def make_peer(size: int = 100) -> tuple[Peer, trio.MemoryReceiveChannel[bytes]]:
    send, recv = trio.open_memory_channel[bytes](size)
    return Peer(send), recv


def sent(recv: trio.MemoryReceiveChannel[bytes]) -> list[Any]:
    out: list[Any] = []
    while True:
        try:
            line = recv.receive_nowait()
        except trio.WouldBlock:
            return out
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        out.append(json.loads(line))


async def test_notify_envelope() -> None:
    peer, recv = make_peer()
    await peer.notify("thread/started", {"x": 1})
    [line] = sent(recv)
    assert list(line) == ["jsonrpc", "method", "params", "emittedAtMs"]
    assert line["jsonrpc"] == "2.0" and line["params"] == {"x": 1}
    assert isinstance(line["emittedAtMs"], int)


async def test_responses_and_errors_carry_jsonrpc() -> None:
    peer, recv = make_peer()
    await peer.respond("abc", {"ok": True})
    await peer.respond_error(7, -32600, "nope")
    await peer.respond_error(None, -32700, "bad", {"d": 1})
    assert sent(recv) == [
        {"jsonrpc": "2.0", "id": "abc", "result": {"ok": True}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "nope"}},
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "bad", "data": {"d": 1}},
        },
    ]


async def test_opted_out_notifications_are_not_sent() -> None:
    peer, recv = make_peer()
    peer.opt_out = frozenset({"item/agentMessage/delta"})
    await peer.notify("item/agentMessage/delta", {})
    await peer.notify("turn/started", {})
    assert [m["method"] for m in sent(recv)] == ["turn/started"]


async def test_request_ids_count_from_zero_and_route_back() -> None:
    peer, recv = make_peer()
    results: dict[int, Any] = {}

    async def ask(n: int) -> None:
        response = await peer.request("item/tool/requestApproval", {"n": n})
        results[n] = (msgspec.json.decode(response.result), response.error)

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(ask, n)
            await trio.testing.wait_all_tasks_blocked()
        requests = sent(recv)
        assert [r["id"] for r in requests] == [0, 1, 2]
        assert all(r["jsonrpc"] == "2.0" and r["method"] for r in requests)
        by_n = {r["params"]["n"]: r["id"] for r in requests}
        # answer out of order
        for n in (2, 0, 1):
            raw = msgspec.Raw(msgspec.json.encode({"decision": f"d{n}"}))
            peer.route_response(by_n[n], raw, None)
    assert results == {n: ({"decision": f"d{n}"}, None) for n in range(3)}


async def test_error_responses_are_routed() -> None:
    peer, _recv = make_peer()
    out: list[Any] = []

    async def ask() -> None:
        out.append(await peer.request("m", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        peer.route_response(0, msgspec.Raw(), {"code": 1, "message": "no"})
        peer.route_response(1, msgspec.Raw(), "not an object")
    errors = sorted((r.error for r in out), key=lambda e: e["code"])
    assert errors[0]["code"] == -32603 and "malformed" in errors[0]["message"]
    assert errors[1] == {"code": 1, "message": "no"}


async def test_unknown_and_duplicate_responses_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "threadline.rpc")
    peer, _recv = make_peer()
    got: list[Any] = []

    async def ask() -> None:
        got.append(await peer.request("m", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        peer.route_response(99, msgspec.Raw(b"{}"), None)  # never issued
        peer.route_response("0", msgspec.Raw(b"{}"), None)  # our ids are integers
        peer.route_response(True, msgspec.Raw(b"{}"), None)  # True == 1 but is no id of ours
        peer.route_response(0.0, msgspec.Raw(b"{}"), None)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        peer.route_response(0, msgspec.Raw(b'{"n":1}'), None)
        peer.route_response(0, msgspec.Raw(b'{"n":2}'), None)  # duplicate
    assert [bytes(r.result) for r in got] == [b'{"n":1}']
    assert caplog.text.count("unknown request id") == 5


async def test_bool_id_does_not_resolve_request_one() -> None:
    peer, _recv = make_peer()
    got: list[Any] = []

    async def ask() -> None:
        got.append(await peer.request("m", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        peer.route_response(True, msgspec.Raw(b"1"), None)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        nursery.cancel_scope.cancel()


async def test_close_fails_pending_requests_with_peer_gone() -> None:
    peer, recv = make_peer()
    outcomes: list[str] = []

    async def ask() -> None:
        try:
            await peer.request("m", {})
        except PeerGone:
            outcomes.append("gone")

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        peer.close()
    assert outcomes == ["gone"] * 3
    assert peer.closed
    with pytest.raises(PeerGone):
        await peer.request("m", {})
    sent(recv)
    await peer.notify("turn/started", {})
    await peer.respond(1, {})
    assert sent(recv) == []  # nothing is sent once closed
    peer.route_response(0, msgspec.Raw(b"{}"), None)  # late answer: harmless


async def test_cancelled_request_is_withdrawn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "threadline.rpc")
    peer, _recv = make_peer()
    with trio.move_on_after(0.01):
        await peer.request("m", {})
    peer.route_response(0, msgspec.Raw(b"{}"), None)
    assert "unknown request id 0" in caplog.text


async def test_request_fails_when_the_outbox_is_broken() -> None:
    """If the writer side is gone, a request must not wait forever for an answer."""
    peer, recv = make_peer()
    await recv.aclose()
    with trio.fail_after(2), pytest.raises(PeerGone):
        await peer.request("m", {})
    assert peer.closed


# -- Connection ------------------------------------------------------------------------------


class Harness:
    """A Connection with a scripted method table, served from a list of input lines."""

    def __init__(self, *, max_line: int = 1 << 20) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.events: list[str] = []  # order of follow-ups vs. answers
        out_send, self.out = trio.open_memory_channel[bytes](10_000)
        self.peer = Peer(out_send)

        async def record(params: Any) -> Any:
            self.calls.append(("thread/read", params))
            return {"threadId": params.thread_id}

        async def boom(params: Any) -> Any:
            raise RuntimeError("kaput")

        async def state_error(params: Any) -> Any:
            raise RpcError(INVALID_REQUEST, "no active turn to interrupt")

        async def with_follow_up(params: Any) -> Any:
            async def then() -> None:
                self.events.append("follow-up")
                await self.peer.notify("turn/started", {})

            return Reply({"turn": "t"}, then)

        async def initialize(params: Any) -> Any:
            return {"userAgent": "x"}

        self.dispatcher = Dispatcher(
            {
                "initialize": (NoParams, initialize),
                "thread/read": (ReadParams, record),
                "boom": (NoParams, boom),
                "turn/interrupt": (NoParams, state_error),
                "turn/start": (NoParams, with_follow_up),
            }
        )

        async def on_initialize(call: PreparedCall) -> Any:
            return await call.handler(call.params)

        self.connection = Connection(
            self.peer, self.dispatcher, on_initialize=on_initialize, max_line=max_line
        )

    async def serve(self, *lines: bytes | dict[str, Any] | list[Any]) -> list[Any]:
        data = b"".join(
            (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
            for line in lines
        )
        await self.connection.serve(ChunkStream([data]))
        return sent(self.out)


INIT = {"id": "init", "method": "initialize", "params": {"clientInfo": {}}}


def by_id(messages: list[Any]) -> dict[Any, Any]:
    return {m.get("id"): m for m in messages if isinstance(m, dict) and "method" not in m}


async def test_not_initialized_then_initialized_then_already() -> None:
    h = Harness()
    out = await h.serve(
        {"method": "thread/read", "params": {"threadId": "early"}},  # ignored notification
        {"id": 1, "method": "thread/read", "params": {"threadId": "a"}},
        INIT,
        {"id": 2, "method": "initialize", "params": {}},
        {"method": "initialized"},
        {"id": 3, "method": "thread/read", "params": {"threadId": "b"}},
    )
    answers = by_id(out)
    assert answers[1]["error"] == {"code": INVALID_REQUEST, "message": "Not initialized"}
    assert answers["init"]["result"] == {"userAgent": "x"}
    assert answers[2]["error"] == {"code": INVALID_REQUEST, "message": "Already initialized"}
    assert answers[3]["result"] == {"threadId": "b"}
    assert [p.thread_id for _, p in h.calls] == ["b"]
    assert all(m["jsonrpc"] == "2.0" for m in out)


async def test_malformed_input_keeps_the_connection_serving() -> None:
    h = Harness(max_line=5000)
    out = await h.serve(
        INIT,
        b"not json",
        b'{"id": 1, "method": "thread/read", "params": {"threadId": "\xff\xfe"}}',
        b"[" * 2000 + b"]" * 2000,  # msgspec: RecursionError
        b'{"id": 2, "method": "thread/read", "params": {"threadId": "' + b"x" * 6000 + b'"}}',
        b"",
        b"   ",
        {"id": 3, "method": "thread/read", "params": {"threadId": "ok"}},
    )
    errors = [m["error"] for m in out if m.get("id") is None]
    assert [e["code"] for e in errors] == [PARSE_ERROR, PARSE_ERROR, PARSE_ERROR, INVALID_REQUEST]
    assert "message too large" in errors[3]["message"]
    assert errors[3]["data"] == {"limit": 5000}
    assert by_id(out)[3]["result"] == {"threadId": "ok"}


@pytest.mark.parametrize(
    ("message", "code", "needle"),
    [
        (5, INVALID_REQUEST, "expected an object"),
        ("str", INVALID_REQUEST, "expected an object"),
        ({"id": 1}, INVALID_REQUEST, "method"),
        ({"id": 1, "method": 5}, INVALID_REQUEST, "method"),
        ({"id": 1.5, "method": "thread/read"}, INVALID_REQUEST, "id must be"),
        ({"id": True, "method": "thread/read"}, INVALID_REQUEST, "id must be"),
        ({"id": 1, "method": "thread/read", "jsonrpc": "1.0"}, INVALID_REQUEST, "1.0"),
        ({"id": 1, "method": "thread/read", "params": 3}, INVALID_REQUEST, "params"),
        ({"id": 1, "method": "nope", "params": {}}, METHOD_NOT_FOUND, "nope"),
        ({"id": 1, "method": "thread/read", "params": {}}, INVALID_PARAMS, "threadId"),
        ({"id": 1, "method": "boom", "params": {}}, INTERNAL_ERROR, "kaput"),
        ({"id": 1, "method": "turn/interrupt"}, INVALID_REQUEST, "no active turn"),
    ],
)
async def test_request_errors(message: Any, code: int, needle: str) -> None:
    h = Harness()
    out = await h.serve(INIT, message)
    [error] = [m for m in out if m.get("id") != "init"]
    assert error["error"]["code"] == code
    assert needle in error["error"]["message"]


async def test_batch_is_answered_as_an_array() -> None:
    h = Harness()
    out = await h.serve(
        INIT,
        [
            {"id": 1, "method": "thread/read", "params": {"threadId": "a"}},
            {"method": "thread/read", "params": {"threadId": "notification"}},
            {"id": 2, "method": "nope"},
            7,
        ],
        [],
        [{"method": "thread/read", "params": {"threadId": "only-notifications"}}],
    )
    batches = [m for m in out if isinstance(m, list)]
    assert len(batches) == 1
    [batch] = batches
    assert [m.get("id") for m in batch] == [1, 2, None]
    assert batch[0]["result"] == {"threadId": "a"}
    assert batch[1]["error"]["code"] == METHOD_NOT_FOUND
    assert batch[2]["error"]["code"] == INVALID_REQUEST
    empty = [m for m in out if isinstance(m, dict) and m.get("id") is None]
    assert empty[0]["error"] == {"code": INVALID_REQUEST, "message": "Invalid request: empty batch"}
    ids = sorted(p.thread_id for _, p in h.calls)
    assert ids == ["a", "notification", "only-notifications"]


async def test_follow_up_runs_after_the_response_is_queued() -> None:
    h = Harness()
    out = await h.serve(
        INIT, {"id": 1, "method": "turn/start"}, [{"id": 2, "method": "turn/start"}]
    )
    kinds = [
        "batch" if isinstance(m, list) else m.get("method") or m.get("id")
        for m in out
        if not (isinstance(m, dict) and m.get("id") == "init")
    ]
    # The single request's answer precedes its turn/started; so does the batch answer.
    assert kinds.index(1) < kinds.index("turn/started")
    batch_at = kinds.index("batch")
    assert "turn/started" in kinds[batch_at + 1 :]
    assert kinds.count("turn/started") == 2


async def test_responses_are_routed_to_the_peer() -> None:
    h = Harness()
    got: list[Any] = []

    async def ask() -> None:
        got.append(await h.peer.request("item/tool/requestApproval", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        out = await h.serve(
            {"id": 0, "result": {"decision": "accept"}},  # accepted even before initialize
            {"id": 0, "result": {"decision": "decline"}},  # duplicate: ignored
            {"id": 41, "error": {"code": 1, "message": "x"}},  # never issued: ignored
        )
    assert [msgspec.json.decode(r.result) for r in got] == [{"decision": "accept"}]
    assert [m.get("method") for m in out] == ["item/tool/requestApproval"]


async def test_string_and_integer_ids_are_echoed() -> None:
    h = Harness()
    out = await h.serve(
        INIT,
        {"id": "req-1", "method": "thread/read", "params": {"threadId": "a"}},
        {"id": 0, "method": "thread/read", "params": {"threadId": "b"}},
        {"id": -5, "method": "thread/read", "params": {"threadId": "c"}},
        {"id": 2**70, "method": "thread/read", "params": {"threadId": "d"}},
    )
    answers = by_id(out)
    assert answers["req-1"]["result"] == {"threadId": "a"}
    assert answers[0]["result"] == {"threadId": "b"}
    assert answers[-5]["result"] == {"threadId": "c"}
    assert answers[2**70]["result"] == {"threadId": "d"}


async def test_response_with_neither_result_nor_error_is_routed_as_an_error() -> None:
    """`{"id": <ours>}` is a malformed answer: it resolves our request (as an error, so the
    approval fails closed) and is never answered with an error of our own."""
    h = Harness()
    got: list[Any] = []

    async def ask() -> None:
        got.append(await h.peer.request("item/tool/requestApproval", {}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        out = await h.serve(INIT, {"jsonrpc": "2.0", "id": 0}, {"id": 0})
    [response] = got
    assert response.error is not None and response.error["code"] == INVALID_REQUEST
    assert [m.get("method") or m.get("id") for m in out] == ["item/tool/requestApproval", "init"]
    # an id we never issued, without a method, is a broken request: answered with -32600
    out = await Harness().serve(INIT, {"id": 5})
    assert by_id(out)[5]["error"]["code"] == INVALID_REQUEST
