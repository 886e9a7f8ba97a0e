"""What a client sees in the events of a turn: its items, its answer text, the server's
requests (and ways to answer them), and `turn`, which runs one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.client import Message, ServerProcess, assert_items_balanced, notifications

__all__ = [
    "agent_text",
    "answer_by_method",
    "ask_order",
    "decide",
    "is_method",
    "items_completed",
    "items_started",
    "no_requests",
    "only_turn",
    "requests_in",
    "resolved_ids",
    "status",
    "turn",
]


def no_requests(message: Message) -> Any:
    raise AssertionError(f"unexpected server request: {message}")


def decide(decision: str) -> Callable[[Message], Any]:
    """Answer every approval request with `decision`."""
    return lambda _m: {"decision": decision}


async def turn(
    srv: ServerProcess,
    tid: str,
    text: str,
    on_request: Callable[[Message], Any] = no_requests,
    timeout: float = 60,
) -> tuple[dict[str, Any], list[Any]]:
    """Run one turn; return (the completed turn, its events: every thread's). The thread's
    items must pair up (another thread's turn may still run)."""
    done, events = await srv.run_turn(tid, text, on_request=on_request, timeout=timeout)
    own = [
        e for e in events if isinstance(e, dict) and (e.get("params") or {}).get("threadId") == tid
    ]
    assert_items_balanced(own)
    return done["params"]["turn"], events


def status(t: dict[str, Any]) -> str:
    return str(t["status"])


def resolved_ids(events: list[Any]) -> list[Any]:
    return [e["params"]["requestId"] for e in notifications(events, "serverRequest/resolved")]


def ask_order(events: list[Any], ask: Message, item_id: str) -> list[Any]:
    """The methods, in order, of the request `ask` and of the notifications about item
    `item_id` (its start and completion): where the request stands in the item's life."""
    return [
        e.get("method")
        for e in events
        if isinstance(e, dict)
        and (
            e.get("id") == ask["id"] or (e.get("params") or {}).get("item", {}).get("id") == item_id
        )
    ]


def is_method(method: str) -> Callable[[Any], bool]:
    return lambda e: isinstance(e, dict) and e.get("method") == method


def only_turn(events: list[Any], turn_id: str) -> bool:
    """Whether every turn event among `events` belongs to `turn_id`."""
    return all(
        e["params"].get("turnId", turn_id) == turn_id
        for e in events
        if isinstance(e, dict) and isinstance(e.get("params"), dict)
    )


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
