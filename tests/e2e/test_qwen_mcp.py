"""The thread's MCP servers (`config.mcp_servers`) on the real `qwen --acp`: passed in
`session/new`; qwen names their tools `mcp__<server>__<tool>` (and offers them through its
`tool_search` tool; the fake model calls them by name). The test server is
tests/fakes/mcp_server.py.

qwen starts a session's servers after answering `session/new`: each test's first turn is a
plain one, and `wait_connected` waits until qwen knows the tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.qwen_env import QwenEnv
from tests.fakes.openai_chat import Rule, ToolCall
from tests.support.client import ServerProcess, notifications
from tests.support.events import (
    agent_text,
    answer_by_method,
    decide,
    items_started,
    requests_in,
    turn,
)
from tests.support.mcp import (
    logged_calls,
    one_mcp_item,
    server_entry,
    servers,
    tool_answer,
)

pytestmark = pytest.mark.e2e

TOOL_APPROVAL = "item/tool/requestApproval"
BROKEN = server_entry(None, MCP_TEST_EXIT_AT_START="broken on purpose")


def server_config(log: Path) -> dict[str, Any]:
    """The test server as "srv" (its calls logged to `log`), and one that fails to start."""
    return {**servers(log), "broken": BROKEN}


def script(env: QwenEnv) -> None:
    env.script(
        Rule("hello", ["Hello."]),
        Rule("echo please", [ToolCall("mcp__srv__echo", {"text": "hi"}), "Echoed."]),
        Rule("echo again", [ToolCall("mcp__srv__echo", {"text": "again"}), "Echoed again."]),
        Rule("fail please", [ToolCall("mcp__srv__fail", {"text": "x"}), "It failed."]),
        Rule("crash please", [ToolCall("mcp__srv__crash", {"text": "x"}), "It crashed."]),
        Rule("look it up", [ToolCall("mcp__threadline__lookup", {"q": "x"}), "Looked."]),
        Rule("after", ["Still here."]),
    )


async def first_turn(srv: ServerProcess, tid: str) -> list[Any]:
    """A plain turn (qwen starts the servers meanwhile), then time for them to connect."""
    t, events = await turn(srv, tid, "hello")
    assert t["status"] == "completed", t
    await trio.sleep(3)
    return events


async def test_qwen_mcp_asks_first_then_runs(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="untrusted", config={"mcp_servers": server_config(log)}
        )
        events = await first_turn(srv, tid)
        t, more = await turn(
            srv, tid, "echo please", answer_by_method({TOOL_APPROVAL: decide("decline")})
        )
        assert t["status"] == "completed", t
        warnings = [e["params"]["message"] for e in notifications(events + more, "warning")]
        assert any("broken" in w for w in warnings), warnings
        [ask] = requests_in(more)
        started, item = one_mcp_item(more)
        assert ask["method"] == TOOL_APPROVAL and ask["params"]["itemId"] == started["id"]
        assert ask["params"]["tool"] == "mcp__srv__echo" and ask["params"]["arguments"] == {
            "text": "hi"
        }
        assert item["status"] == "failed" and "declined" in item["error"]["message"], item
        assert logged_calls(log) == []

        on_request = answer_by_method({TOOL_APPROVAL: decide("accept")})
        t, events = await turn(srv, tid, "echo again", on_request)
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["status"] == "completed" and item["arguments"] == {"text": "again"}, item
        assert "echo: again" in json.dumps(item["result"]["content"])
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "again"}}]
        assert agent_text(events) == "Echoed again."


async def test_qwen_mcp_never_fail_crash(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={"mcp_servers": server_config(log)}
        )
        await first_turn(srv, tid)
        t, events = await turn(srv, tid, "echo please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "echo" and item["status"] == "completed", item
        assert "echo: hi" in json.dumps(env.fake.tool_results(-1))

        t, events = await turn(srv, tid, "fail please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "fail" and item["status"] == "failed", item

        t, events = await turn(srv, tid, "crash please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "crash" and item["status"] == "failed", item

        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still here.", t


async def test_qwen_dynamic_tool_runs_unasked(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    script(env)
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tool = {"name": "lookup", "description": "Look a thing up.", "inputSchema": schema}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="untrusted", dynamicTools=[tool])
        await first_turn(srv, tid)
        on_request = answer_by_method({"item/tool/call": lambda _m: tool_answer("found: x")})
        t, events = await turn(srv, tid, "look it up", on_request)
        assert t["status"] == "completed", t
        assert [r["method"] for r in requests_in(events)] == ["item/tool/call"]
        kinds = [i["type"] for i in items_started(events) if "ool" in i["type"]]
        assert kinds == ["dynamicToolCall"], kinds
        assert "found: x" in json.dumps(env.fake.tool_results(-1))
