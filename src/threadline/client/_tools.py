"""Client-defined tools: a `Tool` is a name, a description, a JSON Schema for its arguments and
an async handler. `Client.start_thread(tools=[...])` offers them to the thread's agent
(`dynamicTools`); each call arrives as `item/tool/call` and is answered by its handler.

A handler returns text, a list of output items (`ToolOutputText`, `ToolOutputImage`, ...), or
a whole `DynamicToolCallResponse`. A handler that raises answers a failed call with the error's
text, so the model reads what went wrong. A call of a tool the client registered no handler for
goes to the request handlers (`on_request`, `approval_handler`) like any server request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..protocol import (
    DynamicToolCallParams,
    DynamicToolCallResponse,
    DynamicToolSpec,
    ToolOutput,
    ToolOutputText,
)

__all__ = ["Tool", "ToolHandler", "ToolResult", "answer_tool_call", "handles", "tool"]

log = logging.getLogger("threadline.client")

ToolResult = str | Sequence[ToolOutput] | DynamicToolCallResponse
#: Runs one call: gets the call's arguments (the decoded JSON the model wrote).
ToolHandler = Callable[[Any], Awaitable[ToolResult]]


@dataclass(frozen=True)
class Tool:
    name: str
    handler: ToolHandler
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    #: Tools sharing a namespace are offered as one Codex `namespace` spec.
    namespace: str | None = None

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.namespace, self.name)

    def function_spec(self) -> DynamicToolSpec:
        return DynamicToolSpec(
            name=self.name, description=self.description, input_schema=self.input_schema
        )


def tool(
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    *,
    name: str | None = None,
    namespace: str | None = None,
) -> Callable[[ToolHandler], Tool]:
    """Decorate an async handler into a `Tool` (named after the function by default)."""

    def make(handler: ToolHandler) -> Tool:
        schema = input_schema if input_schema is not None else {"type": "object"}
        return Tool(name or handler.__name__, handler, description, schema, namespace)

    return make


def specs(tools: Sequence[Tool]) -> list[DynamicToolSpec]:
    """The `dynamicTools` of `thread/start` for `tools`."""
    out: list[DynamicToolSpec] = [t.function_spec() for t in tools if t.namespace is None]
    namespaces: dict[str, list[Tool]] = {}
    for t in tools:
        if t.namespace is not None:
            namespaces.setdefault(t.namespace, []).append(t)
    for ns, members in namespaces.items():
        inner = [t.function_spec() for t in members]
        out.append(DynamicToolSpec(name=ns, type="namespace", tools=inner))
    return out


def _response(result: ToolResult) -> DynamicToolCallResponse:
    if isinstance(result, DynamicToolCallResponse):
        return result
    if isinstance(result, str):
        return DynamicToolCallResponse(content_items=[ToolOutputText(text=result)], success=True)
    return DynamicToolCallResponse(content_items=list(result), success=True)


def _failed(text: str) -> DynamicToolCallResponse:
    return DynamicToolCallResponse(content_items=[ToolOutputText(text=text)], success=False)


def handles(tools: dict[tuple[str | None, str], Tool], params: Any) -> bool:
    """Whether one of `tools` answers this `item/tool/call` (else the request handlers do)."""
    return isinstance(params, DynamicToolCallParams) and (params.namespace, params.tool) in tools


async def answer_tool_call(
    tools: dict[tuple[str | None, str], Tool], params: Any
) -> DynamicToolCallResponse:
    """Run the call's handler; any failure is a failed call the model can read."""
    if not isinstance(params, DynamicToolCallParams):
        return _failed("the tool call could not be read by the client")
    found = tools.get((params.namespace, params.tool))
    if found is None:
        return _failed(f"this client has no tool {params.tool!r}")
    try:
        return _response(await found.handler(params.arguments))
    except Exception as exc:
        log.exception("tool %s failed", params.tool)
        return _failed(f"{params.tool} failed: {exc}")
