"""Malformed WebSocket traffic against a real listener (wsproto on a raw socket, so frames can
be fragmented or broken on purpose): the server answers or closes that connection cleanly,
keeps serving, and other connections see nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from wsproto.events import CloseConnection

from tests.support.ws_client import client_frame, listening_server, raw_client, ws_connect

pytestmark = pytest.mark.e2e

INIT = {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "f", "version": "0"}}}


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
        # Invalid UTF-8 in a text frame: that connection is failed with a close frame, code 1007
        # (RFC 6455 §8.1), and the socket closed; nothing else.
        await raw.send_frames(client_frame(0x1, b'{"id":3,"method":"\xff\xfe"}'))
        closed = await raw.message()
        assert isinstance(closed, CloseConnection) and closed.code == 1007, closed
        assert await raw.eof()
        await raw.stream.aclose()
        # An unknown opcode and a message cut off mid-fragment, then the socket dropped.
        for frames in ([client_frame(0x3, b"x")], [client_frame(0x1, b'{"id":', fin=False)]):
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
