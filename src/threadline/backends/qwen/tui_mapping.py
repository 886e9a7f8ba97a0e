"""Qwen Code's dual output (`--json-file`, tui mode) as a turn's events.

qwen 0.24.4 writes Claude Code's stream-json shapes while its TUI runs (measured): per turn a
`user` message with the prompt's text, per model call `stream_event`s (`message_start`,
`content_block_start/delta/stop`, `message_stop`) and one `assistant` message with the whole
content (`text`, `tool_use` blocks) and its `usage`, tool results as `user` messages with
`tool_result` blocks, and an approval as `control_request can_use_tool` /
`control_response`. So claude's stream mapper reads it, with qwen's tool names and results:
- a tool is named `run_shell_command`, `write_file`, `edit`, `todo_write`, ... (qwen's
  `ToolNames`); the ones claude's mapper knows by another name are renamed for it;
- a shell's result is qwen's text for the model, `Command: ...\\nDirectory: ...\\nOutput:
  ...\\nError: ...\\nExit Code: N\\n...` (`Output: (empty)` for none), not claude's fields.
- an API error that ends the turn comes as an agent message streamed in one delta, "[API
  Error: <status> <message>]" (the `StopFailure` hook reports it too): it is not an agent
  message of the turn, so a text item is announced with its first delta, not before.
The lines before the turn's prompt message are not the turn's (see `QwenTuiMapper.started`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ... import protocol as p
from .. import base as b
from ..claude.mapping import ClaudeTurnMapper, usage_breakdown
from ..kit.usage import add_usage

__all__ = ["CLAUDE_NAMES", "QwenTuiMapper", "claude_name"]

#: qwen's tool names that claude's mapper knows by claude's.
CLAUDE_NAMES = {
    "run_shell_command": "Bash",
    "write_file": "Write",
    "edit": "Edit",
    "todo_write": "TodoWrite",
    "web_search": "WebSearch",
}
_OUTPUT = re.compile(r"^Output: (.*?)\n(?:Error|Exit Code|Signal|Background PIDs): ", re.S | re.M)
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)
_EMPTY = "(empty)"
#: How qwen shows an API error as the turn's text.
_API_ERROR = "[API Error:"


def claude_name(tool: str) -> str:
    return CLAUDE_NAMES.get(tool, tool)


def _shell_result(text: str) -> tuple[str, int | None]:
    """(the output, the exit code) of qwen's text for a shell's result."""
    found = _OUTPUT.search(text)
    output = found.group(1) if found else text
    code = _EXIT.search(text)
    return ("" if output.strip() == _EMPTY else output), (int(code.group(1)) if code else None)


@dataclass
class QwenTuiMapper(ClaudeTurnMapper):
    backend_id: str = "qwen"
    #: The turn's prompt message was seen: the lines from now on are the turn's.
    started: bool = False
    #: The text of the turn's last agent message so far.
    last_text: str | None = None
    turn_usage: p.TokenUsageBreakdown | None = None
    #: Text items announced by qwen but not yet to the client (until their first delta).
    _held: dict[str, b.BackendEvent] = field(default_factory=dict)
    #: Text items that are an API error's text, not the agent's.
    _errors: set[str] = field(default_factory=set)

    def feed(self, msg: dict[str, Any]) -> list[b.BackendEvent]:
        if not self.started:
            self.started = msg.get("type") == "user" and _is_prompt(msg)
            return []
        if msg.get("type") == "assistant":
            self._count(msg.get("message"))
        return [out for e in super().feed(msg) for out in self._text_event(e)]

    def _text_event(self, event: b.BackendEvent) -> list[b.BackendEvent]:
        """`event`, held or dropped so that an API error's text makes no item."""
        if isinstance(event, b.ItemStarted) and isinstance(event.item, p.AgentMessageItem):
            self._held[event.item.id] = event
            return []
        if isinstance(event, b.AgentMessageDelta):
            item_id, text = event.item_id, event.delta
        elif isinstance(event, b.ItemCompleted) and isinstance(event.item, p.AgentMessageItem):
            item_id, text = event.item.id, event.item.text
        else:
            return [event]
        if item_id in self._errors:
            return []
        held = self._held.pop(item_id, None)
        if held is not None and text.startswith(_API_ERROR):
            self._errors.add(item_id)
            return []
        return [event] if held is None else [held, event]

    def _count(self, message: Any) -> None:
        if not isinstance(message, dict):
            return
        texts = [
            str(block.get("text") or "")
            for block in message.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        if texts and not texts[-1].startswith(_API_ERROR):
            self.last_text = texts[-1]
        usage = usage_breakdown(message.get("usage"))
        if usage is not None:
            self.turn_usage = (
                usage if self.turn_usage is None else add_usage(self.turn_usage, usage)
            )

    def caught_up(self, last_message: Any) -> bool:
        """Whether the turn's last agent message (a `Stop` hook names it) was read."""
        if not isinstance(last_message, str) or not last_message.strip():
            return True
        return (self.last_text or "").strip() == last_message.strip()

    def declined(self) -> list[b.BackendEvent]:
        """The calls still open that were declined (qwen reports no result for them)."""
        events: list[b.BackendEvent] = []
        for tool_id, item in list(self.tools.items()):
            if self.decisions.get(tool_id) in ("decline", "cancel"):
                del self.tools[tool_id]
                events.append(b.ItemCompleted(self._complete(item, "", None, False, True)))
        return events

    def _tool_use(self, block: dict[str, Any]) -> list[b.BackendEvent]:
        return super()._tool_use({**block, "name": claude_name(str(block.get("name") or ""))})

    def _complete(
        self, item: p.ThreadItem, content: Any, structured: Any, is_error: bool, declined: bool
    ) -> p.ThreadItem:
        if not isinstance(item, p.CommandExecutionItem) or declined:
            return super()._complete(item, content, structured, is_error, declined)
        text = content if isinstance(content, str) else _texts(content)
        output, code = _shell_result(text)
        item.aggregated_output = output
        item.exit_code = code if code is not None else (None if is_error else 0)
        item.status = "failed" if is_error or (code is not None and code != 0) else "completed"
        return item


def _texts(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(c.get("text") or "") for c in content if isinstance(c, dict) and c.get("type") == "text"
    )


def _is_prompt(msg: dict[str, Any]) -> bool:
    """A `user` message that is a prompt (text), not tool results."""
    content = (msg.get("message") or {}).get("content")
    if isinstance(content, str):
        return True
    return isinstance(content, list) and any(
        isinstance(c, dict) and c.get("type") == "text" for c in content
    )
