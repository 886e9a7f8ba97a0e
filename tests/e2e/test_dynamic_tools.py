"""Client-defined tools (`dynamicTools`) with the real CLIs: the fake model calls the tool by
the CLI's own name for it, the CLI reaches threadline's tool host through the bridge, the
client answers `item/tool/call`, and the answer is what the model gets back. The call is one
`dynamicToolCall` item (no `mcpToolCall` of the CLI's own), and it runs without an approval:
the client answering it is the decision."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.codex_env import CodexEnv
from tests.e2e.gemini_env import GeminiEnv
from tests.fakes import anthropic, gemini, openai_responses
from tests.support.cli_env import CliEnv
from tests.support.client import Message
from tests.support.events import (
    agent_text,
    items_completed,
    items_started,
    requests_in,
    status,
    turn,
)
from tests.support.mcp import interrupt_held_call, tool_answer

pytestmark = pytest.mark.e2e

LOOKUP = {
    "name": "lookup",
    "description": "Look a word up in the team's glossary.",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
}


def answering(text: str, success: bool = True) -> Any:
    def on_request(message: Message) -> Any:
        assert message["method"] == "item/tool/call", message  # (no approval is asked)
        return tool_answer(text, success)

    return on_request


def check_call(events: list[Any], arguments: dict[str, Any], status_: str) -> dict[str, Any]:
    [call] = requests_in(events, "item/tool/call")
    assert call["params"]["tool"] == "lookup" and call["params"]["arguments"] == arguments
    [started] = items_started(events, "dynamicToolCall")
    [item] = items_completed(events, "dynamicToolCall")
    assert started["id"] == item["id"] == call["params"]["callId"]
    assert item["status"] == status_, item
    assert items_started(events, "mcpToolCall") == []
    assert requests_in(events, "item/tool/requestApproval") == []
    return item


async def answered_then_failed(
    nursery: trio.Nursery,
    env: CliEnv[Any],
    call: Any,
    rule: Callable[[str, list[Any]], Any],
    tool_results: Callable[[], list[dict[str, Any]]],
    **thread: Any,
) -> None:
    """Two turns, each calling the tool (`call`, in the fake model's `rule`): answered, then
    failed; the model gets each answer (its last `tool_results`), and the thread goes on."""
    env.script(rule("look it up", [call, "Found it."]), rule("once more", [call, "Not found."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="untrusted", dynamicTools=[LOOKUP], **thread
        )
        t, events = await turn(srv, tid, "look it up", answering("trio: structured concurrency"))
        assert status(t) == "completed" and agent_text(events) == "Found it.", events
        check_call(events, {"q": "trio"}, "completed")
        assert "trio: structured concurrency" in json.dumps(tool_results())
        # a failed answer reaches the model as a failed result; the thread goes on
        t, events = await turn(srv, tid, "once more", answering("glossary offline", success=False))
        assert status(t) == "completed" and agent_text(events) == "Not found.", events
        check_call(events, {"q": "trio"}, "failed")
        assert "glossary offline" in json.dumps(tool_results())


async def test_claude(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    call = anthropic.ToolUse("mcp__threadline__lookup", {"q": "trio"})
    await answered_then_failed(nursery, env, call, anthropic.Rule, env.fake.tool_results)
    [result] = env.fake.tool_results()
    assert result.get("is_error") is True


@pytest.mark.parametrize("mode", ["app-server", "exec"])
async def test_codex(nursery: trio.Nursery, codex_env: CodexEnv, mode: str) -> None:
    env = codex_env
    call = openai_responses.FunctionCall("lookup", {"q": "trio"}, namespace="mcp__threadline")
    results = env.fake.function_outputs
    await answered_then_failed(
        nursery, env, call, openai_responses.Rule, results, config={"mode": mode}
    )


@pytest.mark.parametrize("mode", ["acp", "headless"])
async def test_gemini(nursery: trio.Nursery, gemini_env: GeminiEnv, mode: str) -> None:
    env = gemini_env
    call = gemini.FunctionCall("mcp_threadline_lookup", {"q": "trio"})
    results = env.fake.function_responses
    await answered_then_failed(nursery, env, call, gemini.Rule, results, config={"mode": mode})


async def test_claude_interrupt_while_the_client_holds_a_call(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    """The client never answers; turn/interrupt withdraws the request (serverRequest/resolved),
    the call's item ends, the turn is interrupted, and the thread's next call works."""
    env = claude_env
    call = anthropic.ToolUse("mcp__threadline__lookup", {"q": "slow"})
    env.script(
        anthropic.Rule("look it up", [call, "Found it."]),
        anthropic.Rule("again", [call, "Found it again."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, dynamicTools=[LOOKUP])
        events = await interrupt_held_call(srv, tid, "look it up")
        [item] = items_completed(events, "dynamicToolCall")
        assert item["status"] == "failed", item
        t, events = await turn(srv, tid, "again", answering("trio"))
        assert status(t) == "completed" and agent_text(events) == "Found it again.", events
