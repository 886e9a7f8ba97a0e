"""`threadline.client` against a scripted peer over in-memory streams: what a newer or
misbehaving server may write must not break the client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support.json_peer import JsonLinePeer
from threadline.backends.instances import create_backends
from threadline.client import (
    RpcError,
    ServerClosed,
    ServerRequest,
    TurnStream,
    UnknownNotification,
    connect,
    image,
    in_process,
    message_item,
)
from threadline.protocol import (
    AgentMessageDeltaNotification,
    ReadOnlySandbox,
    TurnCompletedNotification,
)
from threadline.server.app import Server
from threadline.server.config import ServerConfig
from threadline.store import ThreadStore


def turn_completed(thread_id: str, turn_id: str) -> dict[str, Any]:
    return {
        "method": "turn/completed",
        "params": {
            "threadId": thread_id,
            "turn": {"id": turn_id, "status": "completed", "items": []},
        },
    }


async def test_garbage_unknown_shapes_and_stray_responses_are_tolerated() -> None:
    peer = JsonLinePeer()
    async with connect(peer.their_send, peer.their_receive) as client:
        events = client.subscribe()
        started = trio.Event()
        result: dict[str, Any] = {}

        async def start() -> None:
            stream = await client.start_turn("t1", "hi")
            started.set()
            result["seen"] = [n async for n in stream]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            request = await peer.read()
            assert request["method"] == "turn/start" and request["jsonrpc"] == "2.0"
            assert request["params"]["threadId"] == "t1"
            assert request["params"]["input"][0]["type"] == "text"
            assert request["params"]["input"][0]["text"] == "hi"
            # Notifications may arrive before the response: they are not lost.
            await peer.write(
                {
                    "method": "item/agentMessage/delta",
                    "params": {"threadId": "t1", "turnId": "u1", "itemId": "i", "delta": "a"},
                }
            )
            await peer.write(b"this is not json\n")
            await peer.write({"id": 999, "result": {}})  # a response nobody asked for
            await peer.write({"id": request["id"], "result": {"turn": _turn("u1")}})
            await started.wait()
            # A newer server: an unknown method and a known one with an unknown item kind.
            await peer.write({"method": "future/thing", "params": {"threadId": "t1", "x": 1}})
            await peer.write(
                {
                    "method": "item/started",
                    "params": {
                        "threadId": "t1",
                        "turnId": "u1",
                        "item": {"type": "hologram", "id": "h"},
                        "startedAtMs": 1,
                    },
                }
            )
            await peer.write(turn_completed("t1", "u1"))

        seen = result["seen"]
        assert isinstance(seen[0], AgentMessageDeltaNotification) and seen[0].delta == "a"
        assert isinstance(seen[1], UnknownNotification) and seen[1].method == "future/thing"
        assert isinstance(seen[2], UnknownNotification) and seen[2].method == "item/started"
        assert isinstance(seen[3], TurnCompletedNotification)
        assert len(seen) == 4
        assert len([e async for e in _drain(events)]) == 4


async def _drain(events: trio.MemoryReceiveChannel[Any]) -> Any:
    while True:
        try:
            yield events.receive_nowait()
        except trio.WouldBlock:
            return


def _turn(turn_id: str) -> dict[str, Any]:
    return {"id": turn_id, "status": "inProgress", "items": []}


async def test_errors_and_unanswerable_requests() -> None:
    peer = JsonLinePeer()

    async def broken(_request: ServerRequest) -> Any:
        raise RuntimeError("bug")

    async with connect(peer.their_send, peer.their_receive) as client:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                with pytest.raises(RpcError) as info:
                    await client.request("thread/read", {"threadId": "x"})
                assert info.value.code == -32602 and info.value.data == {"why": "bad"}

            nursery.start_soon(call)
            request = await peer.read()
            await peer.write(
                {
                    "id": request["id"],
                    "error": {"code": -32602, "message": "Invalid params", "data": {"why": "bad"}},
                }
            )

        # No handler: an approval is declined, an unknown request gets -32601.
        approval = {
            "threadId": "t",
            "turnId": "u",
            "itemId": "i",
            "startedAtMs": 1,
            "command": "rm -rf /",
        }
        await peer.write(
            {"id": 7, "method": "item/commandExecution/requestApproval", "params": approval}
        )
        assert (await peer.read()) == {"jsonrpc": "2.0", "id": 7, "result": {"decision": "decline"}}
        await peer.write({"id": "q", "method": "something/new", "params": {}})
        answer = await peer.read()
        assert answer["id"] == "q" and answer["error"]["code"] == -32601

        # A handler that raises declines too.
        client.approval_handler = broken
        await peer.write(
            {"id": 8, "method": "item/commandExecution/requestApproval", "params": approval}
        )
        assert (await peer.read())["result"] == {"decision": "decline"}

        # The server goes away: pending requests and turns end with ServerClosed.
        async with trio.open_nursery() as nursery:

            async def pending() -> None:
                with pytest.raises(ServerClosed):
                    await client.request("thread/list", {})

            nursery.start_soon(pending)
            await peer.read()
            await peer.to_them.aclose()
        with pytest.raises(ServerClosed):
            await client.request("thread/list", {})


async def test_in_process_server_runs_a_turn_and_the_trace_sees_every_line(
    home: Path, workdir: Path
) -> None:
    server = Server(ServerConfig(default_backend="mock"), ThreadStore(home), create_backends())
    lines: list[tuple[str, Any]] = []
    answered_null_id = trio.Event()

    def trace(side: str, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = line
        lines.append((side, message))
        if side == "receive" and message.get("id", 0) is None:
            answered_null_id.set()

    async with in_process(server.serve, trace=trace, client_name="tests") as client:
        assert client.server_info is not None
        thread = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread
        turn = await client.run_turn(thread.id, "/text hello in process")
        assert turn.completed is not None and turn.completed.turn.status == "completed"
        assert turn.text == "hello in process"
        await client.send_line(b'{"id": 5, "method": ')
        with trio.fail_after(10):
            await answered_null_id.wait()

    sent = [m for side, m in lines if side == "send"]
    assert [m.get("method") for m in sent[:3]] == ["initialize", "initialized", "thread/start"]
    assert sent[0]["params"]["clientInfo"]["name"] == "tests"
    assert sent[-1] == b'{"id": 5, "method": '
    received = [m for side, m in lines if side == "receive"]
    assert "turn/completed" in [m.get("method") for m in received]
    assert received[-1]["id"] is None and received[-1]["error"]["code"] == -32700


async def test_wire_shapes_of_images_overrides_steer_and_a_compaction_turn() -> None:
    peer = JsonLinePeer()
    async with connect(peer.their_send, peer.their_receive) as client:
        async with trio.open_nursery() as nursery:
            streams: list[TurnStream] = []

            async def start() -> None:
                prompt = ["look", image("https://example.invalid/a.png"), image(Path("b.png"))]
                stream = await client.start_turn(
                    "t1", prompt, model="m2", effort="low", sandbox_policy=ReadOnlySandbox()
                )
                await stream.steer([image("data:image/png;base64,AA==", detail="high")])
                streams.append(stream)

            nursery.start_soon(start)
            request = await peer.read()
            assert request["method"] == "turn/start"
            assert request["params"] == {
                "threadId": "t1",
                "input": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "url": "https://example.invalid/a.png"},
                    {"type": "localImage", "path": "b.png"},
                ],
                "model": "m2",
                "effort": "low",
                "sandboxPolicy": {"type": "readOnly"},
            }
            await peer.write({"id": request["id"], "result": {"turn": _turn("u1")}})
            steer = await peer.read()
            assert steer["method"] == "turn/steer"
            assert steer["params"] == {
                "threadId": "t1",
                "expectedTurnId": "u1",
                "input": [{"type": "image", "url": "data:image/png;base64,AA==", "detail": "high"}],
            }
            await peer.write({"id": steer["id"], "result": {"turnId": "u1"}})
        await peer.write(turn_completed("t1", "u1"))
        assert (await streams[0].wait()).turn.id == "u1"

        # A compaction answers {}; its turn is the one `turn/started` announces next.
        async with trio.open_nursery() as nursery:
            compactions: list[TurnStream] = []

            async def compact() -> None:
                compactions.append(await client.compact_thread("t1"))

            nursery.start_soon(compact)
            request = await peer.read()
            assert request["method"] == "thread/compact/start"
            assert request["params"] == {"threadId": "t1"}
            await peer.write({"id": request["id"], "result": {}})
        [compaction] = compactions
        started = {"threadId": "t1", "turn": _turn("c1")}
        await peer.write({"method": "turn/started", "params": started})
        await peer.write(turn_completed("t1", "c1"))
        assert (await compaction.wait()).turn.id == "c1" and compaction.turn_id == "c1"


def test_message_items_have_the_responses_api_shape() -> None:
    assert message_item("user", "Hi") == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hi"}],
    }
    assert message_item("assistant", "Yes")["content"] == [{"type": "output_text", "text": "Yes"}]
