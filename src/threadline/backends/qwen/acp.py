"""Qwen Code over ACP (`qwen --acp`): the kit's session with qwen's quirks (measured on 0.24.4).

- A tool call is first announced while the model still streams its arguments: a `tool_call`
  with `_meta.phase: "preparing"`, no input and the tool's name as title ("Shell"). It is held
  until the call is known: merged into the next update of the call (`in_progress` with the
  input, or `failed` when qwen rejected the arguments), or dropped when a permission request
  (which carries the whole call) comes first.
- After a rejected permission qwen still sends the tool's `failed` update; the kit already
  completed the item as declined. (qwen then ends the turn without asking the model again.)
- Token usage comes per model call, in an empty `agent_message_chunk`'s `_meta.usage`, not in
  the prompt's answer: the chunk is taken out of the text and the turn's calls are summed.
- A shell's exit code is `rawOutput.exitCode`.
- "Always allow" options grant more than the user approved (a command pattern such as
  `echo *`, saved in the project's or the user's settings; all edits for the session):
  acceptForSession answers "Allow" once and the approval router remembers the exact grant.
- A session starts in mode `auto` (an LLM classifier approves tools): `default` (asks for
  edits and shell commands) is set, or `yolo` for `approvalPolicy: never`.
- A failed prompt is -32603 "Internal error" with qwen's words in `data.details`
  (`invocation.prompt_failure` makes them say what to do); the API retries qwen keeps quiet
  about are followed in its session record (`api_records`).
- MCP servers come with `session/new` / `session/load`. qwen names an MCP tool
  `mcp__<server>__<tool>` and says so in each tool update's `_meta` (`toolName`, `serverId`,
  `provenance: "mcp"`; a permission request's `toolCall._meta` has `toolName` only). In mode
  `default` it asks before an MCP tool call. It starts the servers after answering
  `session/new` (a call before they are up fails "Tool ... not found in registry") and offers
  their tools through its `tool_search` tool, not in the model's tool list. A server that does
  not start is a line on stderr, "Warning: MCP server(s) failed to start: a, b. ...", naming
  no session: each session of the agent with a server of that name reports it (a warning at
  its next turn).
- `craft/drainMidTurnQueue` requests (messages a client queued mid-turn, asked for after each
  tool round) are answered with the input `turn/steer` added to the running turn (`steer`).
"""

from __future__ import annotations

import re
import weakref
from typing import Any

from ...protocol import TokenUsageBreakdown, TurnError
from .. import base as b
from ..kit.acp import (
    AcpError,
    AcpHost,
    AcpSession,
    AcpTurnMapper,
    McpCall,
    usage_from_prompt_result,
)
from ..kit.acp.inputs import input_blocks
from ..kit.mcp import DYNAMIC_TOOLS_SERVER
from ..kit.usage import add_usage
from .api_records import watch_api_records
from .invocation import prompt_failure
from .spec import SPEC
from .steer import DRAIN_METHOD, SteerQueue

__all__ = ["QwenAcpSession", "acp_stderr_line", "split_mcp_tool"]

#: What qwen's `/effort` takes of Codex's efforts (it also has `max`; none/minimal it has not).
_EFFORTS = ("low", "medium", "high", "xhigh")
_MCP_FAILED = re.compile(r"MCP server\(s\) failed to start: (.*?)\. ")
#: MCP servers a `qwen --acp` reported as not started (see the module docstring).
_UNAVAILABLE: weakref.WeakKeyDictionary[AcpHost, set[str]] = weakref.WeakKeyDictionary()


def acp_stderr_line(host: AcpHost, line: str) -> None:
    """A `qwen --acp` stderr line: MCP servers that did not start are noted for its sessions."""
    found = _MCP_FAILED.search(line + " ")
    if found is not None:
        names = {n.strip() for n in found.group(1).split(",") if n.strip()}
        _UNAVAILABLE.setdefault(host, set()).update(names)


def split_mcp_tool(name: str, server_id: Any, known: list[str]) -> tuple[str, str] | None:
    """(server, tool) of qwen's `mcp__<server>__<tool>`: a server of the thread's (the longest
    name that fits), else the `serverId` qwen gave; None for any other tool."""
    candidates = sorted(known, key=len, reverse=True)
    if isinstance(server_id, str) and server_id:
        candidates.append(server_id)
    for server in candidates:
        prefix = f"mcp__{server}__"
        if name.startswith(prefix) and len(name) > len(prefix):
            return server, name[len(prefix) :]
    return None


class QwenAcpSession(AcpSession):
    permission_kinds = {**AcpSession.permission_kinds, "acceptForSession": "allow_once"}

    def __init__(self, host: AcpHost, settings: b.SessionSettings) -> None:
        super().__init__(host, settings, SPEC.id)
        self._preparing: dict[str, dict[str, Any]] = {}  # call id → its first announcement
        self._turn_usage: TokenUsageBreakdown | None = None
        self._reported: set[str] = set()  # MCP servers whose failure to start was reported
        self._steered = SteerQueue()  # input added to the running turn (`turn/steer`)

    #: A model qwen does not list (its settings' models) comes with `--model` on a new agent.
    model_by_restart = True
    compact_command = "compress"

    def approval_mode(self, policy: b.ApprovalPolicy) -> str | None:
        return "yolo" if policy == "never" else "default"

    async def _apply_effort(self, opening: bool) -> None:
        """qwen's `/effort <tier>` command (no model call; the next requests carry
        `reasoning.effort`), sent as a prompt of its own before the turn."""
        effort = self.settings.effort
        if not effort:
            return  # (qwen has no command back to "unset")
        if effort not in _EFFORTS:
            self.notes.append(
                f"qwen's efforts are {', '.join(_EFFORTS)}; {effort!r} is not applied"
            )
            return
        prompt = [{"type": "text", "text": f"/effort {effort}"}]
        try:
            await self.host.request(
                "session/prompt", {"sessionId": self.session_id, "prompt": prompt}, 30
            )
        except AcpError as exc:
            self.notes.append(f"qwen did not set effort {effort!r}: {exc.message}")

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self._preparing.clear()
        self._turn_usage = None
        failed = _UNAVAILABLE.get(self.host, set())
        for server in self.settings.mcp_servers:
            if server.name in failed and server.name not in self._reported:
                self._reported.add(server.name)
                message = f"MCP server '{server.name}' did not start: qwen: failed to start"
                await ctx.emit(b.Warning(message))
        self._steered.open = True
        try:
            outcome = await super().run_turn(turn, ctx)
            # Input added to the turn that qwen did not take: one more prompt of the turn.
            while (outcome is None or outcome.status == "completed") and (
                rest := self._steered.rest(turn.turn_id)
            ):
                outcome = await super().run_turn(rest, ctx)
        finally:
            self._steered.open = False
            self._steered.clear()
        if self._turn_usage is not None:
            await ctx.emit(b.TokenUsageUpdated(self._usage.add(self._turn_usage)))
        return outcome

    async def steer(self, turn: b.TurnInput) -> None:
        blocks, _ = await input_blocks(turn.input, self.settings.cwd, images=True)
        self._steered.add(turn, blocks)

    def on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk" and not self._text_after_usage(update):
            return
        if kind in ("tool_call", "tool_call_update"):
            known = self._tool_update(update)
            if known is None:
                return
            update = known
        super().on_update(update)

    def _text_after_usage(self, update: dict[str, Any]) -> bool:
        """Count the usage a message chunk reports; whether it carries text as well."""
        meta = update.get("_meta")
        usage = meta.get("usage") if isinstance(meta, dict) else None
        if not isinstance(usage, dict):
            return True
        if self.in_turn:
            call = usage_from_prompt_result({"usage": usage})
            if call is not None:
                turn = self._turn_usage
                self._turn_usage = call if turn is None else add_usage(turn, call)
        content = update.get("content")
        return isinstance(content, dict) and bool(content.get("text"))

    def _tool_update(self, update: dict[str, Any]) -> dict[str, Any] | None:
        """A tool update as the kit's mapper should see it, None to hold or drop it."""
        call_id = str(update.get("toolCallId") or "")
        meta = update.get("_meta")
        if isinstance(meta, dict) and meta.get("phase") == "preparing":
            self._preparing[call_id] = update
            return None
        mapper = self._mapper
        if mapper is not None and call_id in mapper.declined and call_id not in mapper.tools:
            return None  # completed as declined already
        held = self._preparing.pop(call_id, None)
        if held is not None:
            later = {k: v for k, v in update.items() if v is not None}
            update = {**held, **later, "sessionUpdate": "tool_call"}
        out = update.get("rawOutput")
        if isinstance(out, dict) and isinstance(out.get("exitCode"), int):
            update = {**update, "rawOutput": {**out, "metadata": {"exit": out["exitCode"]}}}
        return update

    def mcp_call(self, call: dict[str, Any]) -> McpCall | None:
        meta = call.get("_meta")
        name = meta.get("toolName") if isinstance(meta, dict) else None
        if not isinstance(name, str):
            return None
        known = [s.name for s in self.settings.mcp_servers]
        assert isinstance(meta, dict)
        found = split_mcp_tool(name, meta.get("serverId"), [*known, DYNAMIC_TOOLS_SERVER])
        return McpCall(*found) if found is not None else None

    def holds_tool_calls(self) -> bool:
        return bool(self._preparing)

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == DRAIN_METHOD:
            return self._steered.drain()
        if method == "session/request_permission":
            call = params.get("toolCall")
            if isinstance(call, dict):
                self._preparing.pop(str(call.get("toolCallId") or ""), None)
        return await super().on_request(method, params)

    def turn_error(self, error: AcpError) -> TurnError:
        details = error.data.get("details") if isinstance(error.data, dict) else None
        if isinstance(details, str) and details:
            return prompt_failure(details, self.settings.env)
        return super().turn_error(error)

    async def watch_model_api(self, mapper: AcpTurnMapper) -> None:
        if self.session_id is not None:
            self.give_up(await watch_api_records(self.session_id, self.settings.env))
