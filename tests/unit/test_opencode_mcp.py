"""The thread's MCP servers on OpenCode, without the CLI: its permission config (every tool
that is not read-only asks unless the policy is `never`; client-defined tools never ask), the
servers in `opencode run`'s config, how its tool names split into server and tool, and the
items made of its reports (the shapes are those of opencode 1.18.33; the e2e tests in
tests/e2e/test_opencode_mcp.py run the real CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from threadline.agent_tools.servers import McpHttpServer, McpStdioServer
from threadline.backends import base as b
from threadline.backends.kit.acp import AcpTurnMapper
from threadline.backends.opencode.acp import OpenCodeAcpSession
from threadline.backends.opencode.invocation import _env
from threadline.backends.opencode.mcp import (
    mcp_config,
    permission_rules,
    servers_key,
    split_tool,
    unavailable_server,
)
from threadline.backends.opencode.run import _run_tool
from threadline.protocol import McpToolCallItem

SRV = McpStdioServer(name="srv", command="python3", args=["s.py"], env={"K": "v"})
DYN = McpStdioServer(name="threadline", command="python3", args=["bridge.py"])
WEB = McpHttpServer(name="web", url="http://127.0.0.1:1/mcp", headers={"Authorization": "x"})


def _settings(policy: str = "untrusted", **kw: Any) -> b.SessionSettings:
    return b.SessionSettings(
        thread_id="t",
        cwd="/w",
        mode="acp",
        approval_policy=cast(Any, policy),
        mcp_servers=[SRV, DYN],
        **kw,
    )


# -- permissions -----------------------------------------------------------------------------------


def test_everything_not_read_only_asks_first_and_client_tools_run() -> None:
    rules = permission_rules([SRV, DYN], {"*": "allow", "read": "deny", "srv_*": "allow"})
    keys = list(rules)
    assert keys[0] == "*" and rules["*"] == "ask"  # (the user's catch-all is not kept)
    assert rules["read"] == "deny" and rules["glob"] == "allow"
    # the thread's servers come last: OpenCode's last matching rule wins
    assert keys[-2:] == ["threadline_*", "srv_*"]
    assert rules["threadline_*"] == "allow" and rules["srv_*"] == "ask"


def test_a_server_named_like_the_dynamic_one_still_asks() -> None:
    other = McpStdioServer(name="threadline_x", command="c")
    rules = permission_rules([DYN, other], {})
    assert list(rules)[-2:] == ["threadline_*", "threadline_x_*"]
    assert rules["threadline_x_*"] == "ask"
    assert "threadline_*" not in permission_rules([other], {})


@pytest.mark.parametrize("policy", ["untrusted", "on-request", "on-failure"])
def test_env_asks_unless_never(policy: str) -> None:
    permission = json.loads(_env(_settings(policy))["OPENCODE_PERMISSION"])
    assert next(iter(permission.items())) == ("*", "ask")
    assert permission["bash"] == permission["edit"] == "ask"
    never = json.loads(_env(_settings("never"))["OPENCODE_PERMISSION"])
    assert "*" not in never and never["bash"] == "allow"


def test_run_mode_gets_the_servers_in_its_config_beside_the_users() -> None:
    user = {"mcp": {"mine": {"type": "remote", "url": "http://x"}}, "theme": "t"}
    settings = _settings(env={"OPENCODE_CONFIG_CONTENT": json.dumps(user)}, model="p/m")
    content = json.loads(_env(settings, with_mcp=True)["OPENCODE_CONFIG_CONTENT"])
    assert set(content["mcp"]) == {"mine", "srv", "threadline"}
    assert content["mcp"]["srv"] == {
        "type": "local",
        "command": ["python3", "s.py"],
        "environment": {"K": "v"},
    }
    assert content["theme"] == "t" and content["model"] == "p/m"
    assert "OPENCODE_CONFIG_CONTENT" not in _env(_settings())  # ACP: session/new has them
    assert mcp_config([WEB]) == {
        "web": {"type": "remote", "url": WEB.url, "headers": {"Authorization": "x"}}
    }


def test_servers_key_tells_server_sets_apart_without_their_values() -> None:
    assert servers_key([]) == ""
    other = McpStdioServer(name="srv", command="python3", args=["s.py"], env={"K": "w"})
    assert servers_key([SRV]) != servers_key([other])
    assert "v" not in servers_key([SRV]).split(":")[0]


# -- names and reports -----------------------------------------------------------------------------


def test_split_tool_longest_server_name_wins() -> None:
    servers = [McpStdioServer(name="a", command="c"), McpStdioServer(name="a_b", command="c")]
    assert split_tool("a_b_c", servers) == ("a_b", "c")
    assert split_tool("a_x", servers) == ("a", "x")
    assert split_tool("bash", servers) is None
    assert split_tool("a_", servers) is None
    dotted = McpStdioServer(name="my.srv", command="c")
    assert split_tool("my_srv_echo", [dotted]) == ("my.srv", "echo")


def test_unavailable_server_line() -> None:
    line = (
        'timestamp=2026-11-27T06:24:06.959Z level=WARN run=9d7ce27e message="server unavailable"'
        " key=bad type=local status=failed"
    )
    assert unavailable_server(line) == ("bad", "server unavailable (type=local status=failed)")
    assert unavailable_server("level=WARN message=other key=x") is None


def _part(tool: str, status: str, **state: Any) -> dict[str, Any]:
    return {
        "type": "tool",
        "tool": tool,
        "callID": "call_1",
        "state": {"status": status, "input": {"text": "hi"}, **state},
    }


def test_run_mode_items() -> None:
    settings = _settings()
    item = _run_tool(_part("srv_echo", "completed", output="echo: hi"), settings)
    assert isinstance(item, McpToolCallItem)
    assert (item.server, item.tool, item.arguments) == ("srv", "echo", {"text": "hi"})
    assert item.status == "completed" and item.result is not None
    assert item.result.content == [{"type": "text", "text": "echo: hi"}]
    rejected = "The user rejected permission to use this specific tool call."
    item = _run_tool(_part("srv_echo", "error", error=rejected), settings)
    assert isinstance(item, McpToolCallItem) and item.status == "failed"
    assert item.error is not None and item.error.message.startswith("declined")
    # a client-defined tool: no item (threadline's tool host reports it)
    assert _run_tool(_part("threadline_lookup", "completed", output="x"), settings) is None


# -- ACP -------------------------------------------------------------------------------------------


class _Ctx:
    def __init__(self) -> None:
        self.events: list[b.BackendEvent] = []
        self.asked: list[b.ApprovalRequest] = []

    async def emit(self, event: b.BackendEvent) -> None:
        self.events.append(event)

    async def request_approval(self, request: b.ApprovalRequest) -> str:
        self.asked.append(request)
        return "decline"


def _session(tmp_path: Path) -> tuple[OpenCodeAcpSession, AcpTurnMapper]:
    settings = _settings()
    settings.cwd = str(tmp_path)
    session = OpenCodeAcpSession(cast(Any, SimpleNamespace(alive=True)), settings)
    mapper = AcpTurnMapper(
        cwd=str(tmp_path), backend_id="opencode", new_id=lambda: "new", mcp_call=session.mcp_call
    )
    return session, mapper


def _call(call_id: str, title: str, update: str = "tool_call", **kw: Any) -> dict[str, Any]:
    return {"sessionUpdate": update, "toolCallId": call_id, "title": title, "kind": "other", **kw}


_OPTIONS = [
    {"optionId": "once", "kind": "allow_once"},
    {"optionId": "always", "kind": "allow_always"},
    {"optionId": "reject", "kind": "reject_once"},
]


def test_acp_mcp_call_is_an_mcp_item(tmp_path: Path) -> None:
    _, mapper = _session(tmp_path)
    mapper.feed(_call("c1", "srv_echo", status="pending", rawInput={}))
    mapper.feed(_call("c1", "srv_echo", "tool_call_update", rawInput={"text": "hi"}))
    done = {"output": "echo: hi", "metadata": {"truncated": False}}
    text = [{"type": "content", "content": {"type": "text", "text": "echo: hi"}}]
    mapper.feed(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c1",
            "status": "completed",
            "content": text,
            "rawOutput": done,
        }
    )
    started, completed = mapper.take()
    assert isinstance(started, b.ItemStarted) and isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, McpToolCallItem) and item.status == "completed"
    assert (item.server, item.tool, item.arguments) == ("srv", "echo", {"text": "hi"})
    assert item.result is not None and item.result.content == [{"type": "text", "text": "echo: hi"}]
    mapper.feed(_call("c2", "srv_fail", status="pending"))
    failed = {"error": "Error executing tool fail"}
    mapper.feed(_call("c2", "srv_fail", "tool_call_update", status="failed", rawOutput=failed))
    _, completed = mapper.take()
    assert isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, McpToolCallItem) and item.status == "failed"
    assert item.error is not None and item.error.message == "Error executing tool fail"


def test_acp_dynamic_tool_call_makes_no_item(tmp_path: Path) -> None:
    _, mapper = _session(tmp_path)
    mapper.feed(_call("d1", "threadline_lookup", status="pending"))
    mapper.feed({"sessionUpdate": "tool_call_update", "toolCallId": "d1", "status": "completed"})
    assert mapper.take() == [] and mapper.tools == {}


async def test_acp_dynamic_tool_runs_unasked_other_mcp_tools_ask(tmp_path: Path) -> None:
    session, mapper = _session(tmp_path)
    ctx = _Ctx()
    dynamic = {"toolCall": _call("d1", "threadline_lookup", status="pending"), "options": _OPTIONS}
    answer = await session._ask_permission(cast(Any, ctx), mapper, dynamic)
    assert answer == {"outcome": {"outcome": "selected", "optionId": "once"}}
    assert ctx.asked == [] and ctx.events == []
    params = {"toolCall": _call("c1", "srv_echo", status="pending"), "options": _OPTIONS}
    answer = await session._ask_permission(cast(Any, ctx), mapper, params)
    [asked] = ctx.asked
    assert (asked.kind, asked.tool, asked.item_id) == ("tool", "mcp__srv__echo", "c1")
    assert answer == {"outcome": {"outcome": "selected", "optionId": "reject"}}
    started, completed = ctx.events
    assert isinstance(started, b.ItemStarted) and isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, McpToolCallItem) and item.status == "failed"
    assert item.error is not None and "declined" in item.error.message


def test_accept_for_session_is_once_for_opencode() -> None:
    """OpenCode's "always" covers every call of an MCP tool, in every thread of the shared
    `opencode acp`: the approval router remembers the thread's grant instead."""
    assert OpenCodeAcpSession.permission_kinds["acceptForSession"] == "allow_once"
