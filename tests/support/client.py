"""A test client that runs `threadline` as a real subprocess over stdio.

Every line the server writes is decoded and validated against `schemas/`; notifications and
server requests are queued for the test to consume in order."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from threadline.rpc.framing import LineReader

from .schema_check import validate_outbound

ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    def __init__(self, proc: trio.Process, nursery: trio.Nursery) -> None:
        self.proc = proc
        self._nursery = nursery
        self._next_id = 1000
        self._waiters: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._methods: dict[Any, str] = {}
        self.events_send, self.events = trio.open_memory_channel[dict[str, Any]](100_000)
        self.all_messages: list[dict[str, Any]] = []
        self.stdout_closed = trio.Event()
        self.stderr = bytearray()
        self.schema_errors: list[str] = []

    # -- plumbing --------------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        reader = LineReader(self.proc.stdout)
        try:
            while (line := await reader.receive_line()) is not None:
                message = json.loads(line)
                self.all_messages.append(message)
                try:
                    validate_outbound(message, self._methods)
                except AssertionError as exc:
                    self.schema_errors.append(str(exc))
                if isinstance(message, dict) and "method" not in message:
                    waiter = self._waiters.pop(message.get("id"), None)
                    if waiter is not None:
                        waiter.send_nowait(message)
                        continue
                self.events_send.send_nowait(message)
        finally:
            self.stdout_closed.set()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for chunk in self.proc.stderr:
            self.stderr += chunk

    async def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(data)

    async def send(self, message: Any) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    async def request(
        self, method: str, params: Any = None, *, timeout: float = 30
    ) -> dict[str, Any]:
        """Send a request and return the whole response message (result or error)."""
        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self._waiters[rid] = send
        self._methods[rid] = method
        message: dict[str, Any] = {"id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        with trio.fail_after(timeout):
            return await recv.receive()

    async def call(self, method: str, params: Any = None, *, timeout: float = 30) -> Any:
        response = await self.request(method, params, timeout=timeout)
        if "error" in response:
            raise AssertionError(f"{method} failed: {response['error']}")
        return response["result"]

    async def next_event(self, timeout: float = 30) -> dict[str, Any]:
        with trio.fail_after(timeout):
            return await self.events.receive()

    async def wait_for(
        self,
        pred: Callable[[dict[str, Any]], bool],
        timeout: float = 30,
        seen: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        with trio.fail_after(timeout):
            while True:
                event = await self.events.receive()
                if seen is not None:
                    seen.append(event)
                if pred(event):
                    return event

    async def initialize(self) -> dict[str, Any]:
        return await self.call("initialize", {"clientInfo": {"name": "tests", "version": "0"}})  # type: ignore[no-any-return]

    async def run_turn(
        self,
        thread_id: str,
        text: str,
        *,
        on_request: Callable[[dict[str, Any]], Any] | None = None,
        timeout: float = 30,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start a turn and collect its events until `turn/completed`. Server requests are
        answered with `on_request(message)` → result (default: decline)."""
        result = await self.call(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
        )
        turn_id = result["turn"]["id"]
        events: list[dict[str, Any]] = []
        with trio.fail_after(timeout):
            while True:
                event = await self.events.receive()
                events.append(event)
                if "id" in event and "method" in event:
                    answer = on_request(event) if on_request else {"decision": "decline"}
                    await self.send({"id": event["id"], "result": answer})
                if (
                    event.get("method") == "turn/completed"
                    and event["params"]["turn"]["id"] == turn_id
                ):
                    return event, events

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    async def wait(self, timeout: float = 20) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()


def server_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["THREADLINE_HOME"] = str(home)
    env.setdefault("THREADLINE_LOG_LEVEL", "INFO")
    env["AGENT_BACKEND"] = "mock"
    env.update(extra or {})
    return env


def server_argv() -> list[str]:
    return [sys.executable, "-m", "threadline"]


class running_server:
    """Start threadline; on exit close stdin and require a clean exit and valid messages."""

    def __init__(
        self,
        nursery: trio.Nursery,
        home: Path,
        env: Mapping[str, str] | None = None,
        *,
        check_exit: bool = True,
    ) -> None:
        self._nursery = nursery
        self._home = home
        self._env = env
        self._check_exit = check_exit
        self.server: ServerProcess | None = None

    async def __aenter__(self) -> ServerProcess:
        proc = await trio.lowlevel.open_process(
            server_argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=server_env(self._home, self._env),
            cwd=str(ROOT),
        )
        server = ServerProcess(proc, self._nursery)
        self._nursery.start_soon(server._read_stdout)
        self._nursery.start_soon(server._read_stderr)
        self.server = server
        return server

    async def __aexit__(self, *exc: object) -> None:
        server = self.server
        assert server is not None
        if server.proc.returncode is None:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await server.close_stdin()
            try:
                rc = await server.wait(20)
            except trio.TooSlowError:
                server.proc.kill()
                await server.proc.wait()
                raise AssertionError("threadline did not exit after stdin EOF") from None
            if self._check_exit and exc[0] is None:
                assert rc == 0, (
                    f"exit code {rc}; stderr:\n{server.stderr.decode(errors='replace')[-3000:]}"
                )
        with trio.move_on_after(5):
            await server.stdout_closed.wait()
        if exc[0] is None:
            assert not server.schema_errors, "\n".join(server.schema_errors[:5])
