"""Stream mode's own control requests to the live CLI: what applies a new setting (measured on
claude 2.1.332: the next model request carries it), and the answers threadline waits for."""

from __future__ import annotations

from typing import Any

import trio

from .. import base as b
from .invocation import effort_level

__all__ = ["INTERRUPT", "Replies", "Reply", "live_request", "taken_inputs"]

#: Stop the running turn, and the input queued behind it (a steer not taken in yet): else
#: it would run as a turn of its own once the interrupted one ended.
INTERRUPT = {"subtype": "interrupt", "cancel_queued": True}


def live_request(field: str, settings: b.SessionSettings) -> dict[str, Any] | None:
    """The control request that applies the override `field` (its new value is in
    `settings`) to the running CLI; None when only a restart can."""
    if field == "model":
        # null: the CLI's own default (not the `--model` it was started with)
        model = settings.model if settings.model and settings.model != "default" else None
        return {"subtype": "set_model", "model": model}
    if field == "effort":
        # the session-scoped settings layer `--effort` writes too; null: the CLI's default
        level = effort_level(settings.effort)
        return {"subtype": "apply_flag_settings", "settings": {"effortLevel": level}}
    return None


def taken_inputs(message: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(uuids of user messages claude took into a turn, those it dropped without running
    them) that `message` reports."""
    taken = message.get("user_message_uuids")
    done = {str(u) for u in taken} if isinstance(taken, list) else set()
    dropped = set()
    if message.get("type") == "command_lifecycle":
        state, command = message.get("state"), str(message.get("command_uuid"))
        if state in ("started", "completed"):
            done.add(command)
        elif state in ("cancelled", "discarded", "refused"):
            dropped.add(command)
    return done, dropped


class Reply:
    """The answer to one control request, once `arrived` is set (None: the CLI is gone)."""

    def __init__(self) -> None:
        self.arrived = trio.Event()
        self.response: dict[str, Any] | None = None


class Replies:
    """Control requests of threadline's whose answer someone waits for, by request id: the
    stdout reader hands each answer over (`deliver`) instead of queueing it for the turn."""

    def __init__(self) -> None:
        self._waiting: dict[str, Reply] = {}

    def expect(self, request_id: str) -> Reply:
        reply = self._waiting[request_id] = Reply()
        return reply

    def forget(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)

    def deliver(self, message: dict[str, Any]) -> bool:
        """True when `message` answers a request someone waits for (it is theirs now)."""
        if message.get("type") != "control_response":
            return False
        response = message.get("response")
        if not isinstance(response, dict):
            return False
        reply = self._waiting.pop(str(response.get("request_id")), None)
        if reply is None:
            return False
        reply.response = response
        reply.arrived.set()
        return True

    def close(self) -> None:
        """The CLI is gone: nothing waits for an answer any more (each gets None)."""
        for reply in self._waiting.values():
            reply.arrived.set()
        self._waiting.clear()
