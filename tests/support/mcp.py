"""What the tool tests share: the test MCP server (tests/fakes/mcp_server.py) as a
`config.mcp_servers` entry and the calls it logged; a client's answer to `item/tool/call`;
a turn held at a client-defined tool's call, and that call withdrawn by `turn/interrupt`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.support.client import Message, ServerProcess
from tests.support.events import items_completed, items_started, resolved_ids

__all__ = [
    "MCP_SERVER",
    "ROOT",
    "hold_call",
    "interrupt_held_call",
    "logged_calls",
    "one_mcp_item",
    "server_entry",
    "servers",
    "tool_answer",
]

ROOT = Path(__file__).resolve().parents[2]
MCP_SERVER = ROOT / "tests" / "fakes" / "mcp_server.py"


def server_entry(log: Path | None, **env: str) -> dict[str, Any]:
    """A `config.mcp_servers` entry running the test server, with `env` in its environment and
    each call logged to `log` ($MCP_TEST_LOG; None: not logged)."""
    logged = {} if log is None else {"MCP_TEST_LOG": str(log)}
    return {"command": sys.executable, "args": [str(MCP_SERVER)], "env": {**logged, **env}}


def servers(log: Path, name: str = "srv", **env: str) -> dict[str, dict[str, Any]]:
    """`config.mcp_servers` with the test server (`server_entry`) as `name`."""
    return {name: server_entry(log, **env)}


def logged_calls(log: Path) -> list[dict[str, Any]]:
    """The tool calls the test server received, in order: `{"tool": ..., "arguments": ...}`."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def one_mcp_item(events: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The turn's one mcpToolCall item, of the server "srv": (as started, as completed)."""
    [started] = items_started(events, "mcpToolCall")
    [completed] = items_completed(events, "mcpToolCall")
    assert started["id"] == completed["id"]
    assert started["server"] == completed["server"] == "srv", started
    assert started["status"] == "inProgress", started
    return started, completed


def tool_answer(text: str, success: bool = True) -> dict[str, Any]:
    """A client's answer (the result) to `item/tool/call`: one text."""
    return {"contentItems": [{"type": "inputText", "text": text}], "success": success}


async def hold_call(srv: ServerProcess, tid: str, prompt: str) -> tuple[str, Message, list[Any]]:
    """Starts a turn whose agent calls a client-defined tool, up to the call's `item/tool/call`
    request (left unanswered): (the turn's id, the request, the events so far)."""
    turn_id = await srv.start_turn(tid, prompt)
    events: list[Any] = []
    call = await srv.wait_method("item/tool/call", seen=events)
    return turn_id, call, events


async def interrupt_held_call(srv: ServerProcess, tid: str, prompt: str) -> list[Any]:
    """`hold_call`, then `turn/interrupt`: the turn ends interrupted and the request is
    withdrawn (`serverRequest/resolved`). The turn's events."""
    turn_id, call, events = await hold_call(srv, tid, prompt)
    await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
    done, events = await srv.collect_turn(turn_id, events=events, on_request=lambda r: None)
    assert done["params"]["turn"]["status"] == "interrupted", events
    assert call["id"] in resolved_ids(events)
    return events
