"""What a client sees in the events of a turn: its items, its answer text, the server's
requests (and a way to answer them by method)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.client import Message, notifications

__all__ = [
    "agent_text",
    "answer_by_method",
    "items_completed",
    "items_started",
    "requests_in",
]


def _items(events: list[Any], method: str, item_type: str | None) -> list[dict[str, Any]]:
    return [
        e["params"]["item"]
        for e in notifications(events, method)
        if item_type is None or e["params"]["item"]["type"] == item_type
    ]


def items_started(events: list[Any], item_type: str | None = None) -> list[dict[str, Any]]:
    return _items(events, "item/started", item_type)


def items_completed(events: list[Any], item_type: str | None = None) -> list[dict[str, Any]]:
    return _items(events, "item/completed", item_type)


def agent_text(events: list[Any]) -> str:
    """What a client shows as the answer: the concatenated agentMessage deltas."""
    return "".join(e["params"]["delta"] for e in notifications(events, "item/agentMessage/delta"))


def requests_in(events: list[Any], method: str | None = None) -> list[Message]:
    """Server→client requests among `events`."""
    return [
        e
        for e in events
        if isinstance(e, dict)
        and "id" in e
        and "method" in e
        and (method is None or e["method"] == method)
    ]


def answer_by_method(answers: dict[str, Callable[[Message], Any]]) -> Callable[[Message], Any]:
    def on_request(message: Message) -> Any:
        handler = answers.get(message["method"])
        if handler is None:
            raise AssertionError(f"unexpected server request {message['method']}: {message}")
        return handler(message)

    return on_request
