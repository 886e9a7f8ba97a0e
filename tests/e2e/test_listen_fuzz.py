"""Malformed WebSocket traffic against a real listener (wsproto on a raw socket, so frames can
be fragmented or broken on purpose): the server answers or closes that connection cleanly,
keeps serving, and other connections see nothing of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Request,
    TextMessage,
)

from tests.support.ws_client import listening_server, ws_connect

pytestmark = pytest.mark.e2e

INIT = {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "f", "version": "0"}}}


class RawWs:
    """A client WebSocket over a raw TCP stream, frame by frame."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.text = ""

    async def open(self) -> None:
        await self.stream.send_all(self.ws.send(Request(host="localhost", target="/")))
        assert isinstance(await self.event(), AcceptConnection)

    async def event(self) -> Any:
        with trio.fail_after(10):
            while True:
                for event in self.ws.events():
                    return event
                data = await self.stream.receive_some()
                self.ws.receive_data(data or None)

    async def message(self) -> Any:
        """The next whole text message, decoded; a CloseConnection event as it is."""
        while True:
            event = await self.event()
            if isinstance(event, CloseConnection):
                return event
            if isinstance(event, TextMessage):
                self.text += event.data
                if event.message_finished:
                    text, self.text = self.text, ""
                    return json.loads(text)

    async def send(self, data: str, finished: bool = True) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(data=data, message_finished=finished)))


def raw_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A masked client frame (mask key 0: the payload is sent as it is), payload < 126 bytes."""
    assert len(payload) < 126
    return bytes([(0x80 if fin else 0) | opcode, 0x80 | len(payload)]) + b"\0\0\0\0" + payload


async def raw_client(url: str) -> RawWs:
    host, _, port = url[len("ws://") :].rpartition(":")
    client = RawWs(await trio.open_tcp_stream(host, int(port)))
    await client.open()
    return client


async def test_fragmented_and_broken_frames(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv, ws_connect(srv.url) as other:
        await other.initialize()
        # A message in three fragments is one message.
        raw = await raw_client(srv.url)
        text = json.dumps(INIT)
        await raw.send(text[:10], finished=False)
        await raw.send(text[10:20], finished=False)
        await raw.send(text[20:])
        assert (await raw.message())["result"]["serverInfo"]["name"] == "threadline"
        # Text that is JSON but no request, and a batch of garbage: errors, connection kept.
        await raw.send("[1, 2]")
        answer = await raw.message()
        assert [e["error"]["code"] for e in answer] == [-32600, -32600]
        await raw.send(json.dumps({"id": 2, "method": "thread/list", "params": {}}))
        assert (await raw.message())["result"]["data"] == []
        # Invalid UTF-8 in a text frame: that connection ends (trio-websocket drops the socket
        # after wsproto's 1007; the client sees the socket close), nothing else.
        await raw.stream.send_all(raw_frame(0x1, b'{"id":3,"method":"\xff\xfe"}'))
        closed = await raw.message()
        assert isinstance(closed, CloseConnection) and closed.code in (1006, 1007)
        await raw.stream.aclose()
        # An unknown opcode and a message cut off mid-fragment, then the socket dropped.
        for frames in ([raw_frame(0x3, b"x")], [raw_frame(0x1, b'{"id":', fin=False)]):
            bad = await raw_client(srv.url)
            await bad.stream.send_all(b"".join(frames))
            await bad.stream.aclose()
        # Handshakes cut short: the head only, an upgrade with a bad key, half a request line.
        upgrade = (
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n"
        )
        for data in (
            upgrade + b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            upgrade + b"\r\n",
            b"GET / HT",
        ):
            host, _, port = srv.url[len("ws://") :].rpartition(":")
            stream = await trio.open_tcp_stream(host, int(port))
            await stream.send_all(data)
            await stream.aclose()
        # The other connection and new ones are served as before.
        tid = str(
            (await other.call("thread/start", {"modelProvider": "mock", "cwd": str(workdir)}))[
                "thread"
            ]["id"]
        )
        await other.call("turn/start", {"threadId": tid, "input": [{"type": "text", "text": "hi"}]})
        done = await other.wait_for("turn/completed")
        assert done["params"]["turn"]["status"] == "completed"
        async with ws_connect(srv.url) as late:
            await late.initialize()
