"""The mock's `/mcp SERVER TOOL {json}` directive: it calls a tool of one of the thread's MCP
servers as a CLI would (the official MCP SDK's stdio client), so clients can try their MCP
servers and their `dynamicTools` offline."""

from __future__ import annotations

import json
import os
from typing import Any

from ...agent_tools.sdk import load_mcp
from ...agent_tools.servers import McpStdioServer
from .. import base as b
from ..kit.mcp import approval_name, is_dynamic, mcp_item

__all__ = ["call_mcp_tool"]


def _reason(exc: BaseException) -> str:
    """The innermost error of `exc` (the SDK's task groups wrap it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") or "" for block in result.content)


async def _call(server: McpStdioServer, tool: str, args: Any) -> tuple[str, bool]:
    await load_mcp()
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=server.command, args=server.args, env=server.env, cwd=server.cwd
    )
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - opening the null device
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, args)
    return _text(result), not result.is_error


async def call_mcp_tool(
    settings: b.SessionSettings, arg: str, ctx: b.TurnContext
) -> tuple[str, str]:
    """Run `/mcp SERVER TOOL {json}`; returns the tool and what it answered (for the reply)."""
    name, _, rest = arg.partition(" ")
    tool, _, raw = rest.strip().partition(" ")
    try:
        args: Any = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as exc:
        raise b.BackendError(f"mock: /mcp arguments are not JSON: {exc}") from None
    server = next((s for s in settings.mcp_servers if s.name == name), None)
    if not isinstance(server, McpStdioServer) or not tool:
        known = ", ".join(s.name for s in settings.mcp_servers) or "none"
        raise b.BackendError(f"mock: /mcp SERVER TOOL {{json}}: no stdio server {name!r} ({known})")
    if is_dynamic(name):
        text, _ok = await _call(server, tool, args)  # (the tool host reports the call)
        return tool, text
    item = mcp_item(ctx.new_item_id(), name, tool, args)
    await ctx.emit(b.ItemStarted(item))
    decision = await ctx.request_approval(
        b.ApprovalRequest(
            kind="tool", item_id=item.id, tool=approval_name(name, tool), arguments=args
        )
    )
    if decision not in ("accept", "acceptForSession"):
        await ctx.emit(b.ItemCompleted(mcp_item(item.id, name, tool, args, error="declined")))
        return tool, "declined"
    try:
        text, ok = await _call(server, tool, args)
    except Exception as exc:  # (a server that fails: the call fails, the turn goes on)
        text, ok = f"the MCP server {name!r} failed: {_reason(exc)}", False
    content: list[Any] = [{"type": "text", "text": text}]
    done = mcp_item(item.id, name, tool, args, status="completed", content=content)
    await ctx.emit(b.ItemCompleted(done if ok else mcp_item(item.id, name, tool, args, error=text)))
    return tool, text
