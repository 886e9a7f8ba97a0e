"""The thread's MCP servers (`config.mcp_servers`) with the real `claude` CLI: it gets them by
`--mcp-config`, its calls of their tools are `mcpToolCall` items, asked for unless the policy
is `never`, and a server that fails to start is a `warning`.

The server is tests/fakes/mcp_server.py (each call logged to $MCP_TEST_LOG); the fake model
calls its tools by claude's names, `mcp__<server>__<tool>`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import Rule, ToolUse
from tests.support.client import Message, notifications
from tests.support.events import (
    agent_text,
    items_completed,
    items_started,
    requests_in,
    resolved_ids,
    status,
    turn,
)
from tests.support.mcp import logged_calls, server_entry, servers

pytestmark = pytest.mark.e2e

SECRET = "mcp-SECRET-5555-never-log-me"


def tool(tool_name: str, **arguments: Any) -> ToolUse:
    return ToolUse(f"mcp__srv__{tool_name}", arguments)


def answer_tool(decision: str, seen: list[Message]) -> Callable[[Message], Any]:
    def on_request(message: Message) -> Any:
        assert message["method"] == "item/tool/requestApproval", message
        seen.append(message)
        return {"decision": decision}

    return on_request


def result_texts(results: list[dict[str, Any]]) -> str:
    return json.dumps([r.get("content") for r in results])


# -- a call asked for, accepted and declined ------------------------------------------------------


async def test_mcp_call_asks_then_runs_or_not(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    """untrusted: accept → the tool runs, its result goes to the model and into a completed
    mcpToolCall item; decline → it never runs; then a plain second turn."""
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(
        Rule("please echo", [tool("echo", text="hello mcp"), "Echoed."]),
        Rule("try again", [tool("echo", text="not allowed"), "Not echoed."]),
        Rule("just talk", ["Plain answer."]),
    )
    config = {"mcp_servers": servers(log)}
    seen: list[Message] = []
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="untrusted", config=config)
        t, events = await turn(srv, tid, "please echo", answer_tool("accept", seen))
        assert status(t) == "completed" and agent_text(events) == "Echoed."
        [request] = requests_in(events)
        [started] = items_started(events, "mcpToolCall")
        assert started["server"] == "srv" and started["tool"] == "echo", started
        assert started["arguments"] == {"text": "hello mcp"}
        assert request["params"]["itemId"] == started["id"]
        assert request["params"]["arguments"] == {"text": "hello mcp"}
        assert request["id"] in resolved_ids(events)
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "completed" and item.get("error") is None, item
        assert "echo: hello mcp" in json.dumps(item["result"]["content"])
        assert "echo: hello mcp" in result_texts(env.fake.tool_results())
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hello mcp"}}]

        t, events = await turn(srv, tid, "try again", answer_tool("decline", seen))
        assert status(t) == "completed" and agent_text(events) == "Not echoed."
        assert len(seen) == 2
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "failed" and item["error"]["message"], item
        assert len(logged_calls(log)) == 1  # the declined call never reached the server

        t, events = await turn(srv, tid, "just talk")
        assert status(t) == "completed" and agent_text(events) == "Plain answer."


async def test_mcp_call_asks_under_on_request(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(Rule("please echo", [tool("echo", text="x"), "Not echoed."]))
    seen: list[Message] = []
    async with env.server(nursery) as srv:
        config = {"mcp_servers": servers(log)}
        tid = await env.open_thread(srv, approvalPolicy="on-request", config=config)
        t, events = await turn(srv, tid, "please echo", answer_tool("decline", seen))
        assert status(t) == "completed"
    assert [m["params"]["tool"] for m in seen] == ["mcp__srv__echo"]
    [item] = items_completed(events, "mcpToolCall")
    assert item["status"] == "failed"
    assert logged_calls(log) == []


# -- failures -------------------------------------------------------------------------------------


async def test_mcp_tool_error_and_server_crash(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    """A tool error and a server that dies mid-call are failed items; the thread goes on."""
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(
        Rule("make it fail", [tool("fail", text="on purpose"), "It failed."]),
        Rule("make it crash", [tool("crash", text="now"), "It crashed."]),
        Rule("still there", ["Still here."]),
    )
    async with env.server(nursery) as srv:
        config = {"mcp_servers": servers(log)}
        tid = await env.open_thread(srv, approvalPolicy="never", config=config)
        t, events = await turn(srv, tid, "make it fail")  # (never: no request)
        assert status(t) == "completed" and agent_text(events) == "It failed."
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "failed" and item["tool"] == "fail", item
        assert "fail" in item["error"]["message"] and item.get("result") is None

        t, events = await turn(srv, tid, "make it crash")
        assert status(t) == "completed" and agent_text(events) == "It crashed."
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "failed" and item["error"]["message"], item

        t, events = await turn(srv, tid, "still there")
        assert status(t) == "completed" and agent_text(events) == "Still here."
    assert [c["tool"] for c in logged_calls(log)] == ["fail", "crash"]


@pytest.mark.parametrize("mode", ["stream", "print"])
async def test_mcp_server_that_fails_to_start_is_a_warning(
    nursery: trio.Nursery, claude_env: ClaudeEnv, mode: str
) -> None:
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(Rule("hello", ["Hello anyway."]), Rule("again", ["Again."]))
    broken = server_entry(log, MCP_TEST_EXIT_AT_START="no database here")
    config = {"mode": mode, "mcp_servers": {"broken": broken, **servers(log)}}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config=config)
        t, events = await turn(srv, tid, "hello")
        assert status(t) == "completed" and agent_text(events) == "Hello anyway."
        [warning] = [w["params"]["message"] for w in notifications(events, "warning")]
        assert "'broken'" in warning and "failed to start" in warning, warning
        if mode == "stream":  # claude's reason (only its mcp_status control request has it)
            assert "Connection closed" in warning, warning
        t, events = await turn(srv, tid, "again")  # reported once per thread
        assert status(t) == "completed" and notifications(events, "warning") == []


# -- a secret by reference ---------------------------------------------------------------------


def _without_tool_output(blob: str) -> str:
    """`blob` (JSON lines) without the mcpToolCall items' results: the tool's own output,
    which here is the secret on purpose."""
    out = []
    for line in blob.splitlines():
        out.append(line if "mcpToolCall" not in line else line.split('"result"')[0])
    return "\n".join(out)


async def test_mcp_secret_by_env_reference_stays_out_of_state_and_logs(
    nursery: trio.Nursery, claude_env: ClaudeEnv, tmp_path: Path
) -> None:
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(Rule("show the secret", [tool("env", name="MY_SECRET"), "Got it."]))
    log_file = tmp_path / "threadline.log"
    extra = {
        "MY_SECRET": SECRET,
        "THREADLINE_LOG_LEVEL": "DEBUG",
        "THREADLINE_LOG_FILE": str(log_file),
    }
    config = {"mcp_servers": {"srv": {**server_entry(log), "env_vars": ["MY_SECRET"]}}}
    async with env.server(nursery, **extra) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", config=config)
        t, events = await turn(srv, tid, "show the secret")
        assert status(t) == "completed"
    [item] = items_completed(events, "mcpToolCall")
    assert SECRET in json.dumps(item["result"]), item  # it reached the server
    assert SECRET in result_texts(env.fake.tool_results())
    assert "started pid" in log_file.read_text()  # (DEBUG: the CLI's argv is logged)
    assert SECRET not in srv.stderr_text and SECRET not in log_file.read_text()
    raw = b"\n".join(srv.raw_lines).decode(errors="replace")
    assert SECRET not in _without_tool_output(raw)
    record = env.thread_record(tid)
    assert record["settings"]["config"]["mcp_servers"]["srv"]["env_vars"] == ["MY_SECRET"], record
    for path in env.home.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert SECRET not in _without_tool_output(text), path


# -- print mode ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["untrusted", "never"])
async def test_print_mode_mcp_calls_follow_the_policy(
    nursery: trio.Nursery, claude_env: ClaudeEnv, policy: str
) -> None:
    """`claude -p` has no approval channel: under `untrusted` the CLI denies the call (it
    never runs), under `never` it runs."""
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(Rule("please echo", [tool("echo", text="printed"), "Done."]))
    config = {"mode": "print", "mcp_servers": servers(log)}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy=policy, config=config)
        t, events = await turn(srv, tid, "please echo")  # never a request
        assert status(t) == "completed" and agent_text(events) == "Done."
    [item] = items_completed(events, "mcpToolCall")
    assert (item["server"], item["tool"]) == ("srv", "echo"), item
    if policy == "never":
        assert item["status"] == "completed", item
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "printed"}}]
    else:
        assert item["status"] == "failed", item
        assert logged_calls(log) == []
