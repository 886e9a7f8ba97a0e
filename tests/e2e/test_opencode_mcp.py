"""The thread's MCP servers (`config.mcp_servers`) on the real `opencode` CLI, in both modes:
`opencode acp` takes them in `session/new`, `opencode run` in OPENCODE_CONFIG_CONTENT. The
test server is tests/fakes/mcp_server.py; OpenCode offers its tools to the model as
`<server>_<tool>` and the fake model calls them by that name.

OpenCode's default permission lets every tool run: threadline's permission config makes every
tool that is not read-only ask unless the approval policy is `never` (ACP: the client is
asked; `opencode run`, which cannot ask, refuses the call).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tests.e2e.opencode_env import OpenCodeEnv
from tests.fakes.openai_chat import Rule, ToolCall
from tests.support.client import notifications
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
RUN = {"mode": "run"}
SECRET = "s3cr3t-value-4711"
BROKEN = server_entry(None, MCP_TEST_EXIT_AT_START="broken on purpose")


def mcp_call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(f"srv_{tool}", arguments)


def script(env: OpenCodeEnv) -> None:
    env.script(
        Rule("echo please", [mcp_call("echo", text="hi"), "Echoed."]),
        Rule("echo again", [mcp_call("echo", text="again"), "Echoed again."]),
        Rule("fail please", [mcp_call("fail", text="x"), "It failed."]),
        Rule("crash please", [mcp_call("crash", text="x"), "It crashed."]),
        Rule("secret please", [mcp_call("env", name="MY_SECRET"), "Got it."]),
        Rule("after", ["Still here."]),
    )


# -- ACP -------------------------------------------------------------------------------------------


async def test_acp_mcp_echo_fail_crash(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    """approvalPolicy never: the tool runs unasked; results, errors, a crashed server."""
    env = opencode_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={"mcp_servers": servers(log)}
        )
        t, events = await turn(srv, tid, "echo please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "echo" and item["arguments"] == {"text": "hi"}, item
        assert item["status"] == "completed", item
        assert item["result"]["content"] == [{"type": "text", "text": "echo: hi"}], item
        # OpenCode's name for it, and the result in the model's next request
        assert "srv_echo" in env.fake.model_requests[0].tool_names
        assert [r["content"] for r in env.fake.tool_results(-1)] == ["echo: hi"]
        assert agent_text(events) == "Echoed."
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hi"}}]

        t, events = await turn(srv, tid, "fail please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "fail" and item["status"] == "failed", item
        assert item["error"]["message"], item

        t, events = await turn(srv, tid, "crash please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "crash" and item["status"] == "failed", item

        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still here.", t


@pytest.mark.parametrize("policy", ["untrusted", "on-request"])
async def test_acp_mcp_asks_first(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv, policy: str
) -> None:
    """The fail-open hole: OpenCode allows every tool by default. Declined → never runs."""
    env = opencode_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy=policy, config={"mcp_servers": servers(log)}
        )
        on_request = answer_by_method({TOOL_APPROVAL: decide("decline")})
        t, events = await turn(srv, tid, "echo please", on_request)
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        assert ask["method"] == TOOL_APPROVAL, ask
        started, item = one_mcp_item(events)
        assert (
            ask["params"]["itemId"] == started["id"] and ask["params"]["tool"] == "mcp__srv__echo"
        )
        # (OpenCode asks with no arguments: threadline finds them in OpenCode's database)
        assert ask["params"]["arguments"] == {"text": "hi"}, ask
        # announced before the request
        assert events.index(ask) > next(
            i for i, e in enumerate(events) if e.get("params", {}).get("item") == started
        )
        assert item["status"] == "failed" and "declined" in item["error"]["message"], item
        assert logged_calls(log) == []

        on_request = answer_by_method({TOOL_APPROVAL: decide("accept")})
        t, events = await turn(srv, tid, "echo again", on_request)
        assert t["status"] == "completed", t
        assert [r["method"] for r in requests_in(events)] == [TOOL_APPROVAL]
        _, item = one_mcp_item(events)
        assert item["status"] == "completed" and item["arguments"] == {"text": "again"}, item
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "again"}}]
        assert agent_text(events) == "Echoed again."


async def test_acp_mcp_server_fails_to_start(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    mcp = {**servers(log), "broken": BROKEN}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", config={"mcp_servers": mcp})
        t, events = await turn(srv, tid, "echo please")
        assert t["status"] == "completed", t
        warnings = [e["params"]["message"] for e in notifications(events, "warning")]
        assert any("broken" in w for w in warnings), warnings
        # the other server works
        _, item = one_mcp_item(events)
        assert item["status"] == "completed", item


# -- run -------------------------------------------------------------------------------------------


async def test_run_mcp_echo_and_refusal(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    """`opencode run`: servers through its config; under untrusted the call is refused (run
    mode cannot ask), as for bash; under never it runs."""
    env = opencode_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    config = {**RUN, "mcp_servers": {**servers(log), "broken": BROKEN}}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="untrusted", config=config)
        t, events = await turn(srv, tid, "echo please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "echo" and item["status"] == "failed", item
        assert "declined" in item["error"]["message"], item
        assert logged_calls(log) == []
        warnings = [e["params"]["message"] for e in notifications(events, "warning")]
        assert any("broken" in w for w in warnings), warnings

        tid = await srv.start_thread(
            env.work, modelProvider="opencode", approvalPolicy="never", config=config
        )
        t, events = await turn(srv, tid, "echo please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["status"] == "completed", item
        assert item["result"]["content"] == [{"type": "text", "text": "echo: hi"}], item
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hi"}}]

        t, events = await turn(srv, tid, "crash please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["tool"] == "crash" and item["status"] == "failed", item
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still here.", t


# -- secrets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["acp", "run"])
async def test_mcp_secret_by_reference(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv, mode: str
) -> None:
    """`env_vars`: the value comes from threadline's environment, reaches the server, and is
    never written to threadline's state, its stderr or the client."""
    env = opencode_env
    script(env)
    log = env.tmp / "mcp.jsonl"
    mcp = servers(log)
    mcp["srv"]["env_vars"] = ["MY_SECRET"]
    async with env.server(nursery, MY_SECRET=SECRET) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={"mode": mode, "mcp_servers": mcp}
        )
        t, events = await turn(srv, tid, "secret please")
        assert t["status"] == "completed", t
        _, item = one_mcp_item(events)
        assert item["status"] == "completed", item
        # what the server answered reached the model (not the client's business to hide it)
        assert [r["content"] for r in env.fake.tool_results(-1)] == [SECRET]
        assert item["result"]["content"] == [{"type": "text", "text": SECRET}], item
        # Anywhere else: nowhere (the server's config was sent with a reference only).
        others = [e for e in events if (e.get("params") or {}).get("item") != item]
        assert SECRET not in json.dumps(others)
        assert SECRET not in srv.stderr_text
    for path in env.home.rglob("*"):
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                if SECRET in line:  # only as what the tool answered
                    assert '"type":"mcpToolCall"' in line, (path, line)


# -- client-defined tools --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["acp", "run"])
async def test_dynamic_tool_runs_unasked_without_an_item_of_opencode(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv, mode: str
) -> None:
    """A client-defined tool reaches OpenCode as a tool of the MCP server "threadline": under
    untrusted it runs without an approval request (the client answers the call itself) and
    OpenCode's report of it makes no item (threadline's tool host makes the dynamicToolCall)."""
    env = opencode_env
    env.script(Rule("look it up", [ToolCall("threadline_lookup", {"q": "x"}), "Looked."]))
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    tool = {"name": "lookup", "description": "Look a thing up.", "inputSchema": schema}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="untrusted", dynamicTools=[tool], config={"mode": mode}
        )
        on_request = answer_by_method({"item/tool/call": lambda _m: tool_answer("found: x")})
        t, events = await turn(srv, tid, "look it up", on_request)
        assert t["status"] == "completed", t
        assert [r["method"] for r in requests_in(events)] == ["item/tool/call"]
        assert [i["type"] for i in items_started(events) if "ool" in i["type"]] == [
            "dynamicToolCall"
        ]
        assert [r["content"] for r in env.fake.tool_results(-1)] == ["found: x"]
        assert agent_text(events) == "Looked."
