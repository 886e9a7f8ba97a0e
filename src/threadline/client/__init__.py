"""The Python client: drive a threadline server from trio code.

    from threadline.client import spawn, accept_all

    async with spawn(env={"AGENT_BACKEND": "mock"}) as client:
        thread = (await client.start_thread(model_provider="mock", cwd="/tmp")).thread
        turn = await client.start_turn(thread.id, "/text hello", on_request=accept_all)
        async for notification in turn:      # typed protocol Structs, in order
            ...
        status, text = turn.completed.turn.status, turn.text

`connect()` attaches to a server over any pair of trio streams, `in_process()` runs one
inside this trio run (`Server(...).serve`) over in-memory streams.

Notifications are the Structs of `threadline.protocol` (`AgentMessageDeltaNotification`,
`ItemStartedNotification`, ...); approvals reach `on_request` (per turn) or the client's
`approval_handler` as `ServerRequest`s and must be answered; a handler that raises, or no
handler at all, declines.

A prompt is text or a list of text and input items (`image("shot.png")`, `image(url)`);
`start_turn` takes the per-turn overrides (`model=`, `effort=`, `output_schema=`, ...) as
keywords. A running turn takes more input with `turn.steer(...)`; `fork_thread`,
`compact_thread`, `inject_items` (of `message_item(role, text)`s) and the management requests
(`set_thread_name`, `unarchive_thread`, `delete_thread`, `update_thread_metadata`,
`list_turns`, `list_items`) are one typed method each.

Client-defined tools: decorate an async handler with `@tool(description, input_schema)` and
pass it to `start_thread(tools=[...])`; the agent's calls are answered by the handler
(`item/tool/call`), a handler that raises answers a failed call.
"""

from __future__ import annotations

from typing import Any

from ._client import (
    ApprovalHandler,
    Client,
    RpcError,
    ServerClosed,
    TurnOverrides,
    TurnStream,
    connect,
)
from ._in_process import in_process
from ._inputs import Prompt, image, message_item
from ._messages import Notification, ServerRequest, UnknownNotification
from ._spawn import spawn
from ._tools import Tool, ToolHandler, ToolResult, tool

__all__ = [
    "ApprovalHandler",
    "Client",
    "Notification",
    "Prompt",
    "RpcError",
    "ServerClosed",
    "ServerRequest",
    "Tool",
    "ToolHandler",
    "ToolResult",
    "TurnOverrides",
    "TurnStream",
    "UnknownNotification",
    "accept_all",
    "connect",
    "decline_all",
    "image",
    "in_process",
    "message_item",
    "spawn",
    "tool",
]


async def accept_all(request: ServerRequest) -> Any:
    """An approval handler that accepts everything (questions get no answers)."""
    if request.method == "item/tool/requestUserInput":
        return {"answers": {}}
    return {"decision": "accept"}


async def decline_all(request: ServerRequest) -> Any:
    """An approval handler that declines everything."""
    if request.method == "item/tool/requestUserInput":
        return {"answers": {}}
    return {"decision": "decline"}
