"""An interactive claude's session transcript (`<config>/projects/<key>/<session>.jsonl`) as a
turn's items (tui mode).

claude appends one JSON line per event of the conversation (measured on 2.1.332): the
prompt (`type: user`, string content, `promptId`), then per content block an `assistant` line
(`message.id` shared by the blocks of one API message, `message.usage`; no `promptId`), tool
results as `user` lines (`tool_result` blocks plus `toolUseResult`, stream-json's
`tool_use_result`), an interrupt as a `user` text "[Request interrupted by user...]", and
bookkeeping lines of other types. Lines after the turn's prompt line belong to the turn.

Coarser than stream mode: an agent message or a reasoning block arrives whole, as one delta
(the transcript has no partial messages), when claude writes its line; token usage is
reported once, at the end of the turn.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ... import protocol as p
from .. import base as b
from ..kit.usage import add_usage
from .mapping import ClaudeTurnMapper, usage_breakdown

__all__ = ["TranscriptMapper"]

log = logging.getLogger("threadline.backend.claude")

_INTERRUPTED = "[Request interrupted by user"


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [c for c in content or [] if isinstance(c, dict)]


@dataclass
class TranscriptMapper:
    """One turn's transcript lines → events (tool calls and results through stream mode's
    mapper; text and thinking whole)."""

    mapper: ClaudeTurnMapper
    prompt_id: str | None
    #: The turn's prompt line was seen: the lines from now on are the turn's.
    started: bool = False
    interrupted: bool = False
    #: The text of the turn's last agent message so far.
    last_text: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    #: An API failure's message was seen (its HTTP status, when there was one).
    api_error: bool = False
    api_status: int | None = None

    def feed(self, entry: dict[str, Any]) -> list[b.BackendEvent]:
        if not self.started:
            self.started = self.prompt_id is not None and entry.get("promptId") == self.prompt_id
            return []
        if entry.get("isSidechain") or entry.get("isMeta"):
            return []
        kind = entry.get("type")
        message = entry.get("message")
        if not isinstance(message, dict):
            return []
        if kind == "assistant":
            return self._assistant(entry, message)
        if kind == "user":
            texts = [c.get("text", "") for c in _blocks(message.get("content"))]
            if any(str(t).startswith(_INTERRUPTED) for t in texts):
                self.interrupted = True
            stream = {
                "type": "user",
                "message": message,
                "tool_use_result": entry.get("toolUseResult"),
            }
            return self.mapper.feed(stream)
        return []

    def _assistant(self, entry: dict[str, Any], message: dict[str, Any]) -> list[b.BackendEvent]:
        if isinstance(message.get("id"), str) and isinstance(message.get("usage"), dict):
            self.usage[message["id"]] = message["usage"]
        if message.get("model") == "<synthetic>" or entry.get("error"):
            # an API failure claude shows as a message: the turn's error (StopFailure)
            self.api_error = True
            status = entry.get("apiErrorStatus")
            self.api_status = status if isinstance(status, int) else None
            return self.mapper.feed(
                {"type": "assistant", "message": message, "error": entry.get("error")}
            )
        events: list[b.BackendEvent] = []
        tools = []
        base = str(entry.get("uuid") or message.get("id") or "msg")
        for index, block in enumerate(_blocks(message.get("content"))):
            item_id = f"{base}-{index}"
            kind = block.get("type")
            if kind == "text":
                text = str(block.get("text", ""))
                self.last_text = text
                events += [
                    b.ItemStarted(p.AgentMessageItem(id=item_id, text="")),
                    b.AgentMessageDelta(item_id, text),
                    b.ItemCompleted(p.AgentMessageItem(id=item_id, text=text)),
                ]
            elif kind in ("thinking", "redacted_thinking"):
                text = str(block.get("thinking", ""))
                events += [
                    b.ItemStarted(p.ReasoningItem(id=item_id)),
                    b.ReasoningSummaryPartAdded(item_id, 0),
                    b.ReasoningSummaryDelta(item_id, text, 0),
                    b.ItemCompleted(p.ReasoningItem(id=item_id, summary=[text] if text else [])),
                ]
            elif kind in ("tool_use", "server_tool_use"):
                tools.append(block)
        if tools:
            events += self.mapper.feed(
                {"type": "assistant", "message": {**message, "content": tools}}
            )
        return events

    def turn_usage(self) -> p.TokenUsageBreakdown | None:
        """The turn's tokens: its API messages' usage, added up."""
        total = None
        for raw in self.usage.values():
            usage = usage_breakdown(raw)
            if usage is not None:
                total = usage if total is None else add_usage(total, usage)
        return total

    def caught_up(self, last_message: Any) -> bool:
        """Whether the turn's lines include its last message as `Stop` named it."""
        if not isinstance(last_message, str) or not last_message.strip():
            return True
        return self.last_text is not None and self.last_text.strip() == last_message.strip()
