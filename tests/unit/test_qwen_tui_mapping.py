"""qwen's dual output (`--json-file`, tui mode) as a turn's events: lines shaped as qwen 0.24.4
wrote them (measured against the fake API; see backends/qwen/tui_mapping.py)."""

from __future__ import annotations

from typing import Any

from threadline.backends import base as b
from threadline.backends.qwen.tui_mapping import QwenTuiMapper
from threadline.protocol import AgentMessageItem, CommandExecutionItem


def user(text: str) -> dict[str, Any]:
    return {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }


def stream(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stream_event", "event": event}


def text_message(msg_id: str, text: str) -> list[dict[str, Any]]:
    """One model call that answers `text` (streamed in one delta)."""
    block = {"type": "text", "text": text}
    return [
        stream({"type": "message_start", "message": {"id": msg_id, "content": []}}),
        stream({"type": "content_block_start", "index": 0, "content_block": block | {"text": ""}}),
        stream(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
        ),
        stream({"type": "content_block_stop", "index": 0}),
        {
            "type": "assistant",
            "message": {
                "id": msg_id,
                "content": [block],
                "usage": {"input_tokens": 100, "output_tokens": 7},
            },
        },
        stream({"type": "message_stop"}),
    ]


def shell_call(msg_id: str, call_id: str, command: str) -> list[dict[str, Any]]:
    use = {
        "type": "tool_use",
        "id": call_id,
        "name": "run_shell_command",
        "input": {"command": command},
    }
    return [
        stream({"type": "message_start", "message": {"id": msg_id, "content": []}}),
        stream({"type": "content_block_start", "index": 0, "content_block": use | {"input": {}}}),
        stream({"type": "content_block_stop", "index": 0}),
        {
            "type": "assistant",
            "message": {"id": msg_id, "content": [use], "stop_reason": "tool_use"},
        },
        stream({"type": "message_stop"}),
    ]


def shell_result(call_id: str, output: str, code: int) -> dict[str, Any]:
    content = (
        f"Command: x\nDirectory: (root)\nOutput: {output}\nError: (none)\nExit Code: {code}\n"
        "Signal: (none)\nProcess Group PGID: (none)"
    )
    block = {"type": "tool_result", "tool_use_id": call_id, "is_error": False, "content": content}
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def feed(mapper: QwenTuiMapper, lines: list[dict[str, Any]]) -> list[b.BackendEvent]:
    return [event for line in lines for event in mapper.feed(line)]


def test_lines_before_the_prompt_are_not_the_turns() -> None:
    mapper = QwenTuiMapper("/work")
    assert feed(mapper, text_message("old", "an earlier turn's")) == []
    events = feed(mapper, [user("hello"), *text_message("m1", "Hi there.")])
    [done] = [e for e in events if isinstance(e, b.ItemCompleted)]
    assert done.item == AgentMessageItem(id="m1-0", text="Hi there.")
    assert [type(e) for e in events] == [b.ItemStarted, b.AgentMessageDelta, b.ItemCompleted]
    assert mapper.caught_up("Hi there.") and not mapper.caught_up("something else")
    assert mapper.turn_usage is not None and mapper.turn_usage.output_tokens == 7


def test_a_shell_call_is_a_command_with_its_output_and_exit_code() -> None:
    mapper = QwenTuiMapper("/work")
    lines = [user("run it"), *shell_call("m1", "call_1", "echo made-it")]
    lines += [shell_result("call_1", "made-it\nsecond line", 0)]
    events = feed(mapper, lines)
    started, done = events
    assert isinstance(started, b.ItemStarted) and isinstance(done, b.ItemCompleted)
    item = done.item
    assert isinstance(item, CommandExecutionItem) and item.command == "echo made-it"
    assert (item.status, item.exit_code, item.aggregated_output) == (
        "completed",
        0,
        "made-it\nsecond line",
    )
    events = feed(
        mapper, [*shell_call("m2", "call_2", "false"), shell_result("call_2", "(empty)", 1)]
    )
    item = events[-1].item if isinstance(events[-1], b.ItemCompleted) else None
    assert isinstance(item, CommandExecutionItem)
    assert (item.status, item.exit_code, item.aggregated_output) == ("failed", 1, "")


def test_a_declined_call_completes_declined() -> None:
    mapper = QwenTuiMapper("/work")
    feed(mapper, [user("touch it"), *shell_call("m1", "call_1", "touch x")])
    mapper.decisions["call_1"] = "decline"
    [done] = mapper.declined()
    assert isinstance(done, b.ItemCompleted) and isinstance(done.item, CommandExecutionItem)
    assert done.item.status == "declined"
    assert mapper.declined() == []


def test_an_api_errors_text_is_not_an_agent_message() -> None:
    mapper = QwenTuiMapper("/work")
    events = feed(mapper, [user("hi"), *text_message("m1", "[API Error: 401 bad fake key]")])
    assert events == []
    assert mapper.last_text is None
