"""What every backend does with the thread's MCP servers (`SessionSettings.mcp_servers`).

- Pass them to the CLI natively (ACP agents: `acp_servers`).
- A call to a tool of `DYNAMIC_TOOLS_SERVER` is one of the client's own tools: threadline's
  tool host reports it (a `dynamicToolCall` item) and the client answers it, so the backend
  shows no item of its own for it (`is_dynamic`) and lets it run without asking.
- A call to any other server's tool is an `mcpToolCall` item (`mcp_item`); unless the thread's
  approval policy is `never`, it asks first (`ApprovalRequest(kind="tool")`, the tool named
  `approval_name(server, tool)` on every backend, so rules and `acceptForSession` read alike).
"""

from __future__ import annotations

from typing import Any

from ...agent_tools.servers import DYNAMIC_TOOLS_SERVER, McpHttpServer, McpServer, McpStdioServer
from ...protocol import McpToolCallError, McpToolCallItem, McpToolCallResult, ToolCallStatus

__all__ = ["DYNAMIC_TOOLS_SERVER", "acp_servers", "approval_name", "is_dynamic", "mcp_item"]


def is_dynamic(server: str | None) -> bool:
    """Whether `server` is threadline's server of the thread's client-defined tools."""
    return server == DYNAMIC_TOOLS_SERVER


def approval_name(server: str, tool: str) -> str:
    """How an approval request names an MCP tool: `mcp__<server>__<tool>` (unique across the
    thread's servers)."""
    return f"mcp__{server}__{tool}"


def acp_servers(servers: list[McpServer]) -> list[dict[str, Any]]:
    """ACP `McpServer` objects for `session/new` / `session/load` (stdio and `http`)."""
    out: list[dict[str, Any]] = []
    for s in servers:
        if isinstance(s, McpStdioServer):
            env = [{"name": k, "value": v} for k, v in s.env.items()]
            out.append({"name": s.name, "command": s.command, "args": s.args, "env": env})
        elif isinstance(s, McpHttpServer):
            headers = [{"name": k, "value": v} for k, v in s.headers.items()]
            out.append({"type": "http", "name": s.name, "url": s.url, "headers": headers})
    return out


def mcp_item(
    item_id: str,
    server: str,
    tool: str,
    arguments: Any,
    *,
    status: ToolCallStatus = "inProgress",
    content: list[Any] | None = None,
    error: str | None = None,
) -> McpToolCallItem:
    """An `mcpToolCall` item: in progress, completed with `content`, or failed with `error`."""
    if error is not None:
        status = "failed"
    return McpToolCallItem(
        id=item_id,
        server=server,
        tool=tool,
        arguments=arguments,
        status=status,
        result=McpToolCallResult(content=content) if content is not None else None,
        error=McpToolCallError(message=error) if error is not None else None,
    )
