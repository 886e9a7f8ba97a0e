"""The ACP client (`threadline.backends.acp`) replayed against recordings of the real Gemini CLI.

`tests/transcripts/gemini/*.jsonl` record both directions of real `gemini --acp` runs against the
fake Gemini API (scripts/record-transcripts; the CLI version is in the manifest there). A
`ReplayHost` stands in for the agent process: when the session sends a request, the host finds
the next recorded client request of that method and plays the agent's side that followed it
(``session/update`` notifications, ``session/request_permission`` requests, the response), so
`AcpSession.run_turn` and `AcpTurnMapper` see exactly what the real CLI sent, in order. Our
answers to permission requests are checked against the recorded ones.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from tests.transcripts import transcript
from threadline.backends import base as b
from threadline.backends.gemini.acp import GeminiAcpSession
from threadline.backends.kit.acp import AcpError, AcpTurnMapper
from threadline.protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    FileChangeItem,
    ReasoningItem,
)

CWD = "<WORK>"  # the recordings' sanitised project dir


def load(name: str) -> list[tuple[str, dict[str, Any]]]:
    """(direction, message) of a transcript: "c2a" client→agent, "a2c" agent→client."""
    out = []
    for line in transcript("gemini", f"{name}.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["dir"] in ("c2a", "a2c") and isinstance(record["msg"], dict):
            out.append((record["dir"], record["msg"]))
    return out


# -- the replay --------------------------------------------------------------------------------


class ReplayHost:
    """Plays the agent's side of a transcript to an `AcpSession` (duck-types `AcpHost`)."""

    def __init__(
        self, name: str, nursery: trio.Nursery, *, load_tail: int = 0, tail_gap: float = 0.02
    ) -> None:
        self.messages = load(name)
        self.cursor = 0
        self.nursery = nursery
        self.sessions: dict[str, Any] = {}
        self.prompts: dict[str, Any] = {}  # (AcpHost's: prompts the agent has not answered)
        self.proc = None
        self.name = "replayed agent"
        self.alive = True
        self.notified: list[tuple[str, Any]] = []
        #: (our answer, the recorded client's answer) per permission request
        self.permission_answers: list[tuple[Any, Any]] = []
        #: the session/load replay that Gemini streams after its answer (not awaited): these
        #: many agent messages after the load response are sent in the background
        self.load_tail = load_tail
        self.tail_gap = tail_gap
        self.session: GeminiAcpSession | None = None
        # (AcpHost's: the agent's initialize answer and its first session's offer)
        self.init_result: dict[str, Any] = {}
        self.defaults: Any = None

    def failure(self, what: str) -> b.BackendError:
        return b.BackendError(f"replayed agent {what}")

    async def notify(self, method: str, params: Any) -> None:
        self.notified.append((method, params))

    def start_soon(self, fn: Any, *args: Any) -> None:
        self.nursery.start_soon(fn, *args)

    def _deliver(self, message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        session = self.sessions.get(str(params.get("sessionId")))
        if session is not None:
            session.on_update(params["update"])

    def _recorded_answer(self, rid: Any) -> Any:
        for direction, message in self.messages[self.cursor :]:
            if direction == "c2a" and message.get("id") == rid and "method" not in message:
                return message.get("result")
        return None

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        # the next recorded client request of this method (anything before it is skipped)
        for i in range(self.cursor, len(self.messages)):
            direction, message = self.messages[i]
            if direction == "c2a" and message.get("method") == method and "id" in message:
                break
        else:
            raise AssertionError(f"the transcript has no further {method} request")
        rid, self.cursor = message["id"], i + 1
        while self.cursor < len(self.messages):
            direction, message = self.messages[self.cursor]
            self.cursor += 1
            if direction == "c2a":
                if message.get("method") == "session/cancel":
                    # The recorded client cancelled here: so does ours (as the engine would).
                    assert self.session is not None
                    await self.session.interrupt()
                    assert ("session/cancel", {"sessionId": self.session.session_id}) in (
                        self.notified
                    )
                continue
            if message.get("method") == "session/update":
                self._deliver(message)
                await trio.lowlevel.checkpoint()  # let the turn loop map it
            elif "method" in message:
                await self._agent_request(message)
            elif message.get("id") == rid:
                if method == "session/load" and self.load_tail:
                    self._send_tail()
                error = message.get("error")
                if error is not None:
                    raise AcpError(error["code"], error["message"], error.get("data"))
                return message.get("result")
        raise AssertionError(f"no response to {method} in the transcript")

    async def _agent_request(self, message: dict[str, Any]) -> None:
        recorded = self._recorded_answer(message["id"])
        assert self.session is not None
        if recorded == {"outcome": {"outcome": "cancelled"}}:
            # The recorded client withdrew the request: ours does when the turn is interrupted.
            async with trio.open_nursery() as nursery:
                answers: list[Any] = []

                async def answer() -> None:
                    answers.append(
                        await self.session.on_request(message["method"], message["params"])
                    )  # type: ignore[union-attr]

                nursery.start_soon(answer)
                await trio.sleep(0.01)
                await self.session.interrupt()
            ours = answers[0]
        else:
            ours = await self.session.on_request(message["method"], message["params"])
        self.permission_answers.append((ours, recorded))

    def _send_tail(self) -> None:
        tail = []
        i = self.cursor
        while len(tail) < self.load_tail:
            direction, _message = self.messages[i]
            if direction == "a2c":
                tail.append(self.messages.pop(i))
            else:
                i += 1

        async def send() -> None:
            for _direction, message in tail:
                await trio.sleep(self.tail_gap)
                self._deliver(message)

        self.nursery.start_soon(send)


@dataclass
class FakeContext:
    """The engine's side of a turn: records events; answers approvals from a script."""

    decisions: list[str] = field(default_factory=list)
    thread_id: str = "thread"
    turn_id: str = "turn"
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("test"))
    events: list[b.BackendEvent] = field(default_factory=list)
    approvals: list[b.ApprovalRequest] = field(default_factory=list)
    session_ids: list[str] = field(default_factory=list)
    bootstrap_marked: int = 0
    _ids: int = 0

    def new_item_id(self) -> str:
        self._ids += 1
        return f"item-{self._ids}"

    async def emit(self, event: b.BackendEvent) -> None:
        self.events.append(event)

    async def request_approval(self, request: b.ApprovalRequest) -> b.ApprovalDecision:
        self.approvals.append(request)
        decision = self.decisions.pop(0)
        if decision == "wait":
            await trio.sleep_forever()
        return decision  # type: ignore[return-value]

    async def request_user_input(self, item_id: str, questions: Sequence[Any]) -> None:
        return None

    async def set_backend_session_id(self, session_id: str) -> None:
        self.session_ids.append(session_id)

    async def mark_role_bootstrap_applied(self) -> None:
        self.bootstrap_marked += 1


async def open_session(
    host: ReplayHost, *, policy: str = "on-request", resume: str | None = None
) -> GeminiAcpSession:
    settings = b.SessionSettings(
        thread_id="thread",
        cwd=CWD,
        mode="acp",
        approval_policy=policy,  # type: ignore[arg-type]
        backend_session_id=resume,
    )
    session = GeminiAcpSession(host, settings, "gemini")  # type: ignore[arg-type]
    host.session = session
    await session.open()
    return session


async def run(
    session: GeminiAcpSession, text: str, *decisions: str, bootstrap: str | None = None
) -> tuple[b.TurnOutcome | None, FakeContext]:
    ctx = FakeContext(list(decisions))
    turn = b.TurnInput(turn_id="turn", input=[], text=text, bootstrap=bootstrap)
    with trio.fail_after(10):
        outcome = await session.run_turn(turn, ctx)
    assert ctx.decisions == [], "an expected approval was not asked"
    return outcome, ctx


def kind(item: Any) -> str:
    """An item's protocol `type` (its msgspec tag)."""
    return str(type(item).__struct_config__.tag)


def flow(events: list[b.BackendEvent]) -> list[tuple[Any, ...]]:
    """A readable trace: (what, item type or id, detail)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        match e:
            case b.ItemStarted(item=item):
                out.append(("started", kind(item)))
            case b.ItemCompleted(item=item):
                detail = getattr(item, "status", None) or getattr(item, "text", None)
                out.append(("completed", kind(item), detail))
            case b.AgentMessageDelta(delta=delta):
                out.append(("text", delta))
            case b.ReasoningSummaryDelta(delta=delta):
                out.append(("thought", delta))
            case b.CommandOutputDelta(delta=delta):
                out.append(("output", delta))
            case b.Warning(message=message):
                out.append(("warning", message))
            case _:
                out.append((type(e).__name__,))
    return out


def completed(events: list[b.BackendEvent], cls: type[Any]) -> list[Any]:
    return [e.item for e in events if isinstance(e, b.ItemCompleted) and isinstance(e.item, cls)]


def started(events: list[b.BackendEvent], cls: type[Any]) -> list[Any]:
    return [e.item for e in events if isinstance(e, b.ItemStarted) and isinstance(e.item, cls)]


def assert_balanced(events: list[b.BackendEvent]) -> None:
    s = [e.item.id for e in events if isinstance(e, b.ItemStarted)]
    c = [e.item.id for e in events if isinstance(e, b.ItemCompleted)]
    assert len(s) == len(set(s)) and sorted(s) == sorted(c), (s, c)


# -- tests -----------------------------------------------------------------------------------------


async def test_thought_text_and_a_tool_that_needs_no_permission(nursery: trio.Nursery) -> None:
    host = ReplayHost("f6_acp_thought_and_safe_shell", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "think first")
    assert outcome == b.TurnOutcome("completed")
    thought = "**Considering**\nThe request, carefully."
    assert flow(ctx.events) == [
        ("started", "reasoning"),
        ("ReasoningSummaryPartAdded",),
        ("thought", thought),
        ("completed", "reasoning", None),
        ("started", "agentMessage"),
        ("text", "Here it is."),
        ("completed", "agentMessage", "Here it is."),
        ("TokenUsageUpdated",),
    ]
    [reasoning] = completed(ctx.events, ReasoningItem)
    assert reasoning.summary == [thought]
    [usage] = [e.usage for e in ctx.events if isinstance(e, b.TokenUsageUpdated)]
    assert (usage.last.input_tokens, usage.last.output_tokens) == (100, 5)

    outcome, ctx = await run(session, "echo something")
    assert outcome == b.TurnOutcome("completed")
    assert flow(ctx.events) == [
        ("started", "agentMessage"),
        ("text", "I will run a com"),
        ("text", "mand."),
        ("completed", "agentMessage", "I will run a command."),
        ("started", "commandExecution"),
        # (the tool_call's "[current working directory …]" is not output)
        ("output", "hello-from-tool"),
        ("completed", "commandExecution", "completed"),
        ("started", "agentMessage"),
        ("text", "It printed."),
        ("completed", "agentMessage", "It printed."),
        ("TokenUsageUpdated",),
    ]
    [cmd] = completed(ctx.events, CommandExecutionItem)
    # Gemini's own call id, `<tool>__<tool>_<epoch ms>_<n>` (the recorder's stand-in for the ms)
    assert cmd.id == "run_shell_command__run_shell_command_1700000000002_0"
    assert (cmd.command, cmd.cwd, cmd.aggregated_output) == (
        "echo hello-from-tool",
        CWD,
        "hello-from-tool",
    )
    # two model calls of 100/5 tokens in this turn, on top of the first turn's
    [usage] = [e.usage for e in ctx.events if isinstance(e, b.TokenUsageUpdated)]
    assert (usage.last.input_tokens, usage.last.output_tokens) == (200, 10)
    assert usage.total.input_tokens == 100 + 200 and usage.total.output_tokens == 5 + 10
    assert ctx.session_ids == [session.session_id]


async def test_shell_permission_accepted(nursery: trio.Nursery) -> None:
    host = ReplayHost("f1_acp_shell_allow_once", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "please run it", "accept")
    assert outcome == b.TurnOutcome("completed")
    [(ours, recorded)] = host.permission_answers
    assert ours == recorded == {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    [request] = ctx.approvals
    assert request.kind == "command" and request.cwd == CWD
    assert request.command == "touch acp-made.txt && echo touched"
    # The text before the tool is complete before the tool item starts (Gemini sends no
    # tool_call before asking: the item comes from the permission request).
    assert flow(ctx.events)[:6] == [
        ("started", "agentMessage"),
        ("text", "I will run a com"),
        ("text", "mand."),
        ("completed", "agentMessage", "I will run a command."),
        ("started", "commandExecution"),
        ("output", "touched"),
    ]
    [cmd] = started(ctx.events, CommandExecutionItem)
    assert request.item_id == cmd.id
    [cmd] = completed(ctx.events, CommandExecutionItem)
    assert cmd.status == "completed" and cmd.aggregated_output == "touched"
    assert_balanced(ctx.events)


async def test_shell_permission_declined(nursery: trio.Nursery) -> None:
    host = ReplayHost("f2_acp_shell_reject", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "please run it", "decline")
    assert outcome == b.TurnOutcome("completed")
    [(ours, recorded)] = host.permission_answers
    assert ours == recorded == {"outcome": {"outcome": "selected", "optionId": "cancel"}}
    # Gemini sends no update for a rejected tool: the item is closed declined by us.
    [cmd] = completed(ctx.events, CommandExecutionItem)
    assert cmd.status == "declined"
    # the model's next answer is a message of its own
    assert [m.text for m in completed(ctx.events, AgentMessageItem)] == [
        "I will run a command.",
        "Done.",
    ]
    assert_balanced(ctx.events)


async def test_permission_withdrawn_by_an_interrupt(nursery: trio.Nursery) -> None:
    host = ReplayHost("f12_acp_permission_cancelled_outcome", nursery)
    session = await open_session(host)
    _outcome, ctx = await run(session, "please run it", "wait")
    [(ours, recorded)] = host.permission_answers
    assert ours == recorded == {"outcome": {"outcome": "cancelled"}}
    assert ("session/cancel", {"sessionId": session.session_id}) in host.notified
    [cmd] = completed(ctx.events, CommandExecutionItem)
    assert cmd.status == "declined"  # it never ran
    assert_balanced(ctx.events)


async def test_edit_permission_shows_the_diff(nursery: trio.Nursery) -> None:
    host = ReplayHost("f3_acp_write_allow_always_then_again", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "write it", "acceptForSession")
    assert outcome == b.TurnOutcome("completed")
    [(ours, recorded)] = host.permission_answers
    # Gemini's "Allow for this session" would switch the whole session to autoEdit (it did in
    # this recording): threadline answers "Allow" and remembers the grant itself.
    assert recorded == {"outcome": {"outcome": "selected", "optionId": "proceed_always"}}
    assert ours == {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    [request] = ctx.approvals
    assert request.kind == "fileChange"
    [item] = started(ctx.events, FileChangeItem)
    assert request.item_id == item.id
    [change] = item.changes
    path = f"{CWD}/acp-notes.txt"
    assert change.path == path and kind(change.kind) == "add"
    assert "+hello from mock" in change.diff
    [done] = completed(ctx.events, FileChangeItem)
    assert done.status == "completed" and done.changes[0].path == path
    # the mode notice is not part of the answer
    assert ("warning", "gemini mode changed: autoEdit") in flow(ctx.events)
    assert all("MODE_UPDATE" not in (getattr(e, "delta", "") or "") for e in ctx.events)

    # the next write ran without asking: tool_call (no content yet) → tool_call_update
    outcome, ctx = await run(session, "write again")
    assert outcome == b.TurnOutcome("completed") and ctx.approvals == []
    [item] = started(ctx.events, FileChangeItem)
    # the path comes from the call's location (its title is prose: "Writing to …")
    assert [c.path for c in item.changes] == [f"{CWD}/acp-notes2.txt"]
    [done] = completed(ctx.events, FileChangeItem)
    assert done.status == "completed" and "+hello from mock" in done.changes[0].diff
    assert_balanced(ctx.events)


async def test_cancel_while_streaming(nursery: trio.Nursery) -> None:
    host = ReplayHost("f4_acp_cancel_while_streaming", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "go slow", bootstrap="ROLE")
    assert outcome == b.TurnOutcome("interrupted")
    [message] = completed(ctx.events, AgentMessageItem)
    assert message.text == "".join(f"slow chunk {i}. " for i in range(4))
    assert_balanced(ctx.events)
    # Gemini drops a first turn cancelled mid-stream: nothing to resume, the role not delivered
    assert ctx.session_ids == [] and ctx.bootstrap_marked == 0


async def test_cancel_during_an_approved_command(nursery: trio.Nursery) -> None:
    host = ReplayHost("f5_acp_cancel_during_shell", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "slow shell", "accept", bootstrap="ROLE")
    assert outcome == b.TurnOutcome("interrupted")
    [cmd] = completed(ctx.events, CommandExecutionItem)
    # Gemini reports the killed command as completed "Command cancelled by user.": it was cut
    # short, so it failed.
    assert cmd.status == "failed" and cmd.aggregated_output == "Command cancelled by user."
    assert_balanced(ctx.events)
    # a turn that got as far as a tool call stays in Gemini's conversation
    assert ctx.session_ids == [session.session_id] and ctx.bootstrap_marked == 1


async def test_api_error_fails_the_turn_readably(nursery: trio.Nursery) -> None:
    host = ReplayHost("f11_acp_http500", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "[[mock:err500]]", bootstrap="ROLE")
    assert outcome is not None and outcome.status == "failed" and outcome.error is not None
    assert outcome.error.message == "Gemini API error (500 INTERNAL): Internal error encountered."
    assert outcome.error.codex_error_info == "internalServerError"
    assert ctx.events == []
    # the failed prompt is not in Gemini's conversation: the role goes again next turn
    assert ctx.session_ids == [] and ctx.bootstrap_marked == 0


async def test_approval_policy_never_sets_yolo_mode(nursery: trio.Nursery) -> None:
    host = ReplayHost("f10_acp_yolo_mode_via_set_mode", nursery)
    session = await open_session(host, policy="never")
    outcome, ctx = await run(session, "please run it")  # no approval decisions scripted
    assert outcome == b.TurnOutcome("completed") and ctx.approvals == []
    # the "[MODE_UPDATE] yolo" sent while opening the session is not part of the turn
    assert [e for e in ctx.events if isinstance(e, b.Warning)] == []
    [cmd] = completed(ctx.events, CommandExecutionItem)
    assert cmd.status == "completed" and cmd.aggregated_output == "touched"
    assert_balanced(ctx.events)


async def test_tool_denied_by_policy(nursery: trio.Nursery) -> None:
    # plan mode: a lone failed tool_call_update, no tool_call before it
    host = ReplayHost("f15_acp_edit_in_plan_mode", nursery)
    session = await open_session(host)
    outcome, ctx = await run(session, "write it")
    assert outcome == b.TurnOutcome("completed")
    [item] = completed(ctx.events, FileChangeItem)
    assert item.status == "failed"
    assert_balanced(ctx.events)


async def test_session_load_replay_is_not_part_of_the_first_turn(nursery: trio.Nursery) -> None:
    # Gemini streams most of the history *after* answering session/load (reference §7.1: the
    # replayed messages can arrive even after the next prompt was sent). Here what it sent after
    # its answer trickles in 20 ms apart.
    tail = replay_after_load("f8_acp_load_session_next_minute")
    assert tail >= 4  # the two turns' user and agent messages at least
    host = ReplayHost("f8_acp_load_session_next_minute", nursery, load_tail=tail)
    sid = "00000000-0000-4000-8000-000000000001"  # (the recorder's stand-in)
    session = await open_session(host, resume=sid)
    assert session.session_id == sid
    outcome, ctx = await run(session, "after load")
    assert outcome == b.TurnOutcome("completed")
    [message] = completed(ctx.events, AgentMessageItem)
    assert message.text == "Answered after the load."
    assert [e for e in flow(ctx.events) if e[0] == "started"] == [("started", "agentMessage")]


def replay_after_load(name: str) -> int:
    """How many agent messages a recording has between the session/load answer and the next
    thing the client sent."""
    messages = load(name)
    load_id = next(m["id"] for d, m in messages if d == "c2a" and m.get("method") == "session/load")
    answer = next(i for i, (d, m) in enumerate(messages) if d == "a2c" and m.get("id") == load_id)
    count = 0
    for direction, _message in messages[answer + 1 :]:
        if direction == "c2a":
            break
        count += 1
    return count


def test_mapper_closes_text_before_a_tool_and_keeps_messages_apart() -> None:
    ids = iter(range(100))
    mapper = AcpTurnMapper(cwd="/w", backend_id="gemini", new_id=lambda: f"i{next(ids)}")

    def chunk(text: str) -> dict[str, Any]:
        return {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}

    mapper.feed(chunk("before "))
    mapper.feed(chunk("the tool"))
    mapper.feed(
        {
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "status": "in_progress",
            "title": "ls",
            "kind": "execute",
            "content": [{"type": "content", "content": {"type": "text", "text": "[cwd] (list)"}}],
        }
    )
    mapper.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "failed",
            "content": [{"type": "content", "content": {"type": "text", "text": "boom"}}],
        }
    )
    mapper.feed(chunk("after"))
    mapper.close_text()
    assert flow(mapper.take()) == [
        ("started", "agentMessage"),
        ("text", "before "),
        ("text", "the tool"),
        ("completed", "agentMessage", "before the tool"),
        ("started", "commandExecution"),
        ("output", "boom"),
        ("completed", "commandExecution", "failed"),
        ("started", "agentMessage"),
        ("text", "after"),
        ("completed", "agentMessage", "after"),
    ]
