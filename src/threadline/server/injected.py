"""`thread/inject_items` for CLIs with no native way: the items (raw Responses API items) as a
transcript block, sent once at the head of the thread's next turn."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["check_items", "transcript"]

_HEAD = (
    "[Earlier conversation, restored by the client. Treat it as what was said before the"
    " message that follows it.]"
)
_TAIL = "[End of the earlier conversation]"
_ROLES = {"user": "User", "assistant": "Assistant", "system": "System", "developer": "System"}


def check_items(items: Sequence[Any]) -> str | None:
    """Why `items` cannot be injected (the -32602 message), or None."""
    if not items:
        return "items must not be empty"
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("type", "message"), str):
            return f"items[{index}] must be a Responses API item (an object with a type)"
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict) and part.get("type") in ("input_image", "image"):
            parts.append("[image]")
    return "\n".join(parts)


def _line(item: dict[str, Any]) -> str | None:
    kind = item.get("type", "message")
    if kind == "message":
        role = _ROLES.get(str(item.get("role")), str(item.get("role", "User")).title())
        text = _text(item.get("content"))
        return f"{role}: {text}" if text else None
    if kind == "function_call":
        return f"Assistant called tool {item.get('name')} with {item.get('arguments', '')}"
    if kind == "function_call_output":
        output = item.get("output")
        return f"Tool result: {output if isinstance(output, str) else json.dumps(output)}"
    if kind == "reasoning":
        return None  # not model-visible text
    return f"[{kind}] {json.dumps(item, ensure_ascii=False)[:2000]}"


def transcript(batches: Sequence[Sequence[Any]]) -> str | None:
    """The transcript block for every injected batch, in order; None when none has text."""
    lines = [line for items in batches for item in items if (line := _line(item))]
    if not lines:
        return None
    return "\n\n".join([_HEAD, *lines, _TAIL])
