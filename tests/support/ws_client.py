"""A test client for threadline's listeners: the real `threadline app-server --listen …`
process (`listening_server`), WebSocket connections to it over TCP or a unix socket
(`WsClient`, one JSON-RPC message per text frame), and a frame-by-frame client over a raw socket
(`RawWs`, `client_frame`) that can send what a well-behaved client never would."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    wrap_client_stream,
)
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from tests.support.client import ROOT, server_argv, server_env

Message = dict[str, Any]
_URL = re.compile(rb"listening on: (\S+)")


class Listening:
    """A running listener server: its process, bound URL and stderr so far."""

    def __init__(self, proc: trio.Process, url: str, stderr: bytearray) -> None:
        self.proc, self.url, self.stderr = proc, url, stderr

    @property
    def http(self) -> tuple[str, int]:
        host, _, port = self.url[len("ws://") :].rpartition(":")
        return host.strip("[]"), int(port)


@contextlib.asynccontextmanager
async def listening_server(
    home: Path, listen: str, *args: str, env: Mapping[str, str] | None = None
) -> AsyncIterator[Listening]:
    """Start `threadline app-server --listen LISTEN ARGS…`; on exit SIGTERM it and require
    exit status 0."""
    proc = await trio.lowlevel.open_process(
        [*server_argv(), "app-server", "--listen", listen, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=server_env(home, env),
        cwd=str(ROOT),
    )
    stderr = bytearray()
    assert proc.stderr is not None
    try:
        async with trio.open_nursery() as nursery:
            with trio.fail_after(20):
                while not (found := _URL.search(stderr)):
                    chunk = await proc.stderr.receive_some()
                    assert chunk, f"exited before listening: {stderr.decode()}"
                    stderr += chunk

            async def drain() -> None:
                assert proc.stderr is not None
                while chunk := await proc.stderr.receive_some():
                    stderr.extend(chunk)

            nursery.start_soon(drain)
            yield Listening(proc, found.group(1).decode(), stderr)
            if proc.returncode is None:
                proc.terminate()
            with trio.fail_after(20):
                rc = await proc.wait()
            assert rc == 0, f"exit {rc}: {stderr.decode()[-3000:]}"
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class WsClient:
    """One connection: requests with their own ids, every other message in `events`."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self._next = 0
        self._waiters: dict[Any, trio.MemorySendChannel[Message]] = {}
        self.events_send, self.events = trio.open_memory_channel[Message](100_000)
        self.closed = trio.Event()

    async def read_loop(self) -> None:
        try:
            while True:
                raw = await self.ws.get_message()
                message = json.loads(raw)
                waiter = None
                if isinstance(message, dict) and "method" not in message:
                    waiter = self._waiters.pop(message.get("id"), None)
                if waiter is not None:
                    waiter.send_nowait(message)
                else:
                    self.events_send.send_nowait(message)
        except ConnectionClosed:
            pass
        finally:
            self.closed.set()

    async def send(self, message: Any) -> None:
        await self.ws.send_message(json.dumps(message))

    async def request(self, method: str, params: Any = None, timeout: float = 30) -> Message:
        self._next += 1
        rid = f"c{self._next}"
        send, recv = trio.open_memory_channel[Message](1)
        self._waiters[rid] = send
        await self.send({"id": rid, "method": method, "params": params or {}})
        with trio.fail_after(timeout):
            return await recv.receive()

    async def call(self, method: str, params: Any = None, timeout: float = 30) -> Any:
        response = await self.request(method, params, timeout)
        assert "result" in response, f"{method}: {response}"
        return response["result"]

    async def initialize(self) -> Any:
        return await self.call("initialize", {"clientInfo": {"name": "ws-test", "version": "0"}})

    async def wait_for(
        self, method: str, timeout: float = 30, seen: list[Message] | None = None
    ) -> Message:
        with trio.fail_after(timeout):
            while True:
                event = await self.events.receive()
                if seen is not None:
                    seen.append(event)
                if event.get("method") == method:
                    return event


@contextlib.asynccontextmanager
async def ws_connect(
    url: str, headers: list[tuple[bytes, bytes]] | None = None
) -> AsyncIterator[WsClient]:
    """Connect to `ws://IP:PORT` or `unix://PATH` and read in the background."""
    stream: trio.abc.Stream
    if url.startswith("unix://"):
        stream = await trio.open_unix_socket(url[len("unix://") :])
    else:
        host, _, port = url[len("ws://") :].rpartition(":")
        stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    async with stream, trio.open_nursery() as nursery:
        ws = await wrap_client_stream(
            nursery,
            stream,
            "localhost",
            "/",
            extra_headers=headers,
            max_message_size=32 * 1024 * 1024,
        )
        client = WsClient(ws)
        nursery.start_soon(client.read_loop)
        try:
            yield client
        finally:
            with trio.move_on_after(2):
                await ws.aclose()
            nursery.cancel_scope.cancel()


async def http_get(host: str, port: int, request: bytes) -> bytes:
    """Send raw HTTP bytes; everything the server answers until it closes."""
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(request)
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                data += chunk
    return data


async def refused_status(url: str, headers: list[tuple[bytes, bytes]] | None = None) -> int:
    """The HTTP status the server refuses this upgrade with (fails if it accepts it)."""
    try:
        async with ws_connect(url, headers):
            pass
    except BaseException as exc:
        rejected = _find(exc, ConnectionRejected)
        if rejected is None:
            raise
        return int(rejected.status_code)
    raise AssertionError(f"the upgrade with {headers} was accepted")


def _find(exc: BaseException, kind: type[ConnectionRejected]) -> ConnectionRejected | None:
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find(inner, kind)) is not None:
                return found
    return None


# -- frame by frame ------------------------------------------------------------------------------

OPCODES = {"continuation": 0x0, "text": 0x1, "binary": 0x2, "close": 0x8, "ping": 0x9, "pong": 0xA}


def client_frame(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """One client frame, built by hand so it may be anything: a text frame cut inside a UTF-8
    character, a reserved opcode or bit, an unmasked frame. The mask key is 0 (the payload goes
    out as it is: masking 16 MiB in Python would take seconds)."""
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | opcode])
    mask = 0x80 if masked else 0
    n = len(payload)
    if n < 126:
        head += bytes([mask | n])
    elif n < 1 << 16:
        head += bytes([mask | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([mask | 127]) + n.to_bytes(8, "big")
    return head + (b"\0\0\0\0" if masked else b"") + payload


class RawWs:
    """A client WebSocket over a raw stream: wsproto does the handshake and reads the server's
    frames; frames go out as the test builds them (`send_frames`) or through wsproto (`send`)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.text = ""

    async def open(self) -> None:
        await self.stream.send_all(self.ws.send(Request(host="localhost", target="/")))
        assert isinstance(await self.event(), AcceptConnection)

    async def event(self, timeout: float = 10) -> Any:
        """The next event wsproto reads (a CloseConnection with code 1006 at EOF)."""
        with trio.fail_after(timeout):
            while True:
                for event in self.ws.events():
                    return event
                data = await self.stream.receive_some()
                self.ws.receive_data(data or None)

    async def message(self, timeout: float = 10) -> Any:
        """The next whole text message, decoded; a CloseConnection event as it is."""
        while True:
            event = await self.event(timeout)
            if isinstance(event, CloseConnection):
                return event
            if isinstance(event, TextMessage):
                self.text += event.data
                if event.message_finished:
                    text, self.text = self.text, ""
                    return json.loads(text)

    async def send(self, data: str, finished: bool = True) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(data=data, message_finished=finished)))

    async def send_frames(self, *frames: bytes) -> None:
        await self.stream.send_all(b"".join(frames))

    async def eof(self, timeout: float = 10) -> bool:
        """Whether the server closes the socket within `timeout` (what it sends meanwhile is
        dropped)."""
        with trio.move_on_after(timeout):
            try:
                while await self.stream.receive_some():
                    pass
            except trio.BrokenResourceError:
                pass  # a reset: closed too
            return True
        return False


async def raw_client(url: str) -> RawWs:
    host, _, port = url[len("ws://") :].rpartition(":")
    client = RawWs(await trio.open_tcp_stream(host.strip("[]"), int(port)))
    await client.open()
    return client
