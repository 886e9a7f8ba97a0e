"""Requests that act on a thread's conversation (Codex 0.169.0): `turn/steer`,
`thread/compact/start`, `thread/inject_items`."""

from __future__ import annotations

from typing import Any

from .base import Base
from .inputs import UserInput

__all__ = [
    "ThreadCompactStartParams",
    "ThreadCompactStartResponse",
    "ThreadInjectItemsParams",
    "ThreadInjectItemsResponse",
    "TurnSteerParams",
    "TurnSteerResponse",
]


class TurnSteerParams(Base, kw_only=True):
    thread_id: str
    input: list[UserInput]
    #: The running turn's id: the request fails when another turn (or none) is running.
    expected_turn_id: str
    client_user_message_id: str | None = None


class TurnSteerResponse(Base, kw_only=True):
    turn_id: str


class ThreadCompactStartParams(Base, kw_only=True):
    thread_id: str


class ThreadCompactStartResponse(Base, kw_only=True):
    pass


class ThreadInjectItemsParams(Base, kw_only=True):
    thread_id: str
    #: Raw Responses API items (`{"type": "message", "role": "user"|"assistant", "content":
    #: [...]}` and the like) for the thread's model-visible history.
    items: list[Any]


class ThreadInjectItemsResponse(Base, kw_only=True):
    pass
