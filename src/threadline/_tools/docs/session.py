"""The scripted session the protocol reference's examples come from: the real server with the
`mock` backend, run in-process and driven through the public client (`threadline.client`),
with every line both ways recorded. Two server lifetimes share one state directory, so
`thread/list`, `thread/read` and `thread/resume` are shown after a restart."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import trio

from ...backends.mock.backend import MockBackend
from ...client import ApprovalHandler, Client, RpcError, ServerRequest, in_process
from ...server.app import Server
from ...server.config import ServerConfig
from ...store import ThreadStore
from .normalise import HOME_DIR, PROJECT_DIR

__all__ = ["TURN_1", "Capture", "Described", "SessionError", "Transcript", "capture"]

JSON = Any
#: ("client" | "server", message) in the order written / read; a line that is no JSON is
#: kept as its text.
Transcript = list[tuple[str, JSON]]

_TIMEOUT = 15.0
_SMALL_LIMIT = 1024

TURN_1 = "\n".join(
    [
        "/reason Look at the project first, then write the greeting.",
        "/plan Look around | Write notes.txt | Report back",
        "/run echo hello from the agent",
        "/write notes.txt Hello, world!",
        '/tool fetch {"url": "https://example.com/style-guide"}',
        '/mcp threadline style_guide {"topic": "greetings"}',
        "/ask Formal or casual greeting?",
        "/text Done: notes.txt greets the world.",
    ]
)
_TURN_2 = "/run ls\n/write notes.txt Hello again!\n/text Updated notes.txt."
_TURN_FAIL = "/fail The model provider is overloaded (HTTP 503)"
_TURN_SLEEP = "/sleep 30"

#: Answers of the scripted client to the server's requests (turn 1).
_ANSWERS: dict[str, JSON] = {
    "item/commandExecution/requestApproval": {"decision": "accept"},
    "item/fileChange/requestApproval": {"decision": "acceptForSession"},
    "item/tool/requestApproval": {"decision": "decline"},
    "item/tool/requestUserInput": {"answers": {"q1": {"answers": ["Formal"]}}},
    "item/tool/call": {
        "contentItems": [{"type": "inputText", "text": "Greet people formally."}],
        "success": True,
    },
}
#: A client-defined tool of the example thread (answered through `item/tool/call`).
_STYLE_GUIDE = {
    "name": "style_guide",
    "description": "The team's writing rules for a topic.",
    "inputSchema": {
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
    },
}


class SessionError(RuntimeError):
    """The scripted session did not go as the generator expects."""


class Described(str):
    """An example request shown as a description instead of its text."""

    __slots__ = ()


@dataclass
class Capture:
    transcripts: list[Transcript] = field(default_factory=list)
    #: method → (request, response) of its example call.
    calls: dict[str, tuple[JSON, JSON]] = field(default_factory=dict)
    #: (what went wrong, request, error response)
    errors: list[tuple[str, JSON, JSON]] = field(default_factory=list)
    #: (first, last) transcript index of the example turn, in transcripts[0]
    turn_span: tuple[int, int] = (0, 0)
    #: raw ids for synthesized examples (normalized like the rest)
    context: dict[str, str] = field(default_factory=dict)
    #: temp path → its stand-in
    paths: dict[str, str] = field(default_factory=dict)
    #: server requests nobody expected (each one makes the capture fail)
    unexpected: list[str] = field(default_factory=list)


def capture() -> Capture:
    """Run the scripted session (about a second) and return what it recorded."""
    with tempfile.TemporaryDirectory(prefix="threadline-docs-") as tmp, _quiet_logs():
        return trio.run(_script, Path(tmp))


async def _script(root: Path) -> Capture:
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    result = Capture(paths={str(project): PROJECT_DIR, str(home): HOME_DIR})
    for raw, fixed in list(result.paths.items()):
        result.paths[str(Path(raw).resolve())] = fixed
    with trio.fail_after(4 * _TIMEOUT):
        async with _Lifetime.serve(result, home) as first:
            thread_b = await first.run(project)
        # A restart on the same state directory, with a small request size limit
        # (THREADLINE_MAX_REQUEST_BYTES) for the oversized-line example.
        async with _Lifetime.serve(result, home, max_request=_SMALL_LIMIT) as second:
            await second.run_after_restart(thread_b)
    if result.unexpected:
        raise SessionError(f"unexpected server requests: {result.unexpected}")
    return result


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The scripted errors (an unparsable line, ...) log warnings: keep them off stderr."""
    logger = logging.getLogger("threadline")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class _Recorder:
    """The transcript of one connection, and the server's messages to wait for."""

    def __init__(self) -> None:
        self.transcript: Transcript = []
        self._received_send, self._received = trio.open_memory_channel[JSON](math.inf)

    def trace(self, side: Literal["send", "receive"], line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = line.decode()
        self.transcript.append(("client" if side == "send" else "server", message))
        if side == "receive":
            self._received_send.send_nowait(message)

    async def until(self, wanted: Callable[[JSON], bool]) -> JSON:
        """The next message from the server that is `wanted`."""
        with trio.fail_after(_TIMEOUT):
            while True:
                message = await self._received.receive()
                if isinstance(message, dict) and wanted(message):
                    return message

    def pair(self, method: str) -> tuple[JSON, JSON]:
        """The last `method` request sent, and its response."""
        for at in range(len(self.transcript) - 1, -1, -1):
            side, request = self.transcript[at]
            if side == "client" and isinstance(request, dict) and request.get("method") == method:
                break
        else:
            raise SessionError(f"{method} was never sent")
        for side, message in self.transcript[at + 1 :]:
            if side == "server" and "method" not in message and message.get("id") == request["id"]:
                return request, message
        raise SessionError(f"no response to {request}")


def _answering(answers: dict[str, JSON], unexpected: list[str]) -> ApprovalHandler:
    """An approval handler giving `answers` by method (anything else is unexpected)."""

    async def answer(request: ServerRequest) -> JSON:
        if request.method not in answers:
            unexpected.append(request.method)
            raise SessionError(f"unexpected server request {request.method}")
        return answers[request.method]

    return answer


def _null_id_error(message: JSON) -> bool:
    """An error the server could not tie to a request (an unparsable or oversized line)."""
    return "error" in message and message.get("id") is None


class _Lifetime:
    """One server lifetime of the session: its client, its transcript, and the pieces of
    the script run in it."""

    def __init__(self, result: Capture, client: Client, recorder: _Recorder) -> None:
        self.result = result
        self.client = client
        self.recorder = recorder

    @classmethod
    @asynccontextmanager
    async def serve(
        cls, result: Capture, home: Path, max_request: int | None = None
    ) -> AsyncIterator[_Lifetime]:
        """The real server with only the mock backend, in-process."""
        config = ServerConfig(default_backend="mock", interrupt_grace=0.5)
        server = Server(config, ThreadStore(home), {"mock": MockBackend()})
        if max_request is not None:
            server.max_request = max_request
        recorder = _Recorder()
        result.transcripts.append(recorder.transcript)
        async with in_process(
            server.serve,
            approval_handler=_answering({}, result.unexpected),
            initialize=False,
            shutdown_timeout=_TIMEOUT,
            trace=recorder.trace,
        ) as client:
            yield cls(result, client, recorder)

    def keep(self, method: str) -> None:
        """The last `method` call is its example."""
        self.result.calls.setdefault(method, self.recorder.pair(method))

    async def refused(self, what: str, method: str, params: JSON) -> None:
        """`method` must fail: its error response is the example of `what`."""
        try:
            await self.client.request(method, params)
        except RpcError:
            self.result.errors.append((what, *self.recorder.pair(method)))
            return
        raise SessionError(f"{method} unexpectedly succeeded")

    async def send_line(self, line: str) -> JSON:
        """Send a line the server cannot tie to a request; return its error answer."""
        await self.client.send_line(line.encode())
        return await self.recorder.until(_null_id_error)

    async def start_thread(self, params: JSON) -> str:
        thread_id: str = (await self.client.request("thread/start", params)).thread.id
        await self.recorder.until(
            lambda m: (
                m.get("method") == "thread/started" and m["params"]["thread"]["id"] == thread_id
            )
        )
        return thread_id

    async def turn(self, thread_id: str, text: str, answers: dict[str, JSON] | None = None) -> str:
        """Run one turn to its `turn/completed`; return the turn id."""
        on_request = _answering(answers or {}, self.result.unexpected)
        stream = await self.client.run_turn(thread_id, text, on_request=on_request)
        return stream.turn_id

    async def run(self, project: Path) -> str:
        """The first lifetime: every call, turn and error of a fresh server. Returns the id
        of the thread the second lifetime reads, resumes and archives."""
        await self.client.request(
            "initialize",
            {"clientInfo": {"name": "my-editor", "title": "My Editor", "version": "1.0.0"}},
        )
        self.keep("initialize")
        thread_a = await self.start_thread(
            {
                "modelProvider": "mock",
                "model": "mock-1",
                "cwd": str(project),
                "approvalPolicy": "on-request",
                "config": {"approvalRules": [{"decision": "accept", "command": "ls*"}]},
                "dynamicTools": [_STYLE_GUIDE],
            }
        )
        self.keep("thread/start")
        await self.example_turns(thread_a)
        for method in ("turn/interrupt", "turn/cancel"):
            await self.stop_a_turn(thread_a, method)
        await self.request_errors(thread_a)
        thread_b = await self.start_thread({"modelProvider": "mock", "cwd": str(project)})
        await self.turn(thread_b, "Summarize the README.")
        await self.control_examples(thread_b)
        await self.client.request("model/list", {"modelProvider": "mock"})
        self.keep("model/list")
        await self.client.request("thread/loaded/list", {})
        self.keep("thread/loaded/list")
        await self.client.request("thread/unsubscribe", {"threadId": thread_a})
        self.keep("thread/unsubscribe")
        return thread_b

    async def example_turns(self, thread_id: str) -> None:
        """The example turn (every approval kind, answered), one with approvals decided by
        the thread's rules, and a failing one."""
        first = len(self.recorder.transcript)
        turn_1 = await self.turn(thread_id, TURN_1, _ANSWERS)
        self.keep("turn/start")
        self.result.turn_span = (first, len(self.recorder.transcript))
        self.result.context = {"threadId": thread_id, "turnId": turn_1}
        await self.turn(thread_id, _TURN_2)
        await self.turn(thread_id, _TURN_FAIL)

    async def stop_a_turn(self, thread_id: str, method: str) -> None:
        """A long turn stopped by `method`; while it runs, a second `turn/start` is refused."""
        stream = await self.client.start_turn(thread_id, _TURN_SLEEP)
        await self.recorder.until(
            lambda m: (
                m.get("method") == "item/completed"
                and m["params"]["turnId"] == stream.turn_id
                and m["params"]["item"]["type"] == "userMessage"
            )
        )
        if method == "turn/interrupt":
            busy = {"threadId": thread_id, "input": [{"type": "text", "text": "hi"}]}
            await self.refused("`turn/start` while a turn is running", "turn/start", busy)
        await self.client.request(method, {"threadId": thread_id, "turnId": stream.turn_id})
        self.keep(method)
        await stream.wait()

    async def call(self, method: str, params: JSON) -> None:
        await self.client.request(method, params)
        self.keep(method)

    async def control_examples(self, thread_id: str) -> None:
        """Thread management and the conversation controls, on the thread of the second
        lifetime: name, overrides, steer, inject, compact, the history lists, a fork."""
        await self.call("thread/name/set", {"threadId": thread_id, "name": "README summary"})
        git = {"branch": "main", "sha": "4f2a9c1"}
        await self.call("thread/metadata/update", {"threadId": thread_id, "gitInfo": git})
        stream = await self.client.start_turn(
            thread_id, "/sleep 0.3\nShorter, please.", model="mock-1", effort="low"
        )
        steer = [{"type": "text", "text": "And mention the licence."}]
        await self.recorder.until(
            lambda m: (
                m.get("method") == "item/completed" and m["params"]["turnId"] == stream.turn_id
            )
        )
        await self.call(
            "turn/steer",
            {"threadId": thread_id, "input": steer, "expectedTurnId": stream.turn_id},
        )
        await stream.wait()
        earlier = [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello! What shall we read?"}],
            },
        ]
        await self.call("thread/inject_items", {"threadId": thread_id, "items": earlier})
        await self.call("thread/compact/start", {"threadId": thread_id})
        await self.recorder.until(lambda m: m.get("method") == "thread/compacted")
        await self.recorder.until(lambda m: m.get("method") == "turn/completed")
        await self.call("thread/turns/list", {"threadId": thread_id, "limit": 2})
        await self.call("thread/items/list", {"threadId": thread_id, "limit": 3})
        await self.call("thread/fork", {"threadId": thread_id, "excludeTurns": True})
        await self.mail_examples(thread_id)

    async def mail_examples(self, thread_id: str) -> None:
        """The client mails the thread; its followers hear of it; the thread's mail read."""
        to = f"{thread_id}@threadline.local"
        body = "The licence section moved to LICENSE.md."
        await self.call("mailbox/send", {"to": to, "subject": "README", "body": body})
        arrived = await self.recorder.until(lambda m: m.get("method") == "mailbox/messageReceived")
        key = arrived["params"]["message"]["id"]
        await self.call("mailbox/list", {"threadId": thread_id, "unreadOnly": True})
        await self.call("mailbox/read", {"threadId": thread_id, "id": key})
        await self.call("mailbox/markRead", {"threadId": thread_id, "id": key})

    async def request_errors(self, thread_id: str) -> None:
        await self.refused("unknown method", "thread/goal/get", {"threadId": thread_id})
        await self.refused(
            "invalid params (`input` missing)", "turn/start", {"threadId": thread_id}
        )
        unknown = {"threadId": "0199b5a4-0000-7000-8000-00000000dead"}
        await self.refused("unknown thread", "thread/read", unknown)
        line = '{"jsonrpc": "2.0", "id": 99, "method": "thread/list", "params": '
        parse_error = await self.send_line(line)
        self.result.errors.append(("unparsable line (answered with id `null`)", line, parse_error))

    async def run_after_restart(self, thread_id: str) -> None:
        """The second lifetime: the stored thread listed, read, resumed and archived, and the
        errors of a request before `initialize` and of an oversized line."""
        await self.refused("a request before `initialize`", "thread/list", {})
        await self.client.request(
            "initialize", {"clientInfo": {"name": "my-editor", "version": "1.0.0"}}
        )
        for method, params in (
            ("thread/list", {"limit": 10}),
            ("thread/read", {"threadId": thread_id, "includeTurns": True}),
            ("thread/resume", {"threadId": thread_id}),
            ("thread/archive", {"threadId": thread_id}),
            ("thread/unarchive", {"threadId": thread_id}),
            ("thread/delete", {"threadId": thread_id}),
        ):
            await self.client.request(method, params)
            self.keep(method)
        await self.recorder.until(
            lambda m: m.get("method") == "thread/archived" and m["params"]["threadId"] == thread_id
        )
        text = "x" * _SMALL_LIMIT
        input_ = [{"type": "text", "text": text}]
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "turn/start",
                "params": {"threadId": thread_id, "input": input_},
            }
        )
        too_long = await self.send_line(line)
        what = (
            f"a request line over the size limit (this server ran with "
            f"`THREADLINE_MAX_REQUEST_BYTES={_SMALL_LIMIT}`; the default is 16 MiB)"
        )
        request = Described(f"a {len(line)}-byte `turn/start` request line")
        self.result.errors.append((what, request, too_long))
