"""A test client that runs `threadline` as a real subprocess over stdio.

Every line the server writes is decoded and validated against `schemas/` (a batch answer is
validated element by element) and, where Codex defines the method, against the schema the pinned
Codex CLI generates (tests/support/codex_conformance.py); notifications, server requests,
unclaimed responses and batch answers are queued for the test to consume in order."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from threadline.rpc.framing import LineReader

from . import codex_conformance
from .schema_check import validate_outbound

ROOT = Path(__file__).resolve().parents[2]

Message = dict[str, Any]


def accept(_request: Message) -> Any:
    """An `on_request` answer: accept every approval."""
    return {"decision": "accept"}


def decline(_request: Message) -> Any:
    return {"decision": "decline"}


class ServerProcess:
    def __init__(self, proc: trio.Process, nursery: trio.Nursery) -> None:
        self.proc = proc
        self._nursery = nursery
        self._next_id = 1000
        self._waiters: dict[Any, trio.MemorySendChannel[Message]] = {}
        self._methods: dict[Any, str] = {}
        self.events_send, self.events = trio.open_memory_channel[Any](100_000)
        #: Every decoded stdout line, in order (dicts, or lists for batch answers).
        self.all_messages: list[Any] = []
        #: Every stdout line as received (bytes, without the newline).
        self.raw_lines: list[bytes] = []
        self.stdout_closed = trio.Event()
        self.stderr = bytearray()
        self.schema_errors: list[str] = []
        self._send_lock = trio.Lock()
        #: Checks every message against the pinned Codex CLI's own schema (None: unavailable).
        self._codex = codex_conformance.for_server()
        if self._codex is None and codex_conformance.required():
            self.schema_errors.append(
                f"Codex conformance cannot run under CI: {codex_conformance.unavailable_reason()}"
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")

    # -- plumbing --------------------------------------------------------------------------------

    def _validate(self, message: Any) -> None:
        try:
            validate_outbound(message, self._methods)
        except AssertionError as exc:
            self.schema_errors.append(str(exc))
        if self._codex is not None:
            self.schema_errors.extend(map(str, self._codex.check(message, self._methods)))

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        reader = LineReader(self.proc.stdout)
        try:
            while (line := await reader.receive_line()) is not None:
                self.raw_lines.append(line)
                try:
                    message = json.loads(line)
                except ValueError:
                    self.schema_errors.append(f"non-JSON line on stdout: {line[:300]!r}")
                    continue
                self.all_messages.append(message)
                self._validate(message)
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
        async with self._send_lock:  # trio streams refuse concurrent send_all calls
            await self.proc.stdin.send_all(data)

    async def send(self, message: Any) -> None:
        await self.send_raw(json.dumps(message).encode() + b"\n")

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def expect(self, rid: Any, method: str | None = None) -> trio.MemoryReceiveChannel[Message]:
        """Claim the response with id `rid` (register before sending). `method` lets the
        response be checked against that method's result schema."""
        send, recv = trio.open_memory_channel[Message](1)
        self._waiters[rid] = send
        if method is not None:
            self._methods[rid] = method
        return recv

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float = 30,
        rid: Any = None,
        jsonrpc: bool = False,
    ) -> Message:
        """Send a request and return the whole response message (result or error)."""
        rid = self.new_id() if rid is None else rid
        recv = self.expect(rid, method)
        message: Message = {"id": rid, "method": method}
        if jsonrpc:
            message = {"jsonrpc": "2.0", **message}
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

    async def error(self, method: str, params: Any = None, *, timeout: float = 30) -> Message:
        """Send a request that must fail; return its `error` object."""
        response = await self.request(method, params, timeout=timeout)
        assert "error" in response, f"{method} unexpectedly succeeded: {response}"
        return response["error"]  # type: ignore[no-any-return]

    async def next_event(self, timeout: float = 30) -> Any:
        with trio.fail_after(timeout):
            return await self.events.receive()

    async def wait_for(
        self,
        pred: Callable[[Any], bool],
        timeout: float = 30,
        seen: list[Any] | None = None,
    ) -> Any:
        with trio.fail_after(timeout):
            while True:
                event = await self.events.receive()
                if seen is not None:
                    seen.append(event)
                if pred(event):
                    return event

    async def wait_method(
        self, method: str, timeout: float = 30, seen: list[Any] | None = None
    ) -> Message:
        return await self.wait_for(  # type: ignore[no-any-return]
            lambda e: isinstance(e, dict) and e.get("method") == method, timeout, seen
        )

    async def initialize(self) -> dict[str, Any]:
        return await self.call("initialize", {"clientInfo": {"name": "tests", "version": "0"}})  # type: ignore[no-any-return]

    async def start_thread(self, cwd: Path | str, **params: Any) -> str:
        params = {"modelProvider": "mock", "cwd": str(cwd), **params}
        result = await self.call("thread/start", params)
        return result["thread"]["id"]  # type: ignore[no-any-return]

    async def start_turn(self, thread_id: str, text: str) -> str:
        result = await self.call(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
        )
        assert result["turn"]["status"] == "inProgress", result
        return result["turn"]["id"]  # type: ignore[no-any-return]

    async def collect_turn(
        self,
        turn_id: str,
        *,
        on_request: Callable[[Message], Any] | None = None,
        timeout: float = 30,
        events: list[Any] | None = None,
    ) -> tuple[Message, list[Any]]:
        """Collect events until `turn/completed` of `turn_id`, answering server requests with
        `on_request(message)` → result (default: decline)."""
        events = [] if events is None else events
        with trio.fail_after(timeout):
            while True:
                event = await self.events.receive()
                events.append(event)
                if isinstance(event, dict) and "id" in event and "method" in event:
                    answer = on_request(event) if on_request else {"decision": "decline"}
                    await self.send({"id": event["id"], "result": answer})
                if (
                    isinstance(event, dict)
                    and event.get("method") == "turn/completed"
                    and event["params"]["turn"]["id"] == turn_id
                ):
                    return event, events

    async def run_turn(
        self,
        thread_id: str,
        text: str,
        *,
        on_request: Callable[[Message], Any] | None = None,
        timeout: float = 30,
    ) -> tuple[Message, list[Any]]:
        """Start a turn and collect its events until `turn/completed`. Server requests are
        answered with `on_request(message)` → result (default: decline)."""
        turn_id = await self.start_turn(thread_id, text)
        return await self.collect_turn(turn_id, on_request=on_request, timeout=timeout)

    async def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.proc.send_signal(signum)

    async def wait(self, timeout: float = 20) -> int:
        with trio.fail_after(timeout):
            return await self.proc.wait()


# -- turn checks ---------------------------------------------------------------------------------


def notifications(events: list[Any], method: str) -> list[Message]:
    return [e for e in events if isinstance(e, dict) and e.get("method") == method]


def assert_items_balanced(events: list[Any]) -> None:
    """Every `item/started` has exactly one `item/completed` with the same id."""
    started = [e["params"]["item"]["id"] for e in notifications(events, "item/started")]
    completed = [e["params"]["item"]["id"] for e in notifications(events, "item/completed")]
    assert len(started) == len(set(started)), f"an item started twice: {started}"
    assert sorted(started) == sorted(completed), f"started {started} != completed {completed}"


# -- processes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str
    start: int  # clock ticks since boot: tells a reused pid apart


def proc_info(pid: int) -> ProcInfo | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    return ProcInfo(pid, int(rest[1]), rest[0].decode(), int(rest[19]))


def descendants(pid: int) -> dict[int, ProcInfo]:
    """Live descendants of `pid` (by ppid links), keyed by pid."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (info := proc_info(int(name))) is not None:
            table[info.pid] = info
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: dict[int, ProcInfo] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found[child] = table[child]
                stack.append(child)
    return {p: i for p, i in found.items() if i.state not in ("Z", "X")}


def survivors(snapshot: Mapping[int, ProcInfo]) -> list[int]:
    """Pids of `snapshot` that still run (same start time, not a zombie)."""
    alive = []
    for pid, info in snapshot.items():
        now = proc_info(pid)
        if now is not None and now.start == info.start and now.state not in ("Z", "X"):
            alive.append(pid)
    return sorted(alive)


async def wait_gone(snapshot: Mapping[int, ProcInfo], timeout: float) -> list[int]:
    """Wait up to `timeout` s for every process of `snapshot` to end; return the survivors."""
    with trio.move_on_after(timeout):
        while survivors(snapshot):  # noqa: ASYNC110 - polling /proc, there is no event
            await trio.sleep(0.05)
    return survivors(snapshot)


# -- starting the server -------------------------------------------------------------------------


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
        argv: list[str] | None = None,
    ) -> None:
        self._nursery = nursery
        self._home = home
        self._env = env
        self._check_exit = check_exit
        self._argv = argv
        self.server: ServerProcess | None = None

    async def __aenter__(self) -> ServerProcess:
        proc = await trio.lowlevel.open_process(
            self._argv or server_argv(),
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
        else:
            rc = server.proc.returncode
        if exc[0] is not None:  # (pytest shows it with the failure)
            print(f"threadline's stderr (exit code {rc}):\n{server.stderr_text[-6000:]}")
        if self._check_exit and exc[0] is None:
            assert rc == 0, f"exit code {rc}; stderr:\n{server.stderr_text[-3000:]}"
        with trio.move_on_after(5):
            await server.stdout_closed.wait()
        if exc[0] is None:
            assert not server.schema_errors, "\n".join(server.schema_errors[:5])
