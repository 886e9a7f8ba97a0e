"""ACP `session/update` notifications → threadline items and events; token usage from prompt
results."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .... import protocol as p
from ... import base as b
from ..diff import file_diff
from ..mcp import is_dynamic, mcp_item
from ..plan import todo_steps
from ..usage import UsageFields, read_usage

__all__ = ["AcpTurnMapper", "McpCall", "usage_from_prompt_result"]


@dataclass(frozen=True)
class McpCall:
    """What a backend knows of an ACP tool call: a call of MCP server `server`'s tool `tool`
    (its own name, without the agent's prefix) with `arguments`."""

    server: str
    tool: str
    arguments: Any = None


def _no_mcp(call: dict[str, Any]) -> McpCall | None:
    return None


def _content_text(content: Any) -> str:
    """Text of an ACP ContentBlock or ToolCallContent list."""
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", ""))
        if content.get("type") == "content":
            return _content_text(content.get("content"))
        return ""
    if isinstance(content, list):
        return "".join(_content_text(c) for c in content)
    return ""


def _unified(path: str, old: str | None, new: str) -> str:
    # An empty old text is shown as a new file too.
    return file_diff(path.lstrip("/"), old or None, new)


def _diff_changes(content: Any) -> list[p.FileUpdateChange]:
    changes = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict) or block.get("type") != "diff":
            continue
        path = str(block.get("path", ""))
        old, new = block.get("oldText"), str(block.get("newText") or "")
        meta_kind = (block.get("_meta") or {}).get("kind")
        if meta_kind == "delete":
            kind: p.PatchKindAdd | p.PatchKindDelete | p.PatchKindUpdate = p.PatchKindDelete()
        elif meta_kind == "add" or not old:
            kind = p.PatchKindAdd()
        else:
            kind = p.PatchKindUpdate()
        changes.append(p.FileUpdateChange(path=path, kind=kind, diff=_unified(path, old, new)))
    return changes


@dataclass
class AcpTurnMapper:
    """Per-turn state: turns the session/update stream into item events."""

    cwd: str
    backend_id: str
    new_id: Callable[[], str]
    events: list[b.BackendEvent] = field(default_factory=list)
    tools: dict[str, p.ThreadItem] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    declined: set[str] = field(default_factory=set)
    _message: p.AgentMessageItem | None = None
    _message_key: Any = None
    _message_text: list[str] = field(default_factory=list)
    _thought: p.ReasoningItem | None = None
    _thought_text: list[str] = field(default_factory=list)
    #: Set once the turn is being cancelled: a command that "completes" after that was cut
    #: short (Gemini reports its killed shell as completed, "Command cancelled by user.").
    cancelled: bool = False
    #: True once the agent announced a tool call this turn (its model answer was complete).
    tool_seen: bool = False
    #: The backend's reading of a tool call (`AcpSession.mcp_call`): an MCP tool's call, or None.
    mcp_call: Callable[[dict[str, Any]], McpCall | None] = _no_mcp
    #: Calls of threadline's own tool server (`kit.mcp.is_dynamic`): no item of ours.
    hidden: set[str] = field(default_factory=set)

    def take(self) -> list[b.BackendEvent]:
        out, self.events = self.events, []
        return out

    def close_text(self) -> None:
        if self._message is not None:
            self._message.text = "".join(self._message_text)
            self.events.append(b.ItemCompleted(self._message))
            self._message, self._message_text = None, []
        if self._thought is not None:
            text = "".join(self._thought_text)
            self._thought.summary = [text] if text else []
            self.events.append(b.ItemCompleted(self._thought))
            self._thought, self._thought_text = None, []

    def feed(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _content_text(update.get("content"))
            if text.startswith("[MODE_UPDATE]"):
                # Gemini reports mode switches as message text: a notice, not the answer.
                self.events.append(
                    b.Warning(
                        f"{self.backend_id} mode changed: {text[len('[MODE_UPDATE]') :].strip()}"
                    )
                )
                return
            key = update.get("messageId")
            if self._thought is not None:
                self.close_text()
            if self._message is not None and key is not None and key != self._message_key:
                self.close_text()
            if self._message is None:
                self._message = p.AgentMessageItem(id=self.new_id(), text="")
                self._message_key = key
                self.events.append(b.ItemStarted(p.AgentMessageItem(id=self._message.id, text="")))
            if text:
                self._message_text.append(text)
                self.events.append(b.AgentMessageDelta(self._message.id, text))
        elif kind == "agent_thought_chunk":
            text = _content_text(update.get("content"))
            if self._message is not None:
                self.close_text()
            if self._thought is None:
                self._thought = p.ReasoningItem(id=self.new_id())
                self.events.append(b.ItemStarted(p.ReasoningItem(id=self._thought.id)))
                self.events.append(b.ReasoningSummaryPartAdded(self._thought.id, 0))
            if text:
                self._thought_text.append(text)
                self.events.append(b.ReasoningSummaryDelta(self._thought.id, text, 0))
        elif kind in ("tool_call", "tool_call_update"):
            self.close_text()
            self._tool(update)
        elif kind == "plan":
            self.events.append(b.PlanUpdated(todo_steps(update.get("entries"))))
        # user_message_chunk (history replay), available_commands_update, usage_update,
        # config_option_update, current_mode_update: nothing for the client here.

    def is_hidden(self, call: dict[str, Any]) -> bool:
        """Whether the call is one of threadline's own tools (`kit.mcp.is_dynamic`): threadline's
        tool host reports it, so the turn shows no item for it."""
        call_id = str(call.get("toolCallId") or "")
        if call_id in self.hidden:
            return True
        if call_id in self.tools:
            return False
        mcp = self.mcp_call(call)
        if mcp is not None and is_dynamic(mcp.server):
            self.hidden.add(call_id)
            return True
        return False

    def tool_item(self, call: dict[str, Any]) -> p.ThreadItem:
        """The item for an ACP tool call (from a tool_call or a permission request)."""
        call_id = str(call.get("toolCallId") or self.new_id())
        kind = call.get("kind")
        raw = call.get("rawInput") if isinstance(call.get("rawInput"), dict) else {}
        assert isinstance(raw, dict)
        mcp = self.mcp_call(call)
        if mcp is not None:
            arguments = mcp.arguments if mcp.arguments is not None else (raw or None)
            return mcp_item(call_id, mcp.server, mcp.tool, arguments)
        title = str(call.get("title") or "")
        if kind == "execute":
            command = str(raw.get("command") or title)
            cwd = str(raw.get("cwd") or raw.get("workdir") or raw.get("dir_path") or self.cwd)
            return p.CommandExecutionItem(
                id=call_id,
                command=command,
                cwd=cwd,
                status="inProgress",
                command_actions=[p.UnknownAction(command=command)],
            )
        if kind in ("edit", "delete", "move"):
            changes = _diff_changes(call.get("content"))
            if not changes:
                locations = [
                    loc.get("path")
                    for loc in call.get("locations") or []
                    if isinstance(loc, dict) and isinstance(loc.get("path"), str)
                ]
                # (Gemini's title is prose, "Writing to notes.txt": the location is the path.)
                path = str(
                    raw.get("filePath") or raw.get("file_path") or next(iter(locations), title)
                )
                if path and not os.path.isabs(path):
                    path = os.path.join(self.cwd, path)
                new = raw.get("content")
                changes = [
                    p.FileUpdateChange(
                        path=path,
                        kind=p.PatchKindAdd() if not os.path.exists(path) else p.PatchKindUpdate(),
                        diff=_unified(path, None, str(new)) if isinstance(new, str) else "",
                    )
                ]
            return p.FileChangeItem(id=call_id, changes=changes, status="inProgress")
        if kind == "fetch" and "search" in title.lower():
            query = str(raw.get("query") or title)
            return p.WebSearchItem(
                id=call_id, query=query, action=p.WebSearchActionSearch(query=query)
            )
        return p.DynamicToolCallItem(
            id=call_id,
            tool=title or str(kind or "tool"),
            arguments=raw or None,
            status="inProgress",
            namespace=self.backend_id,
        )

    def start_tool(self, call: dict[str, Any]) -> p.ThreadItem:
        """The call's item, started at its first sight. A later sight (an update, a permission
        request) may bring the command the first one lacked (OpenCode's first `tool_call` has
        only the tool's name): the item takes it."""
        call_id = str(call.get("toolCallId") or "")
        item = self.tools.get(call_id)
        self.tool_seen = True
        if item is None:
            item = self.tool_item(call)
            self.tools[item.id] = item
            self.events.append(b.ItemStarted(item))
        raw = call.get("rawInput")
        if isinstance(item, p.McpToolCallItem) and isinstance(raw, dict) and raw:
            item.arguments = raw  # (OpenCode's first sight has no arguments)
        if (
            isinstance(item, p.CommandExecutionItem)
            and isinstance(raw, dict)
            and raw.get("command")
        ):
            item.command = str(raw["command"])
            item.command_actions = [p.UnknownAction(command=item.command)]
        return item

    def _tool(self, update: dict[str, Any]) -> None:
        if self.is_hidden(update):
            return
        kind = update.get("sessionUpdate")
        call_id = str(update.get("toolCallId") or "")
        item = self.start_tool(update)
        status = update.get("status")
        text = _content_text(update.get("content"))
        # Output comes in updates only: a first `tool_call`'s content describes the call
        # (Gemini: "[current working directory …] (description)"), it is not output.
        if isinstance(item, p.CommandExecutionItem) and text and kind == "tool_call_update":
            seen = self.outputs.get(call_id, "")
            # OpenCode sends growing snapshots of the output: forward only what is new.
            if text.startswith(seen) and len(text) > len(seen):
                self.events.append(b.CommandOutputDelta(item.id, text[len(seen) :]))
            self.outputs[call_id] = text
        if status in ("completed", "failed"):
            self.complete_tool(call_id, failed=status == "failed", update=update)

    def complete_tool(
        self,
        call_id: str,
        *,
        failed: bool,
        declined: bool = False,
        update: dict[str, Any] | None = None,
    ) -> None:
        item = self.tools.pop(call_id, None)
        if item is None:
            return
        update = update or {}
        text = _content_text(update.get("content")) or self.outputs.get(call_id, "")
        raw_out = update.get("rawOutput") if isinstance(update.get("rawOutput"), dict) else {}
        assert isinstance(raw_out, dict)
        declined = declined or call_id in self.declined
        if isinstance(item, p.CommandExecutionItem):
            meta = raw_out.get("metadata") if isinstance(raw_out.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            out = raw_out.get("output") if isinstance(raw_out.get("output"), str) else None
            item.aggregated_output = out if out is not None else (text or None)
            code = meta.get("exit")
            item.exit_code = code if isinstance(code, int) else None
            failed = failed or self.cancelled
            item.status = "declined" if declined else ("failed" if failed else "completed")
        elif isinstance(item, p.FileChangeItem):
            changes = _diff_changes(update.get("content"))
            if changes:
                item.changes = changes
            item.status = "declined" if declined else ("failed" if failed else "completed")
        elif isinstance(item, p.DynamicToolCallItem):
            item.status = "failed" if failed or declined else "completed"
            item.success = not (failed or declined)
            item.content_items = [p.ToolOutputText(text=text)] if text else []
        elif isinstance(item, p.McpToolCallItem):
            error = raw_out.get("error")
            reason = error if isinstance(error, str) and error else text
            _finish_mcp(item, text, reason, failed=failed or self.cancelled, declined=declined)
        self.events.append(b.ItemCompleted(item))


def _finish_mcp(
    item: p.McpToolCallItem, text: str, reason: str, *, failed: bool, declined: bool
) -> None:
    """An MCP tool call's end: its output as MCP text content, or the error (`reason`)."""
    if declined:
        item.status, item.error = "failed", p.McpToolCallError(message="declined by the user")
    elif failed:
        item.status = "failed"
        item.error = p.McpToolCallError(message=reason or "the MCP tool call failed")
    else:
        item.status = "completed"
        item.result = p.McpToolCallResult(content=[{"type": "text", "text": text}] if text else [])


#: OpenCode's `usage` in a prompt result.
_ACP_USAGE = UsageFields(
    input="inputTokens",
    output="outputTokens",
    total="totalTokens",
    cached="cachedReadTokens",
    reasoning="thoughtTokens",
    cache_write="cachedWriteTokens",
)
#: Gemini's `_meta.quota.token_count` in a prompt result.
_QUOTA_USAGE = UsageFields(input="input_tokens", output="output_tokens")


def usage_from_prompt_result(result: dict[str, Any]) -> p.TokenUsageBreakdown | None:
    """The turn's usage from the agent's answer to `session/prompt`, when it reports one."""
    if isinstance(result.get("usage"), dict):
        return read_usage(result["usage"], _ACP_USAGE)
    quota = ((result.get("_meta") or {}).get("quota") or {}).get("token_count")
    return read_usage(quota, _QUOTA_USAGE)
