"""One thread's client-defined tools (`dynamicTools`) and the round trip of a call: the CLI
calls the tool (over MCP, see `host`), the client answers `item/tool/call`, the result goes
back to the model.

A call is a `dynamicToolCall` item of the running turn (started when the call arrives,
completed or failed with the client's answer). Fail closed: an error response, an answer that
is not a `DynamicToolCallResponse`, no answer within the timeout, a client that went away, or
a turn that is interrupted meanwhile all end the call failed, with a reason the model reads.
`serverRequest/resolved` follows every `item/tool/call`, answered or withdrawn.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import trio

from ..backends import base as b
from ..ids import new_id
from ..protocol import (
    DynamicToolCallItem,
    DynamicToolCallParams,
    DynamicToolCallResponse,
    DynamicToolSpec,
    ToolOutput,
    ToolOutputText,
)
from ..rpc.peer import Peer
from ..server.asking import Asked, ask_client

__all__ = [
    "DEFAULT_TIMEOUT",
    "CallOutcome",
    "CallTurn",
    "DynamicTool",
    "ThreadTools",
    "flatten",
    "validate_specs",
]

#: How long the client has to answer `item/tool/call` unless `config.toolCallTimeoutMs` says.
DEFAULT_TIMEOUT = 300.0


class CallTurn(Protocol):
    """What a call needs of the turn it runs in (`server.turns.TurnRun`)."""

    @property
    def id(self) -> str: ...

    @property
    def stopping(self) -> trio.Event:
        """Set once the turn is interrupted or over: a pending call is withdrawn."""
        ...

    def handle_event(self, event: b.BackendEvent) -> Awaitable[None]: ...


@dataclass(frozen=True)
class DynamicTool:
    """A tool as the CLI sees it (`mcp_name`) and as the client named it."""

    mcp_name: str
    tool: str
    namespace: str | None
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class CallOutcome:
    content: list[ToolOutput]
    success: bool


def validate_specs(specs: Sequence[DynamicToolSpec]) -> None:
    """Raise ValueError (naming the tool) for specs no CLI could be given."""
    flatten(specs)


def _schema(spec: DynamicToolSpec, where: str) -> dict[str, Any]:
    schema = spec.input_schema if spec.input_schema is not None else {"type": "object"}
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError(f"{where}.inputSchema must be a JSON Schema object with type 'object'")
    return {"type": "object", **schema}


def flatten(specs: Sequence[DynamicToolSpec]) -> list[DynamicTool]:
    """The tools of `specs`, a namespace's tools named `<namespace>__<tool>` for the CLI."""
    tools: list[DynamicTool] = []
    for spec in specs:
        where = f"dynamicTools[{spec.name!r}]"
        if spec.type == "namespace":
            for inner in spec.tools or []:
                name = f"{spec.name}__{inner.name}"
                schema = _schema(inner, f"{where}.tools[{inner.name!r}]")
                tools.append(DynamicTool(name, inner.name, spec.name, inner.description, schema))
        else:
            tools.append(
                DynamicTool(spec.name, spec.name, None, spec.description, _schema(spec, where))
            )
    names = [t.mcp_name for t in tools]
    for t in tools:
        if not t.mcp_name or not all(c.isalnum() or c in "_-" for c in t.mcp_name):
            raise ValueError(f"dynamicTools: {t.mcp_name!r}: a name is letters, digits, '_', '-'")
        if names.count(t.mcp_name) > 1:
            raise ValueError(f"dynamicTools: {t.mcp_name!r} is defined twice")
    return tools


def _failed(reason: str) -> CallOutcome:
    return CallOutcome([ToolOutputText(text=reason)], False)


def _outcome(asked: Asked, timeout: float | None) -> CallOutcome:
    """The client's answer → the call's outcome; anything malformed or missing is a failure."""
    response = asked.response
    if response is None:
        if asked.timed_out:
            return _failed(f"the client did not answer the tool call within {timeout:g} s")
        return _failed("the client went away before answering the tool call")
    if response.error is not None:
        message = response.error.get("message") if isinstance(response.error, dict) else None
        return _failed(f"the client's tool failed: {message or response.error}")
    try:
        answer = msgspec.json.decode(response.result, type=DynamicToolCallResponse)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return _failed(f"the client answered the tool call with something unusable: {exc}")
    return CallOutcome(answer.content_items, answer.success)


class ToolSet(Protocol):
    """Tools a thread's CLI gets as one MCP server of the tool host."""

    @property
    def thread_id(self) -> str: ...

    @property
    def tools(self) -> Mapping[str, DynamicTool]: ...

    async def call(self, name: str, arguments: Any) -> CallOutcome: ...


class ThreadTools:
    """One thread's client-defined tools; `call` runs one call through the client."""

    def __init__(
        self,
        peer: Peer,
        thread_id: str,
        tools: Sequence[DynamicTool],
        running_turn: Callable[[], CallTurn | None],
        timeout: float | None = DEFAULT_TIMEOUT,
    ) -> None:
        self._peer = peer
        self.thread_id = thread_id
        self.tools = {t.mcp_name: t for t in tools}
        self._running_turn = running_turn
        self.timeout = timeout

    async def call(self, name: str, arguments: Any) -> CallOutcome:
        tool = self.tools.get(name)
        if tool is None:
            return _failed(f"no tool named {name!r}; the tools are: {', '.join(self.tools)}")
        turn = self._running_turn()
        if turn is None or turn.stopping.is_set():
            return _failed("the tool can only run during a turn of its thread")
        item = DynamicToolCallItem(
            id=new_id(),
            tool=tool.tool,
            namespace=tool.namespace,
            arguments=arguments,
            status="inProgress",
        )
        started = time.monotonic()
        await turn.handle_event(b.ItemStarted(item))
        outcome = await self._ask(turn, tool, item.id, arguments)
        item.status = "completed" if outcome.success else "failed"
        item.content_items, item.success = outcome.content, outcome.success
        item.duration_ms = int((time.monotonic() - started) * 1000)
        await turn.handle_event(b.ItemCompleted(item))
        return outcome

    async def _ask(self, turn: CallTurn, tool: DynamicTool, call_id: str, args: Any) -> CallOutcome:
        params = DynamicToolCallParams(
            thread_id=self.thread_id,
            turn_id=turn.id,
            call_id=call_id,
            tool=tool.tool,
            arguments=args,
            namespace=tool.namespace,
        )
        rid = self._peer.allocate_id()
        outcome = _failed("the turn was interrupted before the client answered the tool call")
        async with trio.open_nursery() as nursery:

            async def withdraw_when_stopping() -> None:
                await turn.stopping.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(withdraw_when_stopping)
            asked = await ask_client(
                self._peer,
                "item/tool/call",
                params,
                thread_id=self.thread_id,
                rid=rid,
                timeout=self.timeout,
            )
            outcome = _outcome(asked, self.timeout)
            nursery.cancel_scope.cancel()
        return outcome
