"""Input added to a running qwen turn (`turn/steer`).

qwen asks its ACP client for "messages queued mid-turn" (`craft/drainMidTurnQueue`, measured
on 0.24.4) after each tool round, before it calls the model again, and sends what it gets
with the tool results. Input nobody took by the time qwen answers the prompt (the model's last
round called no tool) goes to qwen as one more prompt of the same turn."""

from __future__ import annotations

from typing import Any

from ...protocol import UserInput
from .. import base as b

__all__ = ["DRAIN_METHOD", "SteerQueue"]

DRAIN_METHOD = "craft/drainMidTurnQueue"


class SteerQueue:
    def __init__(self) -> None:
        #: Whether a turn runs (steering is refused otherwise).
        self.open = False
        self._pending: list[tuple[b.TurnInput, list[dict[str, Any]]]] = []

    def add(self, turn: b.TurnInput, blocks: list[dict[str, Any]]) -> None:
        """`turn`'s input, as `blocks` (its text first)."""
        if not self.open:
            raise b.BackendError("qwen: no turn is running to add input to")
        text = [{"type": "text", "text": turn.text}] if turn.text else []
        self._pending.append((turn, [*text, *blocks]))

    def drain(self) -> dict[str, Any]:
        """The answer to qwen's `craft/drainMidTurnQueue`: each input as one item."""
        items = [{"content": blocks} for _, blocks in self._pending if blocks]
        self._pending.clear()
        return {"items": items, "hasQueuedPrompt": False}

    def rest(self, turn_id: str) -> b.TurnInput | None:
        """What qwen did not take, as one prompt (None: nothing)."""
        if not self._pending:
            return None
        inputs: list[UserInput] = [i for turn, _ in self._pending for i in turn.input]
        text = "\n\n".join(turn.text for turn, _ in self._pending if turn.text)
        self._pending.clear()
        return b.TurnInput(turn_id, inputs, text)

    def clear(self) -> None:
        self._pending.clear()
