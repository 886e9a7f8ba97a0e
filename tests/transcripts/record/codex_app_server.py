"""`codex app-server` sessions for the conformance test: a scripted JSON-RPC client drives the
handshake (and what Codex refuses), turns with streaming, reasoning, command and file-change
approvals, steering, interrupts and an upstream failure, and thread management. Every line
either way is recorded as ``{"dir": "c2s" | "s2c", "msg": ...}`` (``"raw"`` for a line that is
not JSON), with ``{"dir": "note", "note": ...}`` lines naming each step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fakes.openai_responses import (
    ApplyPatch,
    ExecCommand,
    HttpError,
    Reasoning,
    Rule,
    Step,
    Text,
)

from .core import RpcClient, Run, Scenario

CLIENT = {"name": "recorder", "title": "Recorder", "version": "0.0.1"}
TOKENS = {"input_tokens": 100, "output_tokens": 20}
#: How long the client waits for Codex to fall quiet before each request (`RpcClient`).
SETTLE = 0.15
#: The approval answer for a server request (None: leave it unanswered).
Answer = Callable[[dict[str, Any]], Any]


def accept(_request: dict[str, Any]) -> Any:
    return {"decision": "accept"}


def decision(value: str) -> Answer:
    return lambda _request: {"decision": value}


class AppServer(RpcClient):
    """A scripted client of one `codex app-server` (approvals accepted unless told otherwise)."""

    def __init__(self, run: Run) -> None:
        proc = run.spawn("app-server", "--disable", "unbounded_connection_retries")
        super().__init__(proc, dirs=("c2s", "s2c"), jsonrpc=False, settle=SETTLE)
        self.cwd = str(run.work)
        self.answer = accept

    # -- threads and turns

    def initialize(self) -> None:
        self.request("initialize", {"clientInfo": CLIENT})
        self.notify("initialized")

    def start_thread(self, **params: Any) -> str:
        answer = self.request("thread/start", {"cwd": self.cwd, **params})
        return str(answer["result"]["thread"]["id"])

    def start_turn(self, thread: str, text: str) -> str:
        answer = self.request("turn/start", {"threadId": thread, "input": user_input(text)})
        return str(answer["result"]["turn"]["id"])

    def completed(self, turn: str) -> dict[str, Any]:
        return self.until(
            "turn/completed",
            lambda m: m.get("method") == "turn/completed" and m["params"]["turn"]["id"] == turn,
        )

    def turn(self, thread: str, text: str, answer: Answer = accept) -> dict[str, Any]:
        self.answer = answer
        return self.completed(self.start_turn(thread, text))

    def first_delta(self, turn: str) -> None:
        self.until(
            "a text delta",
            lambda m: (
                m.get("method") == "item/agentMessage/delta" and m["params"]["turnId"] == turn
            ),
        )

    def interrupt(self, thread: str, turn: str) -> dict[str, Any]:
        return self.request("turn/interrupt", {"threadId": thread, "turnId": turn})

    def approval_request(self) -> dict[str, Any]:
        return self.until("an approval request", lambda m: "id" in m and "method" in m)


def user_input(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}]


# -- the fake model ------------------------------------------------------------------------------


def step(*items: Any, **options: Any) -> Step:
    return Step(items, **{**TOKENS, **options})


SLOW = step(Text("A slow answer that takes its time. " * 4), stall_after_first_delta_ms=30000)
RULES = [
    Rule("say hi", [SLOW]),
    Rule("slowly", [SLOW]),
    Rule("hello", [step(Text("Hello! This answer streams in small deltas."), chunk_size=8)]),
    Rule("think", [step(Reasoning("Thinking it through."), Text("Thought about it."))]),
    Rule("run it", [step(ExecCommand("touch made.txt", login=False)), step(Text("Ran it."))]),
    Rule("edit", [step(ApplyPatch("patched.txt", "patched\n")), step(Text("Patched."))]),
    Rule("break", [HttpError(500, "fake internal error")]),
]


# -- sessions ------------------------------------------------------------------------------------


def handshake(run: Run) -> None:
    server = AppServer(run)
    server.note("a request before initialize; initialize twice; what Codex refuses")
    server.request("model/list", {})
    server.request("initialize", {"clientInfo": CLIENT, "capabilities": {"experimentalApi": False}})
    server.notify("initialized")
    server.request("initialize", {"clientInfo": {"name": "recorder", "version": "0.0.1"}})
    server.request("account/read", {"refreshToken": False})
    for method in ("model/list", "thread/list", "thread/loaded/list"):
        server.request(method, {})
    server.request("configRequirements/read")
    server.request("unknown/method", {})
    server.request("thread/start", {"cwd": 123})
    server.request("thread/queue/list", {"threadId": "x"})
    server.note("a thread; a turn interrupted (a wrong turn id first, then twice)")
    thread = server.start_thread(approvalPolicy="on-request", sandbox="read-only")
    server.request("thread/read", {"threadId": thread, "includeTurns": True})
    turn = server.start_turn(thread, "say hi")
    server.first_delta(turn)
    server.interrupt(thread, "nope")
    server.interrupt(thread, turn)
    server.completed(turn)
    server.interrupt(thread, turn)
    server.note("unsubscribe and resume; an unknown thread; a line that is not JSON")
    server.request("thread/unsubscribe", {"threadId": thread})
    server.request("thread/resume", {"threadId": thread, "excludeTurns": True})
    server.request("thread/resume", {"threadId": "00000000-0000-0000-0000-000000000000"})
    server.proc.send_line("this is not json")  # (Codex logs it and answers nothing)
    server.request("thread/loaded/list", {})
    server.finish()
    run.write(server.lines())


def turns(run: Run) -> None:
    server = AppServer(run)
    server.initialize()
    thread = server.start_thread(approvalPolicy="untrusted", sandbox="danger-full-access")
    server.note("a plain answer streamed in deltas")
    server.turn(thread, "hello")
    server.note("a reasoning summary, then the answer")
    server.turn(thread, "think about it")
    server.note("a command approved, then the same declined")
    server.turn(thread, "run it", accept)
    server.turn(thread, "run it", decision("decline"))
    server.note("a file change approved")
    server.turn(thread, "edit the file", accept)
    server.note("a slow answer steered, then interrupted")
    turn = server.start_turn(thread, "answer slowly")
    server.first_delta(turn)
    steer = {"threadId": thread, "expectedTurnId": turn, "input": user_input("hurry up")}
    server.request("turn/steer", steer)
    server.interrupt(thread, turn)
    server.completed(turn)
    server.note("the model API fails: the turn fails")
    server.turn(thread, "break it")
    server.note("thread management")
    server.request("thread/name/set", {"threadId": thread, "name": "recorded thread"})
    server.request("thread/turns/list", {"threadId": thread, "limit": 2})
    server.request("thread/items/list", {"threadId": thread, "limit": 3})
    server.request("thread/fork", {"threadId": thread})
    server.request("thread/archive", {"threadId": thread})
    server.request("thread/list", {"limit": 5})
    server.request("thread/list", {"archived": True, "limit": 5})
    server.request("thread/unarchive", {"threadId": thread})
    server.finish()
    run.write(server.lines())


def interrupts(run: Run) -> None:
    server = AppServer(run)
    server.initialize()
    thread = server.start_thread(approvalPolicy="untrusted", sandbox="danger-full-access")
    server.note("a slow answer interrupted")
    turn = server.start_turn(thread, "answer slowly")
    server.first_delta(turn)
    server.interrupt(thread, turn)
    server.completed(turn)
    server.note("an interrupt while an approval request is pending; then a late answer to it")
    server.answer = lambda _request: None
    turn = server.start_turn(thread, "run it")
    server.approval_request()
    server.interrupt(thread, turn)
    server.completed(turn)
    server.proc.quiet(SETTLE)
    server.respond(server.pending.pop(), {"decision": "accept"})
    server.note("approvals answered cancel, then acceptForSession; the same command again")
    server.turn(thread, "run it", decision("cancel"))
    server.turn(thread, "run it", decision("acceptForSession"))
    server.turn(thread, "run it")
    server.note("a turn on an unknown thread; steering with no active turn; an ephemeral thread")
    server.request("turn/start", {"threadId": "nope", "input": user_input("x")})
    steer = {"threadId": thread, "expectedTurnId": "nope", "input": user_input("x")}
    server.request("turn/steer", steer)
    server.start_thread(ephemeral=True)
    server.finish()
    run.write(server.lines())
    busy_thread(run)


def busy_thread(run: Run) -> None:
    server = AppServer(run)
    server.note("a new process: turn/start while the thread's turn is still streaming")
    server.initialize()
    thread = server.start_thread(approvalPolicy="untrusted", sandbox="danger-full-access")
    turn = server.start_turn(thread, "answer slowly")
    server.first_delta(turn)
    server.request("turn/start", {"threadId": thread, "input": user_input("hello again")})
    server.interrupt(thread, turn)
    server.completed(turn)
    server.finish()
    run.write(server.lines())


APP_SERVER_SCENARIOS = [
    Scenario(
        "app-server-handshake",
        RULES,
        handshake,
        "app-server: handshake, refused requests, a turn interrupted, resume",
    ),
    Scenario(
        "app-server-turns",
        RULES,
        turns,
        "app-server: streaming, reasoning, command and file-change approvals, steer, failure",
    ),
    Scenario(
        "app-server-interrupts",
        RULES,
        interrupts,
        "app-server: interrupts (also with an approval pending), cancel, acceptForSession",
    ),
]
