"""claude and the thread's MCP servers, without the CLI: the `--mcp-config` it gets (no value
in argv), its tool names, the dynamic tools' calls (no item, never asked), failed servers."""

from __future__ import annotations

import json
from typing import Any

from threadline.agent_tools.servers import McpHttpServer, McpStdioServer
from threadline.backends import base as b
from threadline.backends.claude.invocation import _base_argv, _env
from threadline.backends.claude.mapping import ClaudeTurnMapper
from threadline.backends.claude.mcp import (
    failed_servers,
    failure_message,
    mcp_config,
    server_errors,
    split_tool,
)
from threadline.backends.claude.print import ClaudePrintSession
from threadline.backends.claude.stream import ClaudeStreamSession
from threadline.protocol import McpToolCallItem

STDIO = McpStdioServer(
    name="srv", command="python3", args=["server.py"], env={"TOKEN": "s3cret-env"}, cwd="/opt/x"
)
HTTP = McpHttpServer(name="web", url="http://127.0.0.1:1/mcp", headers={"Authorization": "B s3"})
DYNAMIC = McpStdioServer(name="threadline", command="threadline-tools")


def settings(*servers: Any, policy: b.ApprovalPolicy = "on-request") -> b.SessionSettings:
    return b.SessionSettings(
        thread_id="t",
        cwd="/work",
        mode="stream",
        approval_policy=policy,
        mcp_servers=list(servers),
    )


def argv_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_mcp_config_keeps_values_out_of_argv() -> None:
    s = settings(STDIO, HTTP)
    argv = _base_argv(s, "claude")
    raw = argv_value(argv, "--mcp-config")
    assert raw is not None and "s3cret" not in " ".join(argv) and "B s3" not in raw
    servers = json.loads(raw)["mcpServers"]
    stdio, http = servers["srv"], servers["web"]
    # the cwd: claude's config has none, so the command runs through `sh -c 'cd ...'`
    assert stdio["type"] == "stdio" and stdio["command"] == "sh"
    assert stdio["args"][2:] == ["/opt/x", "python3", "server.py"]
    assert http == {
        "type": "http",
        "url": "http://127.0.0.1:1/mcp",
        "headers": {"Authorization": "${THREADLINE_MCP_1}"},
    }
    env = _env(s)
    assert stdio["env"] == {"TOKEN": "${THREADLINE_MCP_0}"}
    assert env["THREADLINE_MCP_0"] == "s3cret-env" and env["THREADLINE_MCP_1"] == "B s3"
    assert mcp_config([]) == (None, {})
    assert "--mcp-config" not in _base_argv(settings(), "claude")


def test_allowed_tools_rules_for_mcp_servers() -> None:
    # the dynamic tools' server never asks; the others ask (stream: the router decides)
    argv = _base_argv(settings(STDIO, DYNAMIC, policy="never"), "claude")
    assert argv_value(argv, "--allowedTools") == "mcp__threadline"
    # print mode under `never`: a process per turn, so every server's tools run unasked
    session = ClaudePrintSession(settings(STDIO, DYNAMIC, policy="never"), "claude")
    rules = str(argv_value(session.argv(), "--allowedTools")).split(",")
    assert "mcp__srv" in rules and rules.count("mcp__threadline") == 1, rules
    asking = ClaudePrintSession(settings(STDIO, DYNAMIC), "claude").argv()
    assert argv_value(asking, "--allowedTools") == "mcp__threadline"


def test_split_tool_names() -> None:
    assert split_tool("mcp__srv__echo") == ("srv", "echo")
    assert split_tool("mcp__my__srv__echo", ["my__srv"]) == ("my__srv", "echo")
    assert split_tool("mcp__threadline__lookup") == ("threadline", "lookup")
    assert split_tool("mcp__odd") == ("odd", "odd")
    assert split_tool("Bash") is None


def _tool_use(tool_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    block = {"type": "tool_use", "id": tool_id, "name": name, "input": args}
    return {"type": "assistant", "message": {"id": "m1", "content": [block]}}


def _tool_result(tool_id: str, content: Any, structured: Any = None, error: bool = False) -> Any:
    block = {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": error}
    return {
        "type": "user",
        "message": {"role": "user", "content": [block]},
        "tool_use_result": structured,
    }


def test_mcp_call_items() -> None:
    mapper = ClaudeTurnMapper(cwd="/work", mcp_servers=("srv",))
    [started] = mapper.feed(_tool_use("t1", "mcp__srv__echo", {"text": "hi"}))
    assert isinstance(started, b.ItemStarted) and isinstance(started.item, McpToolCallItem)
    assert (started.item.server, started.item.tool) == ("srv", "echo")
    text = '{"result":"echo: hi"}'
    [done] = mapper.feed(_tool_result("t1", text, {"structuredContent": {"result": "echo: hi"}}))
    assert isinstance(done, b.ItemCompleted) and isinstance(done.item, McpToolCallItem)
    assert done.item.status == "completed" and done.item.result is not None
    assert done.item.result.content == [{"type": "text", "text": text}]
    assert done.item.result.structured_content == {"result": "echo: hi"}

    mapper.feed(_tool_use("t2", "mcp__srv__fail", {}))
    [failed] = mapper.feed(_tool_result("t2", "Error executing tool fail", error=True))
    assert isinstance(failed, b.ItemCompleted) and isinstance(failed.item, McpToolCallItem)
    assert failed.item.status == "failed" and failed.item.error is not None
    assert failed.item.error.message == "Error executing tool fail"


def test_dynamic_tool_calls_have_no_item() -> None:
    mapper = ClaudeTurnMapper(cwd="/work", mcp_servers=("srv", "threadline"))
    assert mapper.feed(_tool_use("d1", "mcp__threadline__lookup", {"q": 1})) == []
    assert mapper.feed(_tool_result("d1", "answer")) == []
    assert mapper.tools == {}


class _NoApprovals:
    async def request_approval(self, request: b.ApprovalRequest) -> str:
        raise AssertionError(f"asked for a dynamic tool: {request}")

    async def emit(self, event: b.BackendEvent) -> None:
        raise AssertionError(f"emitted for a dynamic tool: {event}")


async def test_dynamic_tool_calls_run_unasked() -> None:
    session = ClaudeStreamSession(settings(DYNAMIC), "claude")
    mapper = session.mapper()
    ctx: Any = _NoApprovals()
    args = {"q": 1}
    request = {"subtype": "can_use_tool", "tool_name": "mcp__threadline__lookup", "input": args}
    response = await session._approve(ctx, mapper, "mcp__threadline__lookup", "d1", args, request)
    assert response == {"behavior": "allow", "updatedInput": args}


def test_failed_servers_and_their_reasons() -> None:
    init = {
        "type": "system",
        "subtype": "init",
        "mcp_servers": [
            {"name": "ok", "status": "connected"},
            {"name": "bad", "status": "failed"},
            "junk",
        ],
    }
    assert failed_servers(init) == ["bad"]
    assert failed_servers({"mcp_servers": None}) == []
    session = ClaudeStreamSession(settings(), "claude")
    assert session.new_failures(init) == ["bad"]
    assert session.new_failures(init) == []  # once per session
    status = {"mcpServers": [{"name": "bad", "status": "failed", "error": "Connection closed"}]}
    assert server_errors(status) == {"bad": "Connection closed"}
    assert server_errors("nonsense") == {} and server_errors({"mcpServers": 3}) == {}
    assert "'bad'" in failure_message("bad", "Connection closed")
    assert "Connection closed" in failure_message("bad", "Connection closed")
