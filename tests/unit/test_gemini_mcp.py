"""The gemini backend's MCP pieces without the CLI: tool names, ACP tool calls → `mcpToolCall`
items (none for threadline's own tools, which run unasked), headless `tool_use` events, the
headless settings home, and the debug-log reading that names servers that failed to start.
The shapes are those of gemini 0.61.0 (see tests/e2e/test_gemini_mcp.py for the real CLI)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.unit.test_acp_mapping import FakeContext
from threadline.agent_tools.servers import McpHttpServer, McpStdioServer
from threadline.backends import base as b
from threadline.backends.gemini.acp import GeminiAcpSession
from threadline.backends.gemini.headless import _finish_tool, _headless_tool
from threadline.backends.gemini.mcp import (
    StartFailures,
    acp_mcp_call,
    headless_settings,
    split_tool_name,
    valid_name,
)
from threadline.backends.kit.acp import AcpTurnMapper, McpCall
from threadline.protocol import McpToolCallItem

SERVERS = ["srv", "my_srv", "threadline"]


def acp_call(tool: str, server: str, args: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A tool call as `gemini --acp` announces an MCP tool's (a permission's `toolCall`)."""
    return {
        "toolCallId": f"{valid_name(server + '_' + tool)}__{valid_name(server + '_' + tool)}_1_0",
        "status": "pending",
        "title": f"{tool} ({server} MCP Server)",
        "content": [{"type": "content", "content": {"type": "text", "text": json.dumps(args)}}],
        "locations": [],
        "kind": "other",
        **extra,
    }


def test_tool_names() -> None:
    assert valid_name("srv_echo") == "mcp_srv_echo"
    assert valid_name("my srv_e/cho") == "mcp_my_srv_e_cho"
    assert split_tool_name("mcp_srv_echo", SERVERS) == ("srv", "echo")
    # a server name with "_": the thread's own names decide (longest first)
    assert split_tool_name("mcp_my_srv_do_it", SERVERS) == ("my_srv", "do_it")
    # a server of the user's own settings: as Gemini parses it
    assert split_tool_name("mcp_other_tool_x", SERVERS) == ("other", "tool_x")
    assert split_tool_name("run_shell_command", SERVERS) is None
    assert split_tool_name("mcp_", SERVERS) is None


def test_acp_calls() -> None:
    call = acp_call("echo", "srv", {"text": "hi"})
    assert acp_mcp_call(call, SERVERS) == McpCall("srv", "echo", {"text": "hi"})
    # arguments with a string `command`: the title is the command, the id names the tool
    call = acp_call("run", "my_srv", {"command": "ls"}, title="ls")
    assert acp_mcp_call(call, SERVERS) == McpCall("my_srv", "run", {"command": "ls"})
    # not MCP: another kind, or an unknown title and id
    assert acp_mcp_call({**acp_call("echo", "srv", {}), "kind": "execute"}, SERVERS) is None
    assert acp_mcp_call({"toolCallId": "x", "title": "Read", "kind": "other"}, SERVERS) is None
    # arguments past 500 characters are not shown: none, not a crash
    long = acp_call("echo", "srv", {})
    long["content"][0]["content"]["text"] = "[Payload omitted due to length]"
    assert acp_mcp_call(long, SERVERS) == McpCall("srv", "echo", None)
    assert acp_mcp_call({"title": None, "content": "junk"}, SERVERS) is None


def _mapper() -> AcpTurnMapper:
    ids = iter(range(100))
    return AcpTurnMapper(
        cwd="/w",
        backend_id="gemini",
        new_id=lambda: f"i{next(ids)}",
        mcp_call=lambda c: acp_mcp_call(c, SERVERS),
    )


def test_mapper_items_and_hidden_dynamic_calls() -> None:
    mapper = _mapper()
    own = acp_call("lookup", "threadline", {"q": 1})
    mapper.feed({"sessionUpdate": "tool_call", **own, "status": "in_progress"})
    # (Gemini's failed update has no title: the call is still known as threadline's)
    failed = {"toolCallId": own["toolCallId"], "status": "failed", "kind": "other"}
    mapper.feed({"sessionUpdate": "tool_call_update", **failed, "content": []})
    assert mapper.take() == []

    call = acp_call("echo", "srv", {"text": "hi"})
    mapper.feed({"sessionUpdate": "tool_call", **call, "status": "in_progress"})
    out = [{"type": "content", "content": {"type": "text", "text": "echo: hi"}}]
    done = {"toolCallId": call["toolCallId"], "status": "completed", "content": out}
    mapper.feed({"sessionUpdate": "tool_call_update", **done})
    started, completed = mapper.take()
    assert isinstance(started, b.ItemStarted) and isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, McpToolCallItem)
    assert (item.server, item.tool, item.arguments, item.status) == (
        "srv",
        "echo",
        {"text": "hi"},
        "completed",
    )
    assert item.result is not None and item.result.content == [{"type": "text", "text": "echo: hi"}]

    fail = acp_call("fail", "srv", {})
    mapper.feed({"sessionUpdate": "tool_call", **fail, "status": "in_progress"})
    error = [{"type": "content", "content": {"type": "text", "text": "MCP tool 'fail' error"}}]
    bad = {"toolCallId": fail["toolCallId"], "status": "failed", "content": error}
    mapper.feed({"sessionUpdate": "tool_call_update", **bad})
    _, completed = mapper.take()
    item = completed.item
    assert isinstance(item, McpToolCallItem) and item.status == "failed"
    assert item.error is not None and item.error.message == "MCP tool 'fail' error"


def _session(policy: b.ApprovalPolicy = "untrusted") -> tuple[GeminiAcpSession, FakeContext]:
    settings = b.SessionSettings(
        thread_id="t",
        cwd="/w",
        mode="acp",
        approval_policy=policy,
        mcp_servers=[
            McpStdioServer(name="srv", command="x"),
            McpStdioServer(name="threadline", command="y"),
        ],
    )
    session = GeminiAcpSession(None, settings, "gemini")  # type: ignore[arg-type]
    ctx = FakeContext(decisions=["decline"])
    session._turn_ctx = ctx  # type: ignore[assignment]
    session._mapper = AcpTurnMapper(
        cwd="/w", backend_id="gemini", new_id=ctx.new_item_id, mcp_call=session.mcp_call
    )
    return session, ctx


OPTIONS = [
    {"optionId": "proceed_always_server", "name": "Always allow server", "kind": "allow_always"},
    {"optionId": "proceed_always_tool", "name": "Always allow tool", "kind": "allow_always"},
    {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
    {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
]


async def test_permission_threadline_tool_runs_unasked_without_an_item() -> None:
    session, ctx = _session()
    params = {
        "sessionId": "s",
        "options": OPTIONS,
        "toolCall": acp_call("lookup", "threadline", {}),
    }
    answer = await session.on_request("session/request_permission", params)
    assert answer == {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    assert ctx.approvals == [] and ctx.events == []


async def test_permission_other_server_asks_and_decline_fails_the_item() -> None:
    session, ctx = _session()
    params = {"sessionId": "s", "options": OPTIONS, "toolCall": acp_call("echo", "srv", {"a": 1})}
    answer = await session.on_request("session/request_permission", params)
    assert answer == {"outcome": {"outcome": "selected", "optionId": "cancel"}}
    [request] = ctx.approvals
    assert (request.kind, request.tool, request.arguments) == ("tool", "mcp__srv__echo", {"a": 1})
    started, completed = ctx.events
    assert isinstance(started, b.ItemStarted) and started.item.id == request.item_id
    assert isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, McpToolCallItem) and item.status == "failed"
    assert item.error is not None and "declined" in item.error.message


def test_headless_tool_use() -> None:
    own = {
        "type": "tool_use",
        "tool_name": "mcp_threadline_lookup",
        "tool_id": "a",
        "parameters": {},
    }
    assert _headless_tool(own, "/w", SERVERS) is None
    event = {"tool_name": "mcp_srv_echo", "tool_id": "b", "parameters": {"text": "hi"}}
    item = _headless_tool(event, "/w", SERVERS)
    assert isinstance(item, McpToolCallItem)
    assert (item.server, item.tool, item.arguments) == ("srv", "echo", {"text": "hi"})
    done = _finish_tool(item, {"tool_id": "b", "status": "success", "output": "echo: hi"})
    assert isinstance(done, McpToolCallItem) and done.status == "completed"
    assert done.result is not None and done.result.content == [{"type": "text", "text": "echo: hi"}]
    item = _headless_tool(event, "/w", SERVERS)
    assert item is not None
    refused = {"status": "error", "error": {"type": "tool_not_registered", "message": "no"}}
    done = _finish_tool(item, refused)
    assert isinstance(done, McpToolCallItem) and done.status == "failed"
    assert done.error is not None and done.error.message == "declined: no"


def test_headless_settings_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    gemini = home / ".gemini"
    gemini.mkdir(parents=True)
    user = {"security": {"auth": {"selectedType": "gemini-api-key"}}, "mcpServers": {"mine": {}}}
    (gemini / "settings.json").write_text(json.dumps(user))
    (gemini / "oauth_creds.json").write_text("{}")
    servers = [
        McpStdioServer(name="srv", command="run", args=["-x"], env={"TOKEN": "s3cret"}),
        McpHttpServer(name="web", url="http://h/mcp", headers={"Authorization": "Bearer s3cret"}),
        McpStdioServer(name="threadline", command="tl"),
    ]
    with headless_settings(servers, {"HOME": str(home)}) as (env, warning):
        assert warning is None
        cli_home = Path(env["GEMINI_CLI_HOME"])
        written = (cli_home / ".gemini" / "settings.json").read_text()
        assert "s3cret" not in written  # values are references to the CLI's environment
        settings = json.loads(written)
        assert settings["security"] == user["security"]
        assert set(settings["mcpServers"]) == {"mine", "srv", "web", "threadline"}
        ref = settings["mcpServers"]["srv"]["env"]["TOKEN"]
        assert env[ref[2:-1]] == "s3cret"
        assert settings["mcpServers"]["web"]["httpUrl"] == "http://h/mcp"
        assert settings["mcpServers"]["threadline"]["trust"] is True
        assert "trust" not in settings["mcpServers"]["srv"]
        # everything else is the user's own, sessions included
        assert (cli_home / ".gemini" / "oauth_creds.json").resolve() == gemini / "oauth_creds.json"
        assert (cli_home / ".gemini" / "tmp").resolve() == gemini / "tmp"
        assert os.stat(cli_home / ".gemini" / "settings.json").st_mode & 0o077 == 0
    assert not cli_home.exists()
    assert json.loads((gemini / "settings.json").read_text()) == user  # untouched

    (gemini / "settings.json").write_text("{ not json")
    with headless_settings(servers, {"HOME": str(home)}) as (env, warning):
        assert env == {} and warning is not None and "srv" in warning
    with headless_settings([], {"HOME": str(home)}) as (env, warning):
        assert env == {} and warning is None


def test_start_failures_from_the_debug_log(tmp_path: Path) -> None:
    log = tmp_path / "debug.log"
    log.write_text("[LOG] [MCP error] Error during discovery for MCP server 'old': gone\n")
    failures = StartFailures(str(log), ["bad", "srv", "old"])
    with log.open("a") as fh:
        fh.write(
            "[2026-11-27T06:26:42.450Z] [LOG] [MCP error] Error during discovery for MCP server"
            " 'bad': MCP error -32000: Connection closed _McpError: MCP error -32000: Connection"
            " closed\n[LOG] [MCP error] Error connecting to MCP server 'other': x\n"
            "[LOG] [MCP error] Error connecting to MCP server 'bad': again\n[LOG] partial"
        )
    assert failures.warnings() == [
        "MCP server 'bad' failed to start: MCP error -32000: Connection closed"
    ]
    assert failures.warnings() == []
    assert StartFailures(None, ["bad"]).warnings() == []
    assert StartFailures(str(tmp_path / "missing"), ["bad"]).warnings() == []
