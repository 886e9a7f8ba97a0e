"""`threadline.client` against a scripted peer over in-memory streams: what a newer or
misbehaving server may write must not break the client."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from threadline.client import RpcError, ServerClosed, ServerRequest, UnknownNotification, connect
from threadline.protocol import AgentMessageDeltaNotification, TurnCompletedNotification


class Peer:
    """The server side of an in-memory connection."""

    def __init__(self) -> None:
        self.to_client, self.client_in = trio.testing.memory_stream_one_way_pair()
        self.client_out, self.from_client = trio.testing.memory_stream_one_way_pair()
        self._buf = b""

    async def write(self, message: Any) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        await self.to_client.send_all(data)

    async def read(self) -> Any:
        while b"\n" not in self._buf:
            chunk = await self.from_client.receive_some()
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)


def turn_completed(thread_id: str, turn_id: str) -> dict[str, Any]:
    return {
        "method": "turn/completed",
        "params": {
            "threadId": thread_id,
            "turn": {"id": turn_id, "status": "completed", "items": []},
        },
    }


async def test_garbage_unknown_shapes_and_stray_responses_are_tolerated() -> None:
    peer = Peer()
    async with connect(peer.client_out, peer.client_in) as client:
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
    peer = Peer()

    async def broken(_request: ServerRequest) -> Any:
        raise RuntimeError("bug")

    async with connect(peer.client_out, peer.client_in) as client:
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
            await peer.to_client.aclose()
        with pytest.raises(ServerClosed):
            await client.request("thread/list", {})
