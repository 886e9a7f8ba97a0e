"""A test client for threadline's listeners: the real `threadline app-server --listen …`
process (`listening_server`) and WebSocket connections to it over TCP or a unix socket
(`WsClient`), one JSON-RPC message per text frame."""

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
