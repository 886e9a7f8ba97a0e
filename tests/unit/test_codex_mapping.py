"""The `codex exec --json` mapping, replayed from the real CLI's stdout recorded in
tests/transcripts/codex (`exec_*.jsonl`, scripts/record-transcripts): every event goes through
`CodexExecSession.handle_event`, exactly as the backend's process loop feeds it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from tests.transcripts import transcript
from threadline.backends import base as b
from threadline.backends.codex.exec import CodexExecSession, _error_info, _exec_item
from threadline.backends.codex.invocation import CodexCommand
from threadline.backends.registry import SPECS
from threadline.protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    FileChangeItem,
    McpToolCallItem,
    PatchKindAdd,
    PatchKindUpdate,
    ReasoningItem,
    ThreadTokenUsage,
    ToolRequestUserInputQuestion,
    TurnPlanStep,
    UnknownAction,
    WebSearchItem,
)

CWD = "/work/project"


class RecordingContext:
    """A `TurnContext` that records what the backend reports."""

    def __init__(self, turn_id: str = "turn-000000000001") -> None:
        self.thread_id = "thread-1"
        self.turn_id = turn_id
        self.log = __import__("logging").getLogger("test")
        self.events: list[b.BackendEvent] = []
        self.session_ids: list[str] = []
        self.bootstrapped = False

    def new_item_id(self) -> str:
        return f"new-{len(self.events)}"

    async def emit(self, event: b.BackendEvent) -> None:
        self.events.append(event)

    async def request_approval(self, request: b.ApprovalRequest) -> b.ApprovalDecision:
        raise AssertionError("exec mode never asks for approvals")

    async def request_user_input(
        self, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        raise AssertionError("exec mode never asks questions")

    async def set_backend_session_id(self, session_id: str) -> None:
        self.session_ids.append(session_id)

    async def mark_role_bootstrap_applied(self) -> None:
        self.bootstrapped = True


def stdout_events(scenario: str) -> list[dict[str, Any]]:
    lines = transcript("codex", f"{scenario}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def session(**settings: Any) -> CodexExecSession:
    return CodexExecSession(
        b.SessionSettings(thread_id="t", cwd=CWD, mode="exec", **settings), CodexCommand("codex")
    )


async def replay(
    scenario: str, exec_session: CodexExecSession | None = None, turn_id: str = "turn-aaaa0001"
) -> tuple[RecordingContext, b.TurnOutcome | None, CodexExecSession]:
    """Feed a recorded stdout through `handle_event`; stop at the outcome, like the loop."""
    exec_session = exec_session or session()
    ctx = RecordingContext(turn_id)
    prefix = f"{turn_id[-12:]}-"
    outcome = None
    for event in stdout_events(scenario):
        outcome = await exec_session.handle_event(event, prefix, ctx)
        if outcome is not None:
            break
    return ctx, outcome, exec_session


def items(ctx: RecordingContext, kind: type[Any]) -> list[Any]:
    return [e.item for e in ctx.events if isinstance(e, kind)]


def usages(ctx: RecordingContext) -> list[ThreadTokenUsage]:
    return [e.usage for e in ctx.events if isinstance(e, b.TokenUsageUpdated)]


# -- replays ---------------------------------------------------------------------------------------


async def test_plain_answer() -> None:
    ctx, outcome, exec_session = await replay("exec_a_plain")
    assert outcome == b.TurnOutcome("completed")
    # thread.started: the id `exec resume` needs, recorded for the thread
    assert ctx.session_ids == ["00000000-0000-4000-8000-000000000001"]  # (the recorder's stand-in)
    assert exec_session.settings.backend_session_id == ctx.session_ids[0]
    # the message only ever arrives completed (the engine turns it into one delta)
    assert items(ctx, b.ItemStarted) == []
    [message] = items(ctx, b.ItemCompleted)
    assert isinstance(message, AgentMessageItem)
    assert message.text == "Hello! You said hello."
    [usage] = usages(ctx)
    assert usage.total == usage.last
    assert (usage.total.input_tokens, usage.total.output_tokens) == (100, 20)
    assert usage.total.total_tokens == 120


async def test_command_execution_started_and_completed() -> None:
    ctx, outcome, _ = await replay("exec_b1_shell_bypass")
    assert outcome == b.TurnOutcome("completed")
    [started] = items(ctx, b.ItemStarted)
    completed = items(ctx, b.ItemCompleted)
    assert [type(i) for i in completed] == [CommandExecutionItem, AgentMessageItem]
    command = completed[0]
    command_line = "/bin/bash -c 'echo bypass-ok > out.txt && cat out.txt'"
    assert isinstance(started, CommandExecutionItem)
    # exec's per-process ids, made unique per turn (`<turn id tail>-item_N`)
    assert started.id == command.id == "urn-aaaa0001-item_0"
    assert started.status == "inProgress" and started.exit_code is None
    assert started.command == command.command == command_line
    assert started.cwd == CWD and started.command_actions == [UnknownAction(command=command_line)]
    assert command.status == "completed" and command.exit_code == 0
    assert command.aggregated_output == "bypass-ok\n"
    # the message has its own id (exec numbers items per process)
    assert completed[1].id == "urn-aaaa0001-item_1"


async def test_sandboxed_failure_is_still_a_completed_command() -> None:
    ctx, _, _ = await replay("exec_b2_shell_readonly")
    [command] = [i for i in items(ctx, b.ItemCompleted) if isinstance(i, CommandExecutionItem)]
    assert command.status == "completed" and command.exit_code == 0
    assert "Read-only file system" in (command.aggregated_output or "")


async def test_apply_patch_is_a_file_change() -> None:
    ctx, outcome, _ = await replay("exec_h_apply_patch")
    assert outcome == b.TurnOutcome("completed")
    [started] = items(ctx, b.ItemStarted)
    [change, _message] = items(ctx, b.ItemCompleted)
    assert isinstance(started, FileChangeItem) and isinstance(change, FileChangeItem)
    assert started.id == change.id
    assert (started.status, change.status) == ("inProgress", "completed")
    [update] = change.changes
    assert update.path == "<WORK>/added.txt"
    assert update.kind == PatchKindAdd() and update.diff == ""  # exec shows no diff


async def test_reasoning_then_answer() -> None:
    ctx, _, _ = await replay("exec_h_reasoning")
    reasoning, message = items(ctx, b.ItemCompleted)
    assert isinstance(reasoning, ReasoningItem)
    assert reasoning.summary == ["Thinking about the request step by step."]
    assert isinstance(message, AgentMessageItem) and message.text == "Done."


async def test_interrupted_run_has_no_outcome() -> None:
    # SIGINT while `sleep` runs: the command was announced and nothing else; run_turn then
    # fails on the exit (the engine closes the command item).
    ctx, outcome, _ = await replay("exec_d_SIGINT_during_command")
    assert outcome is None
    [started] = items(ctx, b.ItemStarted)
    assert isinstance(started, CommandExecutionItem) and started.status == "inProgress"
    assert items(ctx, b.ItemCompleted) == []
    ctx, outcome, _ = await replay("exec_d_SIGINT_streaming")
    assert outcome is None and items(ctx, b.ItemCompleted) == []


@pytest.mark.parametrize(
    ("scenario", "message", "info"),
    [
        (
            "exec_e_http_401",
            "unexpected status 401 Unauthorized: fake forced HTTP 401",
            "unauthorized",
        ),
        (
            "exec_e_http_429",
            "exceeded retry limit, last status: 429 Too Many Requests",
            {"responseTooManyFailedAttempts": {"httpStatusCode": 429}},
        ),
        ("exec_e_http_500", "experiencing high demand", "internalServerError"),
        (
            "exec_e_missing_env_key",
            "Missing environment variable: `FAKE_OPENAI_KEY`.",
            "unauthorized",
        ),
        ("exec_e_response_failed_event", "stream disconnected before completion: fake", "other"),
        (
            "exec_e_unreachable_bounded_retries",
            "Connection failed: error sending request",
            {"httpConnectionFailed": {"httpStatusCode": None}},
        ),
    ],
)
async def test_failures(scenario: str, message: str, info: Any) -> None:
    ctx, outcome, exec_session = await replay(scenario)
    assert outcome is not None and outcome.status == "failed"
    assert outcome.error is not None
    # Codex's own words reach the user (in the message, or its details when threadline says
    # what to do instead)
    shown = [outcome.error.message, outcome.error.additional_details]
    assert any(message in (text or "") for text in shown), outcome.error
    assert outcome.error.codex_error_info == info
    # the `error` event that precedes turn.failed is the same failure, not a retry notice
    assert not [e for e in ctx.events if isinstance(e, b.RetryableError)]
    assert exec_session.last_error in shown


@pytest.mark.parametrize(
    ("scenario", "says"),
    [
        ("exec_e_http_401", "Codex refused the credentials (HTTP 401 from http://127.0.0.1:"),
        ("exec_e_missing_env_key", "Codex has no credentials for its model API: "),
    ],
)
async def test_credential_failures_say_what_to_do(scenario: str, says: str) -> None:
    _, outcome, _ = await replay(scenario)
    assert outcome is not None and outcome.error is not None
    assert outcome.error.message.startswith(says), outcome.error
    assert outcome.error.message.endswith(f": {SPECS['codex'].login_fix}")


async def test_retries_are_reported_as_retryable_errors() -> None:
    ctx, outcome, _ = await replay("exec_e_http_500_stream_retries")
    retries = [e.error for e in ctx.events if isinstance(e, b.RetryableError)]
    assert [r.message[:17] for r in retries] == [f"Reconnecting... {n}" for n in range(1, 6)]
    assert {r.codex_error_info for r in retries} == {"internalServerError"}
    assert outcome is not None and outcome.status == "failed"
    assert outcome.error is not None and "high demand" in outcome.error.message
    # an unreachable provider with unbounded retries: notices, and never an outcome (the
    # recording stops after two)
    ctx, outcome, _ = await replay("exec_e_unreachable")
    assert outcome is None
    retries = [e.error for e in ctx.events if isinstance(e, b.RetryableError)]
    assert len(retries) == 2 and all("waiting for network" in r.message for r in retries)


async def test_resume_usage_is_cumulative_and_last_is_the_difference() -> None:
    # One session, two turns: exec_a_plain (100/20), then `exec resume` of that thread
    # (exec_c_resume), whose turn.completed reports the thread's cumulative 200/40.
    ctx1, _, exec_session = await replay("exec_a_plain", turn_id="turn-aaaa0001")
    ctx2, outcome, _ = await replay("exec_c_resume", exec_session, turn_id="turn-bbbb0002")
    assert outcome == b.TurnOutcome("completed")
    assert ctx2.session_ids == ctx1.session_ids  # resume keeps the thread id
    [usage] = usages(ctx2)
    assert (usage.total.input_tokens, usage.total.output_tokens) == (200, 40)
    assert (usage.last.input_tokens, usage.last.output_tokens) == (100, 20)
    assert usage.last.total_tokens == 120 and usage.total.total_tokens == 240
    assert usage.last.cache_write_input_tokens == 0
    # item ids stay unique across turns although exec restarts its counter at item_0
    [first] = items(ctx1, b.ItemCompleted)
    [second] = items(ctx2, b.ItemCompleted)
    assert first.id != second.id and first.id.endswith("item_0") and second.id.endswith("item_0")


async def test_warning_items_and_unknown_events() -> None:
    exec_session = session()
    ctx = RecordingContext()
    events = [
        {
            "type": "item.completed",
            "item": {"id": "item_0", "type": "error", "message": "heads up"},
        },
        {"type": "something.new", "payload": 1},
        {"type": "item.completed", "item": {"id": "item_1", "type": "brand_new_item"}},
        {"type": "error", "message": "fatal soon"},
    ]
    for event in events:
        assert await exec_session.handle_event(event, "p-", ctx) is None
    assert ctx.events == [b.Warning("heads up")]
    outcome = await exec_session.handle_event({"type": "turn.failed"}, "p-", ctx)
    assert outcome is not None and outcome.error is not None
    assert outcome.error.message == "fatal soon"  # turn.failed without a message


# -- items the transcripts do not cover (shapes from codex-rs/exec/src/exec_events.rs) -------------


def test_other_item_kinds() -> None:
    todo = _exec_item(
        {
            "id": "item_3",
            "type": "todo_list",
            "items": [{"text": "a", "completed": True}, {"text": "b", "completed": False}],
        },
        "p-",
        CWD,
    )
    assert todo == [
        TurnPlanStep(step="a", status="completed"),
        TurnPlanStep(step="b", status="pending"),
    ]
    search = _exec_item({"id": "item_4", "type": "web_search", "query": "trio"}, "p-", CWD)
    assert isinstance(search, WebSearchItem) and search.query == "trio" and search.id == "p-item_4"
    mcp = _exec_item(
        {
            "id": "item_5",
            "type": "mcp_tool_call",
            "server": "s",
            "tool": "t",
            "arguments": {"x": 1},
            "result": None,
            "error": {"message": "boom"},
            "status": "failed",
        },
        "p-",
        CWD,
    )
    assert isinstance(mcp, McpToolCallItem) and mcp.status == "failed"
    assert mcp.error is not None and mcp.error.message == "boom"
    update = _exec_item(
        {
            "id": "item_6",
            "type": "file_change",
            "changes": [{"path": "/a", "kind": "update"}],
            "status": "failed",
        },
        "p-",
        CWD,
    )
    assert isinstance(update, FileChangeItem) and update.status == "failed"
    assert update.changes[0].kind == PatchKindUpdate()
    declined = _exec_item(
        {"id": "item_7", "type": "command_execution", "command": "x", "status": "declined"},
        "p-",
        CWD,
    )
    assert isinstance(declined, CommandExecutionItem) and declined.status == "declined"


def test_error_info_texts() -> None:
    assert _error_info("unexpected status 503 Service Unavailable: x, url: u") == {
        "httpConnectionFailed": {"httpStatusCode": 503}
    }
    assert _error_info("Reconnecting... 2/5 (We are currently experiencing high demand)") == (
        "internalServerError"
    )
    assert _error_info("something else entirely") == "other"


# -- argv ------------------------------------------------------------------------------------------


def test_argv_follows_policy_sandbox_and_resume() -> None:
    argv = session().argv()
    assert argv[:3] == ["codex", "exec", "--json"]
    assert argv[argv.index("-s") + 1] == "read-only"  # the default: nothing can be written
    assert "--dangerously-bypass-approvals-and-sandbox" not in argv
    assert argv[6:8] == ["--disable", "unbounded_connection_retries"]
    assert argv[-1] == "-"  # the prompt comes from stdin
    argv = session(approval_policy="never", developer_instructions='say "hi"').argv()
    assert "--dangerously-bypass-approvals-and-sandbox" in argv and "-s" not in argv
    assert argv[argv.index("-c") + 1] == 'developer_instructions="say \\"hi\\""'
    argv = session(sandbox="workspace-write", backend_session_id="abc").argv()
    assert argv[argv.index("-s") + 1] == "workspace-write"
    assert argv[-3:] == ["resume", "abc", "-"]
