"""Engine tests: the real server (dispatch, thread service, turn runner, approval router, store)
in-process, driven by a scripted backend. Every test asserts on what a client sees — the
sequence of notifications, responses and server requests — and every outbound message is
validated against `schemas/` by the harness."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import msgspec
import pytest
import trio

from tests.support.inproc import NO_ANSWER, InProcClient, RawReply, inproc_server, methods_of
from tests.support.test_backend import ScriptedBackend, ScriptedSession, stream_message
from threadline.backends import base as b
from threadline.protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    DynamicToolCallItem,
    FileChangeItem,
    FileUpdateChange,
    McpToolCallItem,
    PatchKindAdd,
    PlanItem,
    ReasoningItem,
    ToolRequestUserInputQuestion,
    TurnError,
    UnknownAction,
)
from threadline.server.config import ServerConfig

Event: TypeAlias = dict[str, Any]
Ctx: TypeAlias = b.TurnContext
Input: TypeAlias = b.TurnInput
Session: TypeAlias = ScriptedSession

GRACE = 0.3
INVALID_REQUEST = -32600


# -- checking a turn's notification sequence ---------------------------------------------------


@dataclass
class TurnView:
    """A checked turn, as a client saw it."""

    status: str
    turn: dict[str, Any]
    methods: list[str]
    events: list[Event]
    #: Completed items by id, in completion order.
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: agentMessage / plan deltas concatenated per item.
    deltas: dict[str, str] = field(default_factory=dict)

    def items_of(self, kind: str) -> list[dict[str, Any]]:
        return [i for i in self.items.values() if i["type"] == kind]

    def only(self, kind: str) -> dict[str, Any]:
        found = self.items_of(kind)
        assert len(found) == 1, f"expected one {kind} item, got {found}"
        return found[0]


def _turn_id_of(event: Event) -> str | None:
    params = event.get("params") or {}
    if "turnId" in params:
        return params["turnId"]  # type: ignore[no-any-return]
    turn = params.get("turn")
    return turn["id"] if isinstance(turn, dict) else None


def check_turn(events: list[Event], thread_id: str, turn_id: str) -> TurnView:
    """Assert every turn-runner invariant on one turn's events (notifications and server
    requests, in order, ending with its `turn/completed`) and return what the client saw."""
    stray = [e for e in events if "method" not in e]
    assert not stray, f"unexpected responses/errors to nothing we sent: {stray}"
    methods = methods_of(events)
    ctx = f"turn {turn_id}: {methods}"
    for event in events:
        params = event["params"]
        if "threadId" in params:
            assert params["threadId"] == thread_id, f"misrouted {event}"
        tid = _turn_id_of(event)
        if tid is not None:
            assert tid == turn_id, f"misrouted {event}"

    # Start: active, turn/started (inProgress), then the userMessage item, started + completed.
    assert methods[:2] == ["thread/status/changed", "turn/started"], ctx
    assert events[0]["params"]["status"] == {"type": "active", "activeFlags": []}, ctx
    assert events[1]["params"]["turn"]["status"] == "inProgress"
    first_item_events = [e for e in events if e["method"] in ("item/started", "item/completed")]
    assert len(first_item_events) >= 2, ctx
    user_started, user_completed = first_item_events[:2]
    assert user_started["method"] == "item/started", ctx
    assert user_started["params"]["item"]["type"] == "userMessage", ctx
    assert user_completed["method"] == "item/completed", ctx
    assert user_completed["params"]["item"]["id"] == user_started["params"]["item"]["id"]

    # Exactly one terminal turn/completed, last, right after thread/status/changed idle.
    assert methods.count("turn/completed") == 1, ctx
    assert methods[-1] == "turn/completed", ctx
    assert methods[-2] == "thread/status/changed", ctx
    assert events[-2]["params"]["status"] == {"type": "idle"}, ctx
    turn = events[-1]["params"]["turn"]
    status = turn["status"]
    assert status in ("completed", "interrupted", "failed"), ctx
    errors = [e for e in events if e["method"] == "error" and not e["params"]["willRetry"]]
    if status == "failed":
        assert turn.get("error"), f"failed turn without error: {turn}"
        assert len(errors) == 1, ctx
        assert errors[0]["params"]["error"] == turn["error"]
        assert methods.index("error") < len(methods) - 1
    else:
        assert turn.get("error") is None, turn
        assert not errors, ctx

    # Item pairing: every item/started gets exactly one item/completed with the same id.
    view = TurnView(status=status, turn=turn, methods=methods, events=events)
    open_items: dict[str, dict[str, Any]] = {}
    started_ever: set[str] = set()
    streamed: dict[str, list[str]] = defaultdict(list)
    for event in events:
        method, params = event["method"], event["params"]
        if method == "item/started":
            iid = params["item"]["id"]
            assert iid not in started_ever, f"item {iid} started twice: {ctx}"
            started_ever.add(iid)
            open_items[iid] = params["item"]
            if params["item"]["type"] in ("agentMessage", "plan"):
                # A client that builds the text from item/started + deltas must get it once.
                assert params["item"]["text"] == "", f"started with text: {params['item']}"
        elif method == "item/completed":
            iid = params["item"]["id"]
            assert iid in open_items, f"item {iid} completed but not open: {ctx}"
            del open_items[iid]
            view.items[iid] = params["item"]
        elif method in ("item/agentMessage/delta", "item/plan/delta"):
            assert params["itemId"] in open_items, f"delta outside its item: {event}"
            streamed[params["itemId"]].append(params["delta"])
    assert not open_items, f"items never completed: {list(open_items)}: {ctx}"

    # Deltas concatenate to the completed text.
    for iid, item in view.items.items():
        if item["type"] in ("agentMessage", "plan"):
            joined = "".join(streamed.get(iid, []))
            assert joined == item["text"], f"deltas {streamed.get(iid)} != {item['text']!r}"
            view.deltas[iid] = joined
    return view


def status_changes(events: list[Event]) -> list[Any]:
    out: list[Any] = []
    for e in events:
        if e["method"] != "thread/status/changed":
            continue
        s = e["params"]["status"]
        out.append(s["type"] if s["type"] != "active" else ("active", tuple(s["activeFlags"])))
    return out


async def run_checked(
    client: InProcClient, thread_id: str, text: str = "hello", **kwargs: Any
) -> TurnView:
    done, events = await client.run_turn(thread_id, text, **kwargs)
    return check_turn(events, thread_id, done["params"]["turn"]["id"])


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Durability is the store's business (tests/unit/test_store.py); here fsync only costs
    time (about half of this file's run time on a busy disk)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend()


def config(**kwargs: Any) -> ServerConfig:
    kwargs.setdefault("default_backend", "test")
    kwargs.setdefault("interrupt_grace", GRACE)
    return ServerConfig(**kwargs)


# -- script building blocks -----------------------------------------------------------------


def command_item(ctx: Ctx, command: str = "ls -la") -> CommandExecutionItem:
    return CommandExecutionItem(
        id=ctx.new_item_id(),
        command=command,
        cwd="/tmp",
        status="inProgress",
        command_actions=[UnknownAction(command=command)],
    )


async def run_command(
    ctx: Ctx, command: str = "ls -la", *, complete: bool = True
) -> b.ApprovalDecision:
    """A commandExecution behind an approval, as a CLI would report it."""
    item = command_item(ctx, command)
    await ctx.emit(b.ItemStarted(item))
    decision = await ctx.request_approval(
        b.ApprovalRequest(kind="command", item_id=item.id, command=command, cwd="/tmp")
    )
    if complete:
        ok = decision in ("accept", "acceptForSession")
        done = msgspec.structs.replace(
            item,
            status="completed" if ok else "declined",
            aggregated_output="done\n" if ok else None,
            exit_code=0 if ok else None,
        )
        await ctx.emit(b.ItemCompleted(done))
    return decision


async def wait_interrupt(session: Session) -> b.TurnOutcome:
    await session.interrupted.wait()
    return b.TurnOutcome("interrupted")


def accept_all(_: Event) -> Any:
    return {"decision": "accept"}


# == basic turn ================================================================================


async def test_plain_turn_sequence(tmp_path: Path, backend: ScriptedBackend) -> None:
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        response = await c.request(
            "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "hi there"}]}
        )
        turn = response["result"]["turn"]
        assert turn["status"] == "inProgress"
        assert turn["items"] == []
        done, events = await c.collect_turn(turn["id"])
        view = check_turn(events, tid, turn["id"])

        # The response went out before turn/started (and before anything else of the turn).
        order = [
            m.get("method") or ("response" if m.get("id") == response["id"] else "other")
            for m in c.all_messages
        ]
        assert order.index("response") < order.index("turn/started")
        assert order.index("response") < order.index("thread/status/changed")

        assert view.methods == [
            "thread/status/changed",
            "turn/started",
            "item/started",
            "item/completed",
            "item/started",
            "item/agentMessage/delta",
            "item/agentMessage/delta",
            "item/completed",
            "thread/status/changed",
            "turn/completed",
        ]
        assert view.status == "completed"
        assert done["params"]["turn"]["id"] == turn["id"]
        assert view.only("userMessage")["content"] == [{"type": "text", "text": "hi there"}]
        assert view.only("agentMessage")["text"] == "echo: hi there"
        # What the backend saw.
        assert backend.turn_inputs[0].text == "hi there"
        assert backend.turn_inputs[0].turn_id == turn["id"]
        assert backend.turn_inputs[0].bootstrap is None
        assert backend.sessions_opened == 1


async def test_turn_start_answers_while_the_session_is_still_opening(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.open_gate = trio.Event()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        with trio.fail_after(2):
            result = await c.start_turn(tid, "hi")
        assert result["turn"]["status"] == "inProgress"
        # turn/started and the userMessage do not wait for the CLI either.
        seen: list[Event] = []
        seen.append(await c.wait_for(lambda e: e["method"] == "item/completed", seen=seen))
        assert methods_of(seen) == [
            "thread/status/changed",
            "turn/started",
            "item/started",
            "item/completed",
        ]
        assert backend.turn_inputs == []
        backend.open_gate.set()
        _done, events = await c.collect_turn(result["turn"]["id"])
        assert check_turn(seen + events, tid, result["turn"]["id"]).status == "completed"


async def test_many_items_and_event_kinds_pass_through(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        rid = ctx.new_item_id()
        await ctx.emit(b.ItemStarted(ReasoningItem(id=rid)))
        await ctx.emit(b.ReasoningSummaryPartAdded(rid, 0))
        await ctx.emit(b.ReasoningSummaryDelta(rid, "think", 0))
        await ctx.emit(b.ReasoningSummaryDelta(rid, "ing", 0))
        await ctx.emit(b.ItemCompleted(ReasoningItem(id=rid)))
        await ctx.emit(b.PlanUpdated([], explanation="none"))
        await ctx.emit(b.DiffUpdated("--- a\n+++ b\n"))
        await ctx.emit(b.Warning("careful"))
        await stream_message(ctx, ["a", "b"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "completed"
        assert view.only("reasoning")["summary"] == ["thinking"]
        for method in ("turn/plan/updated", "turn/diff/updated", "warning"):
            assert method in view.methods
        assert view.only("agentMessage")["text"] == "ab"


# == deltas ===================================================================================


@dataclass
class DeltaCase:
    chunks: list[str] | None  # None: no item/started at all, only ItemCompleted
    final: str
    expected_text: str
    expected_deltas: list[str]


DELTA_CASES = {
    "final-text-only": DeltaCase([], "Hello world", "Hello world", ["Hello world"]),
    "completed-without-started": DeltaCase(None, "Hello world", "Hello world", ["Hello world"]),
    "final-longer-than-deltas": DeltaCase(
        ["Hel", "lo"], "Hello world", "Hello world", ["Hel", "lo", " world"]
    ),
    "divergent-final-text": DeltaCase(["Hel", "lo"], "Goodbye", "Hello", ["Hel", "lo"]),
    "empty-final-text": DeltaCase(["Hel", "lo"], "", "Hello", ["Hel", "lo"]),
    "matching": DeltaCase(["Hel", "lo"], "Hello", "Hello", ["Hel", "lo"]),
}


@pytest.mark.parametrize("kind", ["agentMessage", "plan"])
@pytest.mark.parametrize("case", DELTA_CASES.values(), ids=DELTA_CASES.keys())
async def test_deltas_concatenate_to_the_completed_text(
    tmp_path: Path, backend: ScriptedBackend, case: DeltaCase, kind: str
) -> None:
    make: Callable[..., Any] = AgentMessageItem if kind == "agentMessage" else PlanItem
    delta_event: Callable[..., Any] = b.AgentMessageDelta if kind == "agentMessage" else b.PlanDelta

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        iid = ctx.new_item_id()
        if case.chunks is not None:
            await ctx.emit(b.ItemStarted(make(id=iid, text="")))
            for chunk in case.chunks:
                await ctx.emit(delta_event(iid, chunk))
        await ctx.emit(b.ItemCompleted(make(id=iid, text=case.final)))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        item = view.only(kind)
        assert item["text"] == case.expected_text
        method = f"item/{kind}/delta"
        assert [e["params"]["delta"] for e in view.events if e["method"] == method] == (
            case.expected_deltas
        )


async def test_deltas_for_a_completed_item_are_dropped(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        iid = await stream_message(ctx, ["a", "b"])
        await ctx.emit(b.AgentMessageDelta(iid, "late"))
        await ctx.emit(b.ItemCompleted(AgentMessageItem(id=iid, text="ab again")))
        await ctx.emit(b.ItemStarted(AgentMessageItem(id=iid, text="")))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.only("agentMessage")["text"] == "ab"


# == failures ===================================================================================


async def _left_open(ctx: Ctx) -> dict[str, str]:
    """Start one item of each kind the engine must close, stream some text, return ids."""
    ids = {}
    msg = ctx.new_item_id()
    ids["agentMessage"] = msg
    await ctx.emit(b.ItemStarted(AgentMessageItem(id=msg, text="")))
    await ctx.emit(b.AgentMessageDelta(msg, "partial "))
    await ctx.emit(b.AgentMessageDelta(msg, "text"))
    mcp = McpToolCallItem(
        id=ctx.new_item_id(), server="srv", tool="lookup", arguments={}, status="inProgress"
    )
    ids["mcpToolCall"] = mcp.id
    await ctx.emit(b.ItemStarted(mcp))
    dyn = DynamicToolCallItem(id=ctx.new_item_id(), tool="fetch", arguments={}, status="inProgress")
    ids["dynamicToolCall"] = dyn.id
    await ctx.emit(b.ItemStarted(dyn))
    cmd = command_item(ctx, "make")
    ids["commandExecution"] = cmd.id
    await ctx.emit(b.ItemStarted(cmd))
    await ctx.emit(b.CommandOutputDelta(cmd.id, "building\n"))
    reasoning = ctx.new_item_id()
    ids["reasoning"] = reasoning
    await ctx.emit(b.ItemStarted(ReasoningItem(id=reasoning)))
    await ctx.emit(b.ReasoningSummaryDelta(reasoning, "hmm", 0))
    return ids


def _assert_closed_as_failed(view: TurnView, status: str) -> None:
    assert view.only("agentMessage")["text"] == "partial text"
    mcp = view.only("mcpToolCall")
    assert mcp["status"] == "failed"
    assert mcp["error"]["message"] == f"turn {status} before the tool finished"
    dyn = view.only("dynamicToolCall")
    assert dyn["status"] == "failed"
    assert dyn["success"] is False
    cmd = view.only("commandExecution")
    assert cmd["status"] == "failed"  # it had started running (no approval pending)
    assert cmd["aggregatedOutput"] == "building\n"
    assert view.only("reasoning")["summary"] == ["hmm"]


FAILURES: dict[str, tuple[Callable[[], BaseException], str, str]] = {
    "backend-error": (
        lambda: b.BackendError("the CLI died", codex_error_info="unauthorized"),
        "the CLI died",
        "unauthorized",
    ),
    "unexpected-exception": (
        lambda: RuntimeError("boom"),
        "internal error in the test backend: boom",
        "other",
    ),
}


@pytest.mark.parametrize("name", FAILURES)
@pytest.mark.parametrize("in_nursery", [False, True], ids=["direct", "exception-group"])
async def test_failure_closes_open_items_and_the_thread_stays_usable(
    tmp_path: Path, backend: ScriptedBackend, name: str, in_nursery: bool
) -> None:
    make_exc, message, info = FAILURES[name]

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        await _left_open(ctx)
        if not in_nursery:
            raise make_exc()

        async def reader() -> None:
            await trio.sleep(0.01)
            raise make_exc()

        async with trio.open_nursery() as nursery:  # as a real backend's reader task
            nursery.start_soon(reader)
            await trio.sleep_forever()

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "failed"
        assert view.turn["error"]["message"] == message
        assert view.turn["error"]["codexErrorInfo"] == info
        _assert_closed_as_failed(view, "failed")
        # Same thread, next turn: works (and reuses the session: a failure is not a crash).
        backend.script = ScriptedBackend().script
        view2 = await run_checked(c, tid, "again")
        assert view2.status == "completed"
        assert view2.only("agentMessage")["text"] == "echo: again"


async def test_failure_while_an_approval_is_pending_declines_the_command(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    asked = trio.Event()

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        async def fail_when_asked() -> None:
            await asked.wait()
            raise b.BackendError("stream broke")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail_when_asked)
            await run_command(ctx)

    def on_request(event: Event) -> Any:
        asked.set()
        return NO_ANSWER

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid, on_request=on_request)
        assert view.status == "failed"
        assert view.turn["error"]["message"] == "stream broke"
        assert view.only("commandExecution")["status"] == "declined"
        request = next(e for e in view.events if "id" in e)
        resolved = [e for e in view.events if e["method"] == "serverRequest/resolved"]
        assert [e["params"]["requestId"] for e in resolved] == [request["id"]]


@pytest.mark.parametrize(
    ("outcome", "message"),
    [
        (b.TurnOutcome("failed", TurnError(message="quota", codex_error_info="other")), "quota"),
        (b.TurnOutcome("failed"), "the turn failed"),
    ],
)
async def test_backend_reports_failed_outcome(
    tmp_path: Path, backend: ScriptedBackend, outcome: b.TurnOutcome, message: str
) -> None:
    async def script(ctx: Ctx, turn: Input, session: Session) -> b.TurnOutcome:
        await stream_message(ctx, ["x"])
        return outcome

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "failed"
        assert view.turn["error"]["message"] == message


async def test_backend_reports_interrupted_outcome_without_error(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    async def script(ctx: Ctx, turn: Input, session: Session) -> b.TurnOutcome:
        return b.TurnOutcome("interrupted", TurnError(message="ignored"))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "interrupted"
        assert view.turn.get("error") is None


async def test_retryable_error_is_reported_and_the_turn_continues(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        await ctx.emit(b.RetryableError(TurnError(message="overloaded; retrying")))
        await stream_message(ctx, ["fine"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "completed"
        errors = [e for e in view.events if e["method"] == "error"]
        assert len(errors) == 1
        assert errors[0]["params"]["willRetry"] is True
        assert errors[0]["params"]["error"]["message"] == "overloaded; retrying"
        assert errors[0]["params"]["turnId"] == view.turn["id"]
        assert view.methods.index("error") < view.methods.index("item/completed", 4)


async def test_session_open_failure_fails_the_turn_then_recovers(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    err = b.BackendError("claude: not logged in", codex_error_info="unauthorized")
    # pre-warm at thread/start, then the first turn's own attempt; then success.
    backend.open_error = [err, err, None]
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "failed"
        assert view.turn["error"] == {
            "message": "claude: not logged in",
            "codexErrorInfo": "unauthorized",
        }
        assert backend.turn_inputs == []
        assert [i["type"] for i in view.items.values()] == ["userMessage"]
        view2 = await run_checked(c, tid)
        assert view2.status == "completed"
        assert backend.open_attempts == 3
        assert backend.sessions_opened == 1


async def test_unhealthy_session_is_reopened_resumed(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.unhealthy_after_turn = True
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.sessions_closed == 1  # closed right after the turn
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.sessions_opened == 2
        first, second = backend.settings_seen
        assert (first.resumed, first.backend_session_id) == (False, None)
        assert (second.resumed, second.backend_session_id) == (True, "cli-session-1")
        assert second.thread_id == tid


# == interrupts =================================================================================


def _streaming_script(reached: trio.Event, *, all_kinds: bool = False) -> Any:
    """Stream part of a message (or, with `all_kinds`, leave one item of every kind open),
    set `reached`, then hang until stopped."""

    async def script(ctx: Ctx, turn: Input, session: Session) -> Any:
        if all_kinds:
            await _left_open(ctx)
        else:
            iid = ctx.new_item_id()
            await ctx.emit(b.ItemStarted(AgentMessageItem(id=iid, text="")))
            await ctx.emit(b.AgentMessageDelta(iid, "so far"))
        reached.set()
        await trio.sleep_forever()

    return script


@pytest.mark.parametrize("method", ["turn/interrupt", "turn/cancel"])
async def test_native_interrupt_while_streaming(tmp_path: Path, method: str) -> None:
    backend = ScriptedBackend()
    reached = trio.Event()
    backend.script = _streaming_script(reached, all_kinds=True)
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
        t0 = time.monotonic()
        assert await c.call(method, {"threadId": tid, "turnId": turn_id}) == {}
        _done, events = await c.collect_turn(turn_id)
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        assert time.monotonic() - t0 < GRACE  # native: no waiting for the grace period
        _assert_closed_as_failed(view, "interrupted")
        assert backend.interrupt_calls == 1
        assert backend.cancelled_turns == []  # stopped natively, not cancelled
        # Next turn on the same thread and the same (healthy) session.
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.sessions_opened == 1
        assert backend.sessions_closed == 0


@pytest.mark.parametrize("approved", [True, False])
async def test_native_interrupt_stops_the_running_command_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, approved: bool
) -> None:
    """A session that offers `stop_commands(since)` is asked, right after its native
    interrupt, to kill what its running command started (since about when the command's item
    started, never before the turn): not when the command is still waiting for approval, since
    nothing of it runs yet."""
    calls: list[tuple[float, int]] = []

    def stop_commands(self: Session, since: float) -> None:
        calls.append((since, self.interrupt_calls))

    monkeypatch.setattr(ScriptedSession, "stop_commands", stop_commands, raising=False)
    backend = ScriptedBackend()
    marks: dict[str, float] = {}

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        marks["before"] = time.monotonic()
        await run_command(ctx, "sleep 300", complete=False)
        marks["after"] = time.monotonic()
        await trio.sleep_forever()

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        t0 = time.monotonic()
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        seen: list[Event] = []
        request = await c.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        seen.append(request)
        if approved:
            await c.answer(request["id"], {"decision": "accept"})
            with trio.fail_after(5):
                while "after" not in marks:  # noqa: ASYNC110 - the script's own progress
                    await trio.sleep(0.005)
        await c.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
        _done, rest = await c.collect_turn(turn_id)
        view = check_turn(seen + rest, tid, turn_id)
        assert view.status == "interrupted"
        if approved:
            [(since, interrupts)] = calls
            assert interrupts == 1  # after the native interrupt, not instead of it
            assert max(t0, marks["before"] - 1) <= since <= marks["before"]
            assert view.only("commandExecution")["status"] == "failed"
        else:
            assert calls == []
            assert view.only("commandExecution")["status"] == "declined"
        # The session stays healthy: the next turn runs on it.
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.sessions_opened == 1


async def test_native_interrupt_backend_returns_completed_counts_as_interrupted(
    tmp_path: Path,
) -> None:
    backend = ScriptedBackend(interrupt_mode="event")
    reached = trio.Event()

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        reached.set()
        await session.interrupted.wait()
        await stream_message(ctx, ["stopped"])
        return None

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
        await c.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id)
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        assert view.only("agentMessage")["text"] == "stopped"


@pytest.mark.parametrize("method", ["turn/interrupt", "turn/cancel"])
@pytest.mark.parametrize("how", ["ignored", "no-native", "raises"])
async def test_hard_cancel_then_session_reopened_resumed(
    tmp_path: Path, method: str, how: str
) -> None:
    backend = ScriptedBackend(
        interrupt=how != "no-native", interrupt_mode="ignore" if how == "ignored" else "cancel"
    )
    if how == "raises":
        backend.interrupt_error = RuntimeError("control channel closed")
    reached = trio.Event()
    backend.script = _streaming_script(reached, all_kinds=True)
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
        t0 = time.monotonic()
        await c.call(method, {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id)
        elapsed = time.monotonic() - t0
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        _assert_closed_as_failed(view, "interrupted")
        assert backend.cancelled_turns == [turn_id]
        if how == "ignored":
            assert backend.interrupt_calls == 1
            assert elapsed >= GRACE * 0.9  # the grace period was granted
        else:
            assert elapsed < GRACE  # nothing to wait for
            assert backend.interrupt_calls == (1 if how == "raises" else 0)
        # The killed session was closed; the next turn resumes the CLI session.
        assert backend.sessions_closed == 1
        backend.script = ScriptedBackend().script
        view2 = await run_checked(c, tid, "next")
        assert view2.status == "completed"
        assert backend.sessions_opened == 2
        reopened = backend.settings_seen[-1]
        assert reopened.resumed is True
        assert reopened.backend_session_id == "cli-session-1"


async def test_interrupt_during_session_open(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.open_gate = trio.Event()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "hi"))["turn"]["id"]
        await c.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id)
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        assert [i["type"] for i in view.items.values()] == ["userMessage"]
        assert backend.turn_inputs == []  # the backend never saw the turn
        backend.open_gate.set()
        view2 = await run_checked(c, tid, "again")
        assert view2.status == "completed"
        assert [t.text for t in backend.turn_inputs] == ["again"]


@pytest.mark.parametrize("mode", ["cancel", "ignore"])
async def test_interrupt_while_an_approval_is_pending(tmp_path: Path, mode: Any) -> None:
    backend = ScriptedBackend(interrupt_mode=mode)
    decisions: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        decisions.append(await run_command(ctx, "rm -rf build"))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        seen: list[Event] = []
        request = await c.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        assert request["method"] == "item/commandExecution/requestApproval"
        assert request["params"]["turnId"] == turn_id
        assert status_changes(seen)[-1] == ("active", ("waitingOnApproval",))
        await c.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id, on_request=lambda e: NO_ANSWER)
        view = check_turn([*seen, request, *events], tid, turn_id)
        assert view.status == "interrupted"
        resolved = [e for e in events if e["method"] == "serverRequest/resolved"]
        assert [e["params"]["requestId"] for e in resolved] == [request["id"]]
        assert view.only("commandExecution")["status"] == "declined"
        assert decisions == []  # the backend never got an answer: it was stopped
        assert status_changes(view.events) == [
            ("active", ()),
            ("active", ("waitingOnApproval",)),
            ("active", ()),
            "idle",
        ]
        # A late answer is ignored: no response, no event, nothing reaches the backend.
        n_messages = len(c.all_messages)
        await c.answer(request["id"], {"decision": "accept"})
        await c.no_event(0.1)
        assert len(c.all_messages) == n_messages
        assert decisions == []
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"


async def test_interrupt_errors(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    reached = trio.Event()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        for method in ("turn/interrupt", "turn/cancel"):
            error = await c.call_error(
                method, {"threadId": tid, "turnId": "01a20000-0000-7000-8000-000000000000"}
            )
            assert error == {"code": INVALID_REQUEST, "message": "no active turn to interrupt"}

        finished = (await c.run_turn(tid))[0]["params"]["turn"]["id"]
        for method in ("turn/interrupt", "turn/cancel"):
            # Interrupting a turn that is already over is harmless.
            assert await c.call(method, {"threadId": tid, "turnId": finished}) == {}
        await c.no_event(0.05)

        backend.script = _streaming_script(reached)
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
        for method in ("turn/interrupt", "turn/cancel"):
            error = await c.call_error(method, {"threadId": tid, "turnId": "stale-turn"})
            assert error["code"] == INVALID_REQUEST
            assert error["message"] == f"expected active turn id stale-turn but found {turn_id}"
        # A stale id did not touch the running turn.
        assert backend.interrupt_calls == 0
        await c.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id)
        assert check_turn(events, tid, turn_id).status == "interrupted"


async def test_turn_start_while_a_turn_runs_is_refused(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    release = trio.Event()

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        await release.wait()
        await stream_message(ctx, ["done"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        running = (await c.start_turn(tid, "first"))["turn"]["id"]
        error = await c.call_error(
            "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "second"}]}
        )
        assert error["code"] == INVALID_REQUEST
        assert running in error["message"]
        assert "already in progress" in error["message"]
        release.set()
        _done, events = await c.collect_turn(running)
        assert check_turn(events, tid, running).status == "completed"
        assert [t.text for t in backend.turn_inputs] == ["first"]
        release = trio.Event()

        # Two turn/start requests at the same moment: exactly one wins.
        responses: list[Event] = []

        async def start(text: str) -> None:
            params = {"threadId": tid, "input": [{"type": "text", "text": text}]}
            responses.append(await c.request("turn/start", params))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start, "a")
            nursery.start_soon(start, "b")
        ok = [r for r in responses if "result" in r]
        refused = [r for r in responses if "error" in r]
        assert len(ok) == len(refused) == 1
        winner = ok[0]["result"]["turn"]["id"]
        assert winner in refused[0]["error"]["message"]
        release.set()
        _done, events = await c.collect_turn(winner)
        assert check_turn(events, tid, winner).status == "completed"
        assert len(backend.turn_inputs) == 2
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid, "third")).status == "completed"


# == approvals ==================================================================================


@pytest.mark.parametrize("decision", ["accept", "acceptForSession", "decline"])
async def test_approval_decision_reaches_the_backend(tmp_path: Path, decision: str) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx, "pytest -q"))
        await stream_message(ctx, ["ok"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        requests: list[Event] = []

        def on_request(event: Event) -> Any:
            requests.append(event)
            return {"decision": decision}

        view = await run_checked(c, tid, on_request=on_request)
        assert seen == [decision]
        assert view.status == "completed"
        (request,) = requests
        assert request["method"] == "item/commandExecution/requestApproval"
        params = request["params"]
        cmd = view.only("commandExecution")
        assert params["itemId"] == cmd["id"]
        assert (params["threadId"], params["turnId"]) == (tid, view.turn["id"])
        assert params["command"] == "pytest -q"
        assert cmd["status"] == ("declined" if decision == "decline" else "completed")
        # Order: item/started → waitingOnApproval → request → resolved → active → item/completed
        i = view.events.index(request)
        assert view.events[i - 1]["params"]["status"]["activeFlags"] == ["waitingOnApproval"]
        assert view.events[i - 2]["method"] == "item/started"
        assert view.events[i + 1]["method"] == "serverRequest/resolved"
        assert view.events[i + 1]["params"]["requestId"] == request["id"]
        assert view.events[i + 2]["params"]["status"] == {"type": "active", "activeFlags": []}
        assert view.events[i + 3]["method"] == "item/completed"
        assert "item/approval/autoDecided" not in view.methods


@pytest.mark.parametrize("backend_waits", [False, True], ids=["returns-at-once", "keeps-going"])
async def test_cancel_decision_declines_and_interrupts(tmp_path: Path, backend_waits: bool) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx, "git push", complete=False))
        if backend_waits:
            await trio.sleep_forever()  # the CLI would go on: the engine must interrupt it

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid, on_request=lambda e: {"decision": "cancel"})
        assert seen == ["cancel"]
        assert view.status == "interrupted"
        assert view.only("commandExecution")["status"] == "declined"
        # Only a backend still running needs (and gets) a native interrupt; one that already
        # returned must not get a stray interrupt that could hit its next turn.
        assert backend.interrupt_calls == (1 if backend_waits else 0)
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.interrupt_calls == (1 if backend_waits else 0)


BAD_ANSWERS: dict[str, Any] = {
    "garbage-string": "yes please",
    "garbage-number": 42,
    "null-result": None,
    "empty-object": {},
    "unknown-decision": {"decision": "approve"},
    "decision-wrong-type": {"decision": ["accept"]},
    "error-response": RawReply({"error": {"code": -1, "message": "no idea"}}),
    "malformed-error": RawReply({"error": "nope"}),
}


@pytest.mark.parametrize("answer", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
async def test_bad_approval_answers_decline(tmp_path: Path, answer: Any) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid, on_request=lambda e: answer)
        assert seen == ["decline"]
        assert view.status == "completed"
        assert view.only("commandExecution")["status"] == "declined"


async def test_response_without_result_or_error_declines(tmp_path: Path) -> None:
    """A response object that carries neither `result` nor `error`: fail closed (decline),
    and do not answer the client's response with an error of our own."""
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx))

    backend.script = script
    cfg_ms = 500  # bounded, so a lost answer cannot hang the test
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(config={"approvalTimeoutMs": cfg_ms})
        t0 = time.monotonic()
        view = await run_checked(c, tid, on_request=lambda e: RawReply({"jsonrpc": "2.0"}))
        assert seen == ["decline"]
        assert view.status == "completed"
        assert time.monotonic() - t0 < cfg_ms / 1000 / 2, "the answer was not routed"
        assert not [m for m in c.all_messages if "error" in m and "method" not in m]


async def test_approval_timeout_declines(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(config={"approvalTimeoutMs": 100})
        t0 = time.monotonic()
        view = await run_checked(c, tid, on_request=lambda e: NO_ANSWER)
        assert time.monotonic() - t0 >= 0.09
        assert seen == ["decline"]
        assert view.status == "completed"
        request = next(e for e in view.events if "id" in e)
        auto = [e for e in view.events if e["method"] == "item/approval/autoDecided"]
        assert len(auto) == 1
        params = auto[0]["params"]
        assert params["decision"] == "decline"
        assert params["reason"] == "timeout"
        assert params["itemId"] == view.only("commandExecution")["id"]
        assert params["method"] == "item/commandExecution/requestApproval"
        resolved = [e for e in view.events if e["method"] == "serverRequest/resolved"]
        assert [e["params"]["requestId"] for e in resolved] == [request["id"]]
        # The late answer changes nothing.
        await c.answer(request["id"], {"decision": "accept"})
        await c.no_event(0.05)


async def test_server_wide_approval_timeout_applies(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx))

    backend.script = script
    cfg = config(approval_timeout=0.1)
    async with inproc_server({"test": backend}, tmp_path, config=cfg) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid, on_request=lambda e: NO_ANSWER)
        assert seen == ["decline"]
        assert "item/approval/autoDecided" in view.methods


async def test_policy_never_auto_accepts_without_asking(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        seen.append(await run_command(ctx))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(approvalPolicy="never")
        view = await run_checked(c, tid, on_request=lambda e: pytest.fail("asked the client"))
        assert seen == ["accept"]
        assert not [e for e in view.events if "id" in e]
        auto = [e["params"] for e in view.events if e["method"] == "item/approval/autoDecided"]
        assert [(a["decision"], a["reason"]) for a in auto] == [("accept", "policy")]
        assert "waitingOnApproval" not in str(status_changes(view.events))
        # A per-turn override sticks: back to asking.
        view = await run_checked(c, tid, on_request=accept_all, approvalPolicy="on-request")
        assert any("id" in e for e in view.events)


async def test_a_new_policy_holds_for_later_turns_the_cli_and_resume(tmp_path: Path) -> None:
    """A policy set by turn/start or thread/resume decides the approvals of later turns, is the
    one the backend's session reads, and is what thread/resume reports (also after a restart)."""
    seen: list[tuple[str, str]] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        policy = session.settings.approval_policy
        seen.append((policy, await run_command(ctx)))

    def never_ask(event: Event) -> Any:
        pytest.fail("asked the client")

    backend = ScriptedBackend()
    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        await run_checked(c, tid, on_request=never_ask, approvalPolicy="never")
        await run_checked(c, tid, on_request=never_ask)
        resumed = await c.call("thread/resume", {"threadId": tid, "approvalPolicy": "untrusted"})
        assert resumed["approvalPolicy"] == "untrusted"
        view = await run_checked(c, tid, on_request=accept_all)
        assert [e["method"] for e in view.events if "id" in e] == [
            "item/commandExecution/requestApproval"
        ]
    assert seen == [("never", "accept"), ("never", "accept"), ("untrusted", "accept")]

    restarted = ScriptedBackend()
    restarted.script = script
    async with inproc_server({"test": restarted}, tmp_path, config=config()) as c:
        resumed = await c.call("thread/resume", {"threadId": tid})
        assert resumed["approvalPolicy"] == "untrusted"
        assert restarted.settings_seen[0].approval_policy == "untrusted"


async def test_approval_rules_allow_and_deny(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[tuple[str, str]] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        for command in ("git status", "rm -rf /", "make test"):
            seen.append((command, await run_command(ctx, command)))
        item = DynamicToolCallItem(
            id=ctx.new_item_id(), tool="web_fetch", arguments={}, status="inProgress"
        )
        await ctx.emit(b.ItemStarted(item))
        decision = await ctx.request_approval(
            b.ApprovalRequest(kind="tool", item_id=item.id, tool="web_fetch", arguments={})
        )
        seen.append(("web_fetch", decision))
        await ctx.emit(b.ItemCompleted(msgspec.structs.replace(item, status="failed")))

    rules = [
        {"decision": "accept", "kind": "command", "command": "git *"},
        {"decision": "decline", "command": "rm *"},
        {"decision": "decline", "kind": "tool", "tool": "web_*"},
    ]
    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(config={"approvalRules": rules})
        asked: list[str] = []

        def on_request(event: Event) -> Any:
            asked.append(event["params"].get("command"))
            return {"decision": "accept"}

        view = await run_checked(c, tid, on_request=on_request)
        assert seen == [
            ("git status", "accept"),
            ("rm -rf /", "decline"),
            ("make test", "accept"),
            ("web_fetch", "decline"),
        ]
        assert asked == ["make test"]
        auto = [e["params"] for e in view.events if e["method"] == "item/approval/autoDecided"]
        assert [(a["decision"], a["reason"], a["rule"]) for a in auto] == [
            ("accept", "rule", "accept kind=command command=git *"),
            ("decline", "rule", "decline command=rm *"),
            ("decline", "rule", "decline kind=tool tool=web_*"),
        ]
        assert auto[2]["method"] == "item/tool/requestApproval"


async def test_invalid_approval_rules_are_rejected(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        error = await c.call_error(
            "thread/start",
            {"modelProvider": "test", "cwd": "/tmp", "config": {"approvalRules": [{"x": 1}]}},
        )
        assert "approvalRules" in error["message"]


async def test_accept_for_session_auto_accepts_the_same_command_later(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[tuple[str, str]] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        for command in turn.text.split(","):
            seen.append((command, await run_command(ctx, command)))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        other = await c.start_thread()
        asked: list[str] = []

        def on_request(event: Event) -> Any:
            asked.append(event["params"]["command"])
            return {"decision": "acceptForSession"}

        await run_checked(c, tid, "npm test", on_request=on_request)
        view = await run_checked(c, tid, "npm test,npm publish", on_request=on_request)
        assert asked == ["npm test", "npm publish"]
        assert seen[:3] == [
            ("npm test", "acceptForSession"),
            ("npm test", "accept"),
            ("npm publish", "acceptForSession"),
        ]
        auto = [e["params"] for e in view.events if e["method"] == "item/approval/autoDecided"]
        assert [(a["decision"], a["reason"], a["rule"]) for a in auto] == [
            ("accept", "rule", "acceptForSession")
        ]
        # Per thread: another thread still asks.
        await run_checked(c, other, "npm test", on_request=on_request)
        assert asked == ["npm test", "npm publish", "npm test"]


async def test_file_change_and_tool_approvals(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: list[str] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        fc = FileChangeItem(
            id=ctx.new_item_id(),
            status="inProgress",
            changes=[FileUpdateChange(path="/tmp/x", kind=PatchKindAdd(), diff="+x\n")],
        )
        await ctx.emit(b.ItemStarted(fc))
        seen.append(
            await ctx.request_approval(
                b.ApprovalRequest(kind="fileChange", item_id=fc.id, reason="write x")
            )
        )
        await ctx.emit(b.ItemCompleted(msgspec.structs.replace(fc, status="completed")))
        tool = McpToolCallItem(
            id=ctx.new_item_id(),
            server="gh",
            tool="create_issue",
            arguments={"t": 1},
            status="inProgress",
        )
        await ctx.emit(b.ItemStarted(tool))
        seen.append(
            await ctx.request_approval(
                b.ApprovalRequest(
                    kind="tool", item_id=tool.id, tool="create_issue", arguments={"t": 1}
                )
            )
        )
        # Left open: the engine closes it (failed) at the end of the turn.

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        requests: list[Event] = []

        def on_request(event: Event) -> Any:
            requests.append(event)
            return {"decision": "accept"} if len(requests) == 1 else {"decision": "decline"}

        view = await run_checked(c, tid, on_request=on_request)
        assert seen == ["accept", "decline"]
        assert [r["method"] for r in requests] == [
            "item/fileChange/requestApproval",
            "item/tool/requestApproval",
        ]
        assert requests[1]["params"]["tool"] == "create_issue"
        assert requests[1]["params"]["arguments"] == {"t": 1}
        assert view.only("fileChange")["status"] == "completed"
        assert view.only("mcpToolCall")["status"] == "failed"


async def test_concurrent_approvals_are_routed_by_request_id(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    seen: dict[str, str] = {}

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        async def one(command: str) -> None:
            seen[command] = await run_command(ctx, command)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, "first")
            nursery.start_soon(one, "second")

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        events: list[Event] = []
        while len([e for e in events if "id" in e]) < 2:
            events.append(await c.next_event())
        by_command = {e["params"]["command"]: e for e in events if "id" in e}
        # Answer in the opposite order of the requests, with different decisions.
        await c.answer(by_command["second"]["id"], {"decision": "decline"})
        await c.answer(by_command["first"]["id"], {"decision": "accept"})
        _done, rest = await c.collect_turn(turn_id)
        view = check_turn(events + rest, tid, turn_id)
        assert seen == {"first": "accept", "second": "decline"}
        assert view.status == "completed"
        # waitingOnApproval is set once and cleared only when both are answered.
        assert status_changes(view.events) == [
            ("active", ()),
            ("active", ("waitingOnApproval",)),
            ("active", ()),
            "idle",
        ]
        resolved = [
            e["params"]["requestId"] for e in rest if e["method"] == "serverRequest/resolved"
        ]
        assert resolved == [by_command["second"]["id"], by_command["first"]["id"]]


async def test_model_override_reopens_the_session_resumed(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(model="small")
        await run_checked(c, tid)
        await run_checked(c, tid, model="large")
        await run_checked(c, tid)
        assert [(s.model, s.resumed) for s in backend.settings_seen] == [
            ("small", False),
            ("large", True),
        ]
        read = await c.call("thread/read", {"threadId": tid})
        assert read["thread"]["model"] == "large"


USER_INPUT_ANSWERS: dict[str, tuple[Any, dict[str, list[str]] | None]] = {
    "answered": ({"answers": {"q1": {"answers": ["blue"]}}}, {"q1": ["blue"]}),
    "garbage": ({"answers": "blue"}, None),
    "not-an-object": ("blue", None),
    "error": (RawReply({"error": {"code": 1, "message": "no"}}), None),
}


@pytest.mark.parametrize("case", USER_INPUT_ANSWERS.values(), ids=USER_INPUT_ANSWERS.keys())
async def test_user_input_questions(tmp_path: Path, case: tuple[Any, Any]) -> None:
    answer, expected = case
    backend = ScriptedBackend()
    got: list[Any] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        item = DynamicToolCallItem(
            id=ctx.new_item_id(), tool="AskUserQuestion", arguments={}, status="inProgress"
        )
        await ctx.emit(b.ItemStarted(item))
        got.append(
            await ctx.request_user_input(
                item.id,
                [ToolRequestUserInputQuestion(id="q1", header="Colour", question="Which?")],
            )
        )
        await ctx.emit(b.ItemCompleted(msgspec.structs.replace(item, status="completed")))

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid, on_request=lambda e: answer)
        assert got == [expected]
        request = next(e for e in view.events if "id" in e)
        assert request["method"] == "item/tool/requestUserInput"
        assert request["params"]["questions"][0]["id"] == "q1"
        assert ("active", ("waitingOnUserInput",)) in status_changes(view.events)
        assert "serverRequest/resolved" in view.methods


# == per-turn timeout ===========================================================================


@pytest.mark.parametrize("source", ["thread-config", "server-config"])
async def test_turn_timeout_fails_with_query_timed_out(tmp_path: Path, source: str) -> None:
    backend = ScriptedBackend()
    backend.script = _streaming_script(trio.Event())
    cfg = config(turn_timeout=0.15) if source == "server-config" else config()
    async with inproc_server({"test": backend}, tmp_path, config=cfg) as c:
        params = {"config": {"turnTimeoutMs": 150}} if source == "thread-config" else {}
        tid = await c.start_thread(**params)
        t0 = time.monotonic()
        view = await run_checked(c, tid)
        assert time.monotonic() - t0 >= 0.14
        assert view.status == "failed"
        assert view.turn["error"]["message"] == "Query timed out"
        assert view.only("agentMessage")["text"] == "so far"
        # The timed-out session is replaced by a resumed one.
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"
        assert backend.sessions_opened == 2
        assert backend.settings_seen[-1].resumed is True


async def test_turn_timeout_while_approval_pending(tmp_path: Path) -> None:
    backend = ScriptedBackend()

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        await run_command(ctx)

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(config={"turnTimeoutMs": 100})
        view = await run_checked(c, tid, on_request=lambda e: NO_ANSWER)
        assert view.status == "failed"
        assert view.turn["error"]["message"] == "Query timed out"
        assert view.only("commandExecution")["status"] == "declined"
        assert "serverRequest/resolved" in view.methods


# == role bootstrap =============================================================================


async def _bootstrap_script(ctx: Ctx, turn: Input, session: Session) -> None:
    if turn.bootstrap:
        await ctx.mark_role_bootstrap_applied()
    await stream_message(ctx, ["ok"])


async def test_role_bootstrap_first_turn_only_and_not_after_resume(tmp_path: Path) -> None:
    backend = ScriptedBackend(_bootstrap_script)
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(
            developerInstructions="You are a reviewer.", baseInstructions="Be brief."
        )
        await run_checked(c, tid)
        await run_checked(c, tid)
        assert [t.bootstrap for t in backend.turn_inputs] == [
            "Be brief.\n\nYou are a reviewer.",
            None,
        ]
        assert backend.settings_seen[0].developer_instructions == "You are a reviewer."
    backend2 = ScriptedBackend(_bootstrap_script)
    async with inproc_server({"test": backend2}, tmp_path, config=config()) as c:
        await c.call("thread/resume", {"threadId": tid})
        await run_checked(c, tid)
        assert [t.bootstrap for t in backend2.turn_inputs] == [None]
        seen = backend2.settings_seen[0]
        assert seen.role_bootstrap_applied is True
        assert seen.developer_instructions == "You are a reviewer."


async def test_role_bootstrap_repeats_until_the_backend_applies_it(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(developerInstructions="Role")
        plain = await c.start_thread()
        await run_checked(c, tid)  # the echo script never marks it applied
        backend.script = _bootstrap_script
        await run_checked(c, tid)
        await run_checked(c, tid)
        await run_checked(c, plain)
        assert [t.bootstrap for t in backend.turn_inputs] == ["Role", "Role", None, None]


async def test_role_bootstrap_not_repeated_after_session_restart(tmp_path: Path) -> None:
    backend = ScriptedBackend(_bootstrap_script)
    backend.unhealthy_after_turn = True
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(developerInstructions="Role")
        await run_checked(c, tid)
        await run_checked(c, tid)
        assert [t.bootstrap for t in backend.turn_inputs] == ["Role", None]
        assert backend.settings_seen[1].role_bootstrap_applied is True


# == concurrency =================================================================================


async def test_fifty_threads_stream_at_once(tmp_path: Path) -> None:
    n = 50
    backend = ScriptedBackend()
    in_flight = 0
    peak = 0

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        words = f"reply to {ctx.thread_id} for {turn.text}".split(" ")
        await stream_message(ctx, [w + " " for w in words], pause=0.002)
        in_flight -= 1

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tids = [await c.start_thread() for _ in range(n)]
        turn_of: dict[str, str] = {}

        async def start(tid: str) -> None:
            result = await c.start_turn(tid, f"prompt-{tid}")
            turn_of[tid] = result["turn"]["id"]

        async with trio.open_nursery() as nursery:
            for tid in tids:
                nursery.start_soon(start, tid)
        events: list[Event] = []
        completed = 0
        with trio.fail_after(20):
            while completed < n:
                event = await c.next_event()
                events.append(event)
                if event["method"] == "turn/completed":
                    completed += 1
        assert peak > 1, "turns did not run concurrently"
        by_thread: dict[str, list[Event]] = defaultdict(list)
        for event in events:
            by_thread[event["params"]["threadId"]].append(event)
        assert set(by_thread) == set(tids)
        for tid in tids:
            view = check_turn(by_thread[tid], tid, turn_of[tid])
            assert view.status == "completed"
            assert view.only("agentMessage")["text"] == f"reply to {tid} for prompt-{tid} "
            assert view.only("userMessage")["content"][0]["text"] == f"prompt-{tid}"
        await c.no_event(0.05)


# == persistence ================================================================================


async def test_turns_persist_and_resume_on_a_new_server(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    reached = trio.Event()

    async def script(ctx: Ctx, turn: Input, session: Session) -> Any:
        if turn.text == "fail":
            await stream_message(ctx, ["about to fail"])
            raise b.BackendError("it broke")
        if turn.text == "wait":
            return await _streaming_script(reached)(ctx, turn, session)
        await stream_message(ctx, ["answer to ", turn.text])
        return None

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(model="m-1")
        ids = []
        view = await run_checked(c, tid, "first")
        ids.append(view.turn["id"])
        view = await run_checked(c, tid, "fail")
        ids.append(view.turn["id"])
        turn_id = (await c.start_turn(tid, "wait"))["turn"]["id"]
        await reached.wait()
        await c.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        await c.collect_turn(turn_id)
        ids.append(turn_id)

        read = await c.call("thread/read", {"threadId": tid, "includeTurns": True})
        turns = read["thread"]["turns"]
        assert [t["id"] for t in turns] == ids
        assert [t["status"] for t in turns] == ["completed", "failed", "interrupted"]
        assert turns[1]["error"]["message"] == "it broke"
        assert turns[0].get("error") is None
        assert [[i["type"] for i in t["items"]] for t in turns] == [
            ["userMessage", "agentMessage"],
            ["userMessage", "agentMessage"],
            ["userMessage", "agentMessage"],
        ]
        assert turns[0]["items"][1]["text"] == "answer to first"
        assert turns[2]["items"][1]["text"] == "so far"
        listed = await c.call("thread/list", {})
        assert [t["id"] for t in listed["data"]] == [tid]
        assert listed["data"][0]["preview"] == "first"
        assert listed["data"][0]["status"] == {"type": "idle"}

    backend2 = ScriptedBackend()
    backend2.script = script
    async with inproc_server({"test": backend2}, tmp_path, config=config()) as c:
        listed = await c.call("thread/list", {})
        assert [t["id"] for t in listed["data"]] == [tid]
        assert listed["data"][0]["status"] == {"type": "notLoaded"}
        resumed = await c.call("thread/resume", {"threadId": tid})
        assert [t["status"] for t in resumed["thread"]["turns"]] == [
            "completed",
            "failed",
            "interrupted",
        ]
        assert resumed["model"] == "m-1"
        view = await run_checked(c, tid, "after restart")
        assert view.status == "completed"
        settings = backend2.settings_seen[0]
        assert settings.resumed is True
        assert settings.backend_session_id == "cli-session-1"
        assert settings.model == "m-1"
        read = await c.call("thread/read", {"threadId": tid, "includeTurns": True})
        assert len(read["thread"]["turns"]) == 4
        assert read["thread"]["turns"][3]["items"][1]["text"] == "answer to after restart"


async def test_ephemeral_thread_is_not_persisted(tmp_path: Path, backend: ScriptedBackend) -> None:
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(ephemeral=True)
        assert (await run_checked(c, tid)).status == "completed"
        listed = await c.call("thread/list", {})
        assert [t["id"] for t in listed["data"]] == [tid]  # listed while loaded
    async with inproc_server({"test": ScriptedBackend()}, tmp_path, config=config()) as c:
        assert (await c.call("thread/list", {}))["data"] == []
        error = await c.call_error("thread/resume", {"threadId": tid})
        assert error["message"] == f"no rollout found for thread id {tid}"


async def test_archive_stops_a_running_turn(tmp_path: Path) -> None:
    backend = ScriptedBackend(interrupt_mode="ignore")
    reached = trio.Event()
    backend.script = _streaming_script(reached)
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
        t0 = time.monotonic()
        assert await c.call("thread/archive", {"threadId": tid}) == {}
        assert time.monotonic() - t0 < GRACE  # hard stop, no grace
        _done, events = await c.collect_turn(turn_id)
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        assert backend.sessions_closed == backend.sessions_opened == 1
        rest = [e["method"] for e in c.pending_events()]
        assert "thread/archived" in rest


async def test_shutdown_with_a_running_turn_stops_the_backend(tmp_path: Path) -> None:
    backend = ScriptedBackend(interrupt_mode="ignore")
    reached = trio.Event()
    backend.script = _streaming_script(reached)
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        await reached.wait()
    assert backend.cancelled_turns == [turn_id]
    assert backend.sessions_closed == 1
    async with inproc_server({"test": ScriptedBackend()}, tmp_path, config=config()) as c:
        read = await c.call("thread/read", {"threadId": tid, "includeTurns": True})
        assert [t["status"] for t in read["thread"]["turns"]] == ["interrupted"]


async def test_turn_start_in_a_batch_answers_before_turn_started(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        c.expect_response("b1", "turn/start")
        request = {
            "id": "b1",
            "method": "turn/start",
            "params": {"threadId": tid, "input": [{"type": "text", "text": "x"}]},
        }
        await c.send([request])
        response = await c.next_event()  # not awaited by `request`: it comes as an event
        assert response.get("id") == "b1", f"turn/started before the batch answer: {response}"
        turn_id = response["result"]["turn"]["id"]
        _done, events = await c.collect_turn(turn_id)
        assert check_turn(events, tid, turn_id).status == "completed"


async def test_interrupt_before_the_backend_got_the_turn(tmp_path: Path) -> None:
    """An interrupt that arrives after turn/started but before the backend began the turn (here:
    while the session is being reopened) stops it at once: no native interrupt to a CLI that
    is not running a turn, no grace period."""
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        backend.unhealthy_after_turn = True
        await run_checked(c, tid)  # the session is closed after this turn
        backend.unhealthy_after_turn = False
        backend.script = _streaming_script(trio.Event())
        backend.open_gate = trio.Event()
        attempts = backend.open_attempts
        t0 = time.monotonic()
        turn_id = (await c.start_turn(tid, "go"))["turn"]["id"]
        with trio.fail_after(5):
            while backend.open_attempts == attempts:  # noqa: ASYNC110 - a counter, no event
                await trio.sleep(0.005)
        await c.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        _done, events = await c.collect_turn(turn_id)
        view = check_turn(events, tid, turn_id)
        assert view.status == "interrupted"
        assert [i["type"] for i in view.items.values()] == ["userMessage"]
        assert time.monotonic() - t0 < GRACE
        assert backend.interrupt_calls == 0
        assert [t.text for t in backend.turn_inputs] == ["hello"]  # never saw "go"
        backend.open_gate = None
        backend.script = ScriptedBackend().script
        assert (await run_checked(c, tid)).status == "completed"


async def test_a_stale_context_cannot_reach_a_finished_turn(tmp_path: Path) -> None:
    """A backend task that outlives its turn and keeps using that turn's context must not
    produce notifications or requests for the finished turn."""
    backend = ScriptedBackend()
    stale: list[Ctx] = []
    late: list[Any] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        if stale:
            old = stale[0]
            iid = old.new_item_id()
            await old.emit(b.ItemStarted(AgentMessageItem(id=iid, text="")))
            await old.emit(b.AgentMessageDelta(iid, "ghost"))
            await old.emit(b.RetryableError(TurnError(message="ghost")))
            late.append(await old.request_approval(b.ApprovalRequest(kind="command", item_id=iid)))
            late.append(await old.request_user_input(iid, []))
        stale.append(ctx)
        await stream_message(ctx, ["ok"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        await run_checked(c, tid)
        view = await run_checked(c, tid, on_request=accept_all)  # check_turn: no misrouting
        assert view.status == "completed"
        assert late == ["decline", None]
        assert not [e for e in view.events if "id" in e]
        assert "error" not in view.methods


async def test_a_cli_found_dead_at_turn_start_is_reopened_and_the_turn_runs(
    tmp_path: Path,
) -> None:
    """A backend that finds its CLI dead before the turn reached it (SessionLost) gets a fresh,
    resumed session and the turn runs there; the client sees one normal turn."""
    backend = ScriptedBackend()
    attempts: list[Session] = []

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        attempts.append(session)
        if len(attempts) == 2:
            session.healthy = False
            raise b.SessionLost("the CLI died while idle")
        await stream_message(ctx, ["all ", "good"])

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        assert (await run_checked(c, tid)).status == "completed"
        view = await run_checked(c, tid)
        assert view.status == "completed"
        assert [i["type"] for i in view.items.values()] == ["userMessage", "agentMessage"]
        assert len(attempts) == 3 and attempts[2] is not attempts[1]
        assert backend.sessions_opened == 2
        assert backend.settings_seen[-1].resumed


async def test_session_lost_after_the_turn_began_fails_the_turn(tmp_path: Path) -> None:
    """Once part of the turn happened, a lost CLI is a failed turn, not a silent re-run."""
    backend = ScriptedBackend()

    async def script(ctx: Ctx, turn: Input, session: Session) -> None:
        await stream_message(ctx, ["partial"])
        session.healthy = False
        raise b.SessionLost("the CLI died mid-turn")

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        view = await run_checked(c, tid)
        assert view.status == "failed"
        assert backend.sessions_opened == 1
