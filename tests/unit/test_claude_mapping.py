"""The Claude stream-json mapping, replayed from the real CLI's stdout recorded in
tests/transcripts/claude (scripts/record-transcripts; the CLI version is in its manifest)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.transcripts import transcript
from threadline.backends import base as b
from threadline.backends.claude.mapping import ClaudeTurnMapper, structured_patch_diff
from threadline.protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    DynamicToolCallItem,
    FileChangeItem,
    PatchKindAdd,
    ReasoningItem,
)


def replay(
    scenario: str,
    decisions: dict[str, str] | None = None,
    turn: int = 0,
) -> tuple[list[b.BackendEvent], list[Any]]:
    """Feed the `turn`-th turn of a recorded stdout through a fresh mapper."""
    lines = [
        json.loads(x)
        for x in transcript("claude", f"{scenario}.jsonl").read_text().splitlines()
        if x.strip()
    ]
    turns: list[list[dict[str, Any]]] = [[]]
    for message in lines:
        turns[-1].append(message)
        if message.get("type") == "result":
            turns.append([])
    mapper = ClaudeTurnMapper(cwd="/work")
    mapper.decisions.update(decisions or {})
    events: list[b.BackendEvent] = []
    results = []
    for message in turns[turn]:
        if message.get("type") == "result":
            results.append(mapper.result(message))
        else:
            events.extend(mapper.feed(message))
    return events, results


def completed(events: list[b.BackendEvent]) -> list[Any]:
    return [e.item for e in events if isinstance(e, b.ItemCompleted)]


def test_streamed_text_deltas_concatenate_to_the_final_message() -> None:
    events, results = replay("01_plain_text_partial")
    started = [e.item for e in events if isinstance(e, b.ItemStarted)]
    assert len(started) == 1 and isinstance(started[0], AgentMessageItem)
    deltas = "".join(e.delta for e in events if isinstance(e, b.AgentMessageDelta))
    (final,) = completed(events)
    assert final.id == started[0].id
    assert final.text == deltas
    assert final.text.startswith("Streaming works:")
    assert results[0].status == "completed" and results[0].error is None
    assert results[0].usage is not None and results[0].usage.output_tokens > 0


def test_thinking_becomes_reasoning_with_deltas() -> None:
    events, _ = replay("10_thinking_text_tool")
    reasoning = [i for i in completed(events) if isinstance(i, ReasoningItem)]
    assert reasoning and reasoning[0].summary == ["Let me think about listing files."]
    deltas = "".join(e.delta for e in events if isinstance(e, b.ReasoningSummaryDelta))
    assert deltas == "Let me think about listing files."


def test_bash_allowed_completes_with_output_and_exit_code() -> None:
    events, results = replay("02b_bash_allow")
    cmd = [i for i in completed(events) if isinstance(i, CommandExecutionItem)]
    assert len(cmd) == 1
    assert cmd[0].command == "touch marker.txt && echo hi"
    assert cmd[0].status == "completed" and cmd[0].exit_code == 0
    assert cmd[0].aggregated_output == "hi"
    assert results[0].status == "completed"


def test_bash_denied_is_declined() -> None:
    events, _ = replay("02c_bash_deny")
    tool_id = next(
        e.item.id
        for e in events
        if isinstance(e, b.ItemStarted) and isinstance(e.item, CommandExecutionItem)
    )
    events, _ = replay("02c_bash_deny", decisions={tool_id: "decline"})
    (cmd,) = [i for i in completed(events) if isinstance(i, CommandExecutionItem)]
    assert cmd.status == "declined"


def test_bash_cut_off_by_an_interrupt_is_failed_not_rejected() -> None:
    # 04b: an allowed `sleep 30` interrupted mid-run; the CLI's tool_result is its stock
    # "The user doesn't want to proceed ... rejected" text, which must not reach the item.
    events, results = replay("04b_interrupt_during_tool")
    (cmd,) = [i for i in completed(events) if isinstance(i, CommandExecutionItem)]
    assert cmd.status == "failed"
    assert cmd.aggregated_output is None and cmd.exit_code is None
    assert results[0].status == "interrupted"


def test_failing_bash_parses_the_exit_code() -> None:
    events, _ = replay("16_tool_result_shapes")
    cmds = [i for i in completed(events) if isinstance(i, CommandExecutionItem)]
    failed = [c for c in cmds if c.status == "failed"]
    assert failed and failed[0].exit_code == 3


def test_write_then_edit_are_file_changes_with_diffs() -> None:
    events, _ = replay("07a_file_write_edit")
    changes = [i for i in completed(events) if isinstance(i, FileChangeItem)]
    assert len(changes) == 2
    write, edit = changes
    assert isinstance(write.changes[0].kind, PatchKindAdd)
    assert "+hello world" in write.changes[0].diff
    assert "-hello world" in edit.changes[0].diff and "+hello mock" in edit.changes[0].diff
    assert all(c.status == "completed" for c in changes)


@pytest.mark.parametrize(
    ("scenario", "status", "info", "needle"),
    [
        ("05a_http500_noretry", "failed", "internalServerError", "500"),
        ("05c_http401", "failed", "unauthorized", "Invalid API key"),
        ("14_max_turns", "failed", "other", "maximum number of turns"),
        ("04a_interrupt_control", "interrupted", None, None),
        ("04c_interrupt_pending_approval", "interrupted", None, None),
        ("02d_bash_deny_interrupt", "interrupted", None, None),
    ],
)
def test_turn_status_comes_from_the_result_line(
    scenario: str, status: str, info: str | None, needle: str | None
) -> None:
    events, results = replay(scenario)
    assert results[0].status == status
    if status == "failed":
        assert results[0].error is not None
        assert results[0].error.codex_error_info == info
        # the CLI's own words reach the user (in the message or its details)
        shown = results[0].error.message + (results[0].error.additional_details or "")
        assert needle in shown
        # the synthetic "API Error" assistant text is the turn's error, not an agent message
        assert not any(
            isinstance(i, AgentMessageItem) and "API Error" in i.text for i in completed(events)
        )
    else:
        assert results[0].error is None


def test_api_retry_is_a_retryable_error() -> None:
    events, _ = replay("05b_http500_retry2")
    retries = [e for e in events if isinstance(e, b.RetryableError)]
    assert len(retries) == 2
    assert retries[0].error.codex_error_info == "internalServerError"


def test_ask_user_question_and_generic_tools_are_dynamic_tool_calls() -> None:
    events, _ = replay("15_ask_user_question")
    tools = [
        e.item
        for e in events
        if isinstance(e, b.ItemStarted) and isinstance(e.item, DynamicToolCallItem)
    ]
    assert tools and tools[0].tool == "AskUserQuestion"


def test_structured_patch_to_unified_diff() -> None:
    diff = structured_patch_diff(
        "/w/a.txt",
        [{"oldStart": 1, "oldLines": 1, "newStart": 1, "newLines": 1, "lines": ["-a", "+b"]}],
    )
    assert diff == "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1,1 +1,1 @@\n-a\n+b\n"
    assert structured_patch_diff("x", []) is None
