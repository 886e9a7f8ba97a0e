"""Codex and the thread's MCP servers, without the CLI: the `mcp_servers` config (values only
in the environment), the approval modes, hidden calls of threadline's own server, the
approval asked for an MCP call (app-server) and exec's refusal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.unit.test_codex_mapping import RecordingContext
from threadline.agent_tools.servers import McpHttpServer, McpStdioServer
from threadline.backends import base as b
from threadline.backends.codex.app_server import CodexAppServerSession
from threadline.backends.codex.exec import EXEC_REFUSED, CodexExecSession
from threadline.backends.codex.invocation import CodexCommand
from threadline.backends.codex.mcp import mcp_config, start_failures, with_error
from threadline.protocol import (
    McpToolCallError,
    McpToolCallItem,
    McpToolCallResult,
    ToolRequestUserInputQuestion,
)

SECRET = "s3cr3t-value"
STDIO = McpStdioServer(name="srv", command="/bin/srv", args=["-x"], env={"MY_SECRET": SECRET})
HTTP = McpHttpServer(name="web", url="http://127.0.0.1:9/mcp", headers={"Authorization": SECRET})
DYNAMIC = McpStdioServer(name="threadline", command="/bin/tools")


def settings(policy: b.ApprovalPolicy = "untrusted", mode: str = "app-server") -> b.SessionSettings:
    return b.SessionSettings(
        thread_id="t",
        cwd="/w",
        mode=mode,
        approval_policy=policy,
        mcp_servers=[STDIO, HTTP, DYNAMIC],
    )


class AskingContext(RecordingContext):
    def __init__(self, decision: b.ApprovalDecision) -> None:
        super().__init__()
        self.decision = decision
        self.asked: list[b.ApprovalRequest] = []

    async def request_approval(self, request: b.ApprovalRequest) -> b.ApprovalDecision:
        self.asked.append(request)
        return self.decision

    async def request_user_input(
        self, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        return None


# -- config ----------------------------------------------------------------------------------------


def test_config_names_values_only_through_the_environment() -> None:
    config = mcp_config(settings())
    assert config.servers["srv"] == {
        "default_tools_approval_mode": "prompt",
        "command": "/bin/srv",
        "args": ["-x"],
        "env_vars": ["MY_SECRET"],
    }
    assert config.servers["web"] == {
        "default_tools_approval_mode": "prompt",
        "url": "http://127.0.0.1:9/mcp",
        "env_http_headers": {"Authorization": "THREADLINE_MCP_1_HEADER_0"},
    }
    # the client's own tools never ask
    assert config.servers["threadline"]["default_tools_approval_mode"] == "approve"
    assert config.env == {"MY_SECRET": SECRET, "THREADLINE_MCP_1_HEADER_0": SECRET}
    flags = config.flags()
    assert SECRET not in " ".join(flags)
    assert 'mcp_servers.srv.args=["-x"]' in flags
    assert (
        'mcp_servers.web.env_http_headers={"Authorization" = "THREADLINE_MCP_1_HEADER_0"}' in flags
    )


def test_app_server_gets_literal_values_in_its_config() -> None:
    inherited = McpStdioServer(name="ref", command="/bin/ref", env={"HOME_VAR": "h"})
    s = settings()
    s.mcp_servers = [STDIO, HTTP, inherited]
    s.env = {"HOME_VAR": "h"}
    config = mcp_config(s, inline=True)
    assert config.env == {}
    assert config.servers["srv"]["env"] == {"MY_SECRET": SECRET}
    assert "env_vars" not in config.servers["srv"]
    assert config.servers["web"]["http_headers"] == {"Authorization": SECRET}
    # a value of threadline's environment (an `env_vars` reference) is named, not copied
    assert config.servers["ref"]["env_vars"] == ["HOME_VAR"]
    assert "env" not in config.servers["ref"]
    assert mcp_config(s).env == {"MY_SECRET": SECRET, "THREADLINE_MCP_1_HEADER_0": SECRET}


def test_a_failed_call_has_its_error() -> None:
    failed = McpToolCallItem(
        id="c",
        server="srv",
        tool="fail",
        arguments={},
        status="failed",
        result=McpToolCallResult(content=[{"type": "text", "text": "Error executing tool fail"}]),
    )
    assert with_error(failed).error == McpToolCallError(message="Error executing tool fail")


def test_never_approves_every_server_and_exec_waits_for_them() -> None:
    config = mcp_config(settings("never"), required=True, leave_out=frozenset({"web"}))
    assert set(config.servers) == {"srv", "threadline"}
    assert all(e["default_tools_approval_mode"] == "approve" for e in config.servers.values())
    assert all(e["required"] is True for e in config.servers.values())
    argv = CodexExecSession(settings("never", "exec"), CodexCommand("codex")).argv()
    assert "mcp_servers.srv.required=true" in argv and SECRET not in " ".join(argv)


def test_start_failures_from_codex_stderr() -> None:
    config = mcp_config(settings())
    stderr = (
        "ERROR codex_core::session: Failed to create session: required MCP servers failed to "
        "initialize: srv: handshaking with MCP server failed: connection closed\nError: ..."
    )
    assert start_failures(config, stderr) == {
        "srv": "srv: handshaking with MCP server failed: connection closed"
    }
    assert start_failures(config, "some other failure") == {}


# -- app-server: items and approvals ---------------------------------------------------------------


def mcp_item(server: str, status: str = "inProgress") -> dict[str, Any]:
    return {
        "type": "mcpToolCall",
        "id": f"call_{server}",
        "server": server,
        "tool": "echo",
        "arguments": {"text": "hi"},
        "status": status,
    }


def elicitation(server: str) -> dict[str, Any]:
    return {
        "threadId": "th",
        "serverName": server,
        "mode": "form",
        "message": f'Allow the {server} MCP server to run tool "echo"?',
        "requestedSchema": {"type": "object", "properties": {}},
        "_meta": {
            "codex_approval_kind": "mcp_tool_call",
            "tool_name": "echo",
            "tool_params": {"text": "hi"},
        },
    }


async def test_threadline_calls_are_hidden_and_not_asked() -> None:
    session = CodexAppServerSession(settings(), CodexCommand("codex"))
    ctx = AskingContext("decline")
    await session._translate("item/started", {"item": mcp_item("threadline")}, ctx, set())
    progress = {"itemId": "call_threadline", "message": "half"}
    await session._translate("item/mcpToolCall/progress", progress, ctx, set())
    done = mcp_item("threadline", "completed")
    await session._translate("item/completed", {"item": done}, ctx, set())
    assert ctx.events == []
    assert await session._elicitation(elicitation("threadline"), ctx) == {"action": "accept"}
    assert ctx.asked == []


@pytest.mark.parametrize(
    ("decision", "action"),
    [("accept", "accept"), ("acceptForSession", "accept"), ("decline", "decline")],
)
async def test_an_mcp_call_asks_for_its_item(decision: b.ApprovalDecision, action: str) -> None:
    session = CodexAppServerSession(settings(), CodexCommand("codex"))
    ctx = AskingContext(decision)
    await session._translate("item/started", {"item": mcp_item("srv")}, ctx, set())
    assert [type(e) for e in ctx.events] == [b.ItemStarted]
    assert await session._elicitation(elicitation("srv"), ctx) == {"action": action}
    [asked] = ctx.asked
    assert (asked.kind, asked.item_id, asked.tool) == ("tool", "call_srv", "mcp__srv__echo")
    assert asked.arguments == {"text": "hi"}
    # an elicitation without an announced item, or not about a tool call: declined unasked
    assert await session._elicitation(elicitation("srv"), ctx) == {"action": "decline"}
    other = {**elicitation("srv"), "_meta": None}
    assert await session._elicitation(other, ctx) == {"action": "decline"}
    assert len(ctx.asked) == 1


# -- exec ------------------------------------------------------------------------------------------


def exec_event(server: str, error: str | None = None) -> dict[str, Any]:
    item = {
        "id": "item_1",
        "type": "mcp_tool_call",
        "server": server,
        "tool": "echo",
        "arguments": {"text": "hi"},
        "result": None,
        "error": {"message": error} if error else None,
        "status": "failed" if error else "completed",
    }
    return {"type": "item.completed", "item": item}


async def test_exec_hides_threadline_calls_and_explains_refusals() -> None:
    session = CodexExecSession(settings(mode="exec"), CodexCommand("codex"))
    ctx = RecordingContext()
    await session.handle_event(exec_event("threadline"), "p-", ctx)
    assert ctx.events == []
    refused = "MCP tool call requires approval, but approval policy is never"
    await session.handle_event(exec_event("srv", refused), "p-", ctx)
    [done] = [e.item for e in ctx.events if isinstance(e, b.ItemCompleted)]
    assert isinstance(done, McpToolCallItem) and done.status == "failed"
    assert done.error is not None and done.error.message == EXEC_REFUSED
