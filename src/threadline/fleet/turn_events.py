"""`TurnEvents`: the caller's side of a turn run on a fleet actor.

It reads the actor's Ray streaming generator (`ObjectRefGenerator`) and yields the turn's
messages one by one, in order, as Codex wire dicts — with `for` or `async for`. When the actor
dies mid-turn the stream still ends with the turn's `turn/completed`: status `failed`, and an
error saying so and what to do (resume the thread on another actor).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from .host import HostClosed
from .wire import Message, decode, failed_turn, is_server_request

__all__ = ["ACTOR_GONE", "RequestHandler", "TurnEvents", "actor_died"]

log = logging.getLogger("threadline.fleet")

#: Answers a server request (the message as the stream carries it) with its result; raising
#: declines.
RequestHandler = Callable[[Message], Any]


#: What ends a turn or a request because the actor is gone, or is going: Ray's report of its
#: death, or its server having exited (the actor then exits too).
ACTOR_GONE = (RayActorError, HostClosed)


def actor_died(error: BaseException) -> str:
    """The readable reason a turn or request failed because its actor is gone."""
    if isinstance(error, HostClosed):
        reason = "its threadline server exited"
    else:
        reason = " ".join(str(error).split())
        if len(reason) > 500:
            reason = reason[:500] + "…"
    return f"the threadline actor died: {reason}; resume the thread on another actor"


class TurnEvents:
    """The messages of one turn: notifications and server requests, ending with
    `turn/completed`. A server request waits for `Fleet.answer` (or the `on_request`
    handler given to `Fleet.run_turn`); unanswered, it is declined after the fleet's
    approval timeout."""

    def __init__(
        self,
        actor: Any,
        thread_id: str,
        refs: Any,
        on_request: RequestHandler | None,
        on_death: Callable[[BaseException], None],
    ) -> None:
        """`refs`: the `ObjectRefGenerator` of `actor.run_turn`; `on_death` learns that the
        actor died."""
        self._actor = actor
        self._refs = refs
        self._on_request = on_request
        self._on_death = on_death
        self.thread_id = thread_id
        #: The turn's id, once its first notification naming it arrived.
        self.turn_id: str | None = None
        #: The turn's `turn/completed`, once read.
        self.completed: Message | None = None
        self._closed = False

    def __iter__(self) -> Iterator[Message]:
        try:
            for ref in self._refs:
                yield from self._take(decode(ray.get(ref)))
        except ACTOR_GONE as exc:
            yield self._died(exc)
        finally:
            self.close()

    async def __aiter__(self) -> AsyncIterator[Message]:
        try:
            async for ref in self._refs:
                for message in self._take(decode(await ref)):
                    yield message
        except ACTOR_GONE as exc:
            yield self._died(exc)
        finally:
            self.close()

    def close(self) -> None:
        """Stop reading the turn (leaving a `for` early, or dropping the iterator, does it
        too): its pending and later server requests are declined; the turn runs on."""
        if self.completed is None and not self._closed and ray.is_initialized():
            self._closed = True
            with suppress(*ACTOR_GONE, GetTimeoutError):
                ray.get(self._actor.abandon.remote(self.thread_id, self.turn_id), timeout=10)

    def _take(self, batch: list[Message]) -> list[Message]:
        for message in batch:
            params = message.get("params") or {}
            if is_server_request(message):
                if self._on_request is not None:
                    self._answer(message)
                continue
            if self.turn_id is None:
                self.turn_id = params.get("turnId") or (params.get("turn") or {}).get("id")
            if message["method"] == "turn/completed":
                self.completed = message
        return batch

    def _answer(self, request: Message) -> None:
        assert self._on_request is not None
        try:
            result = self._on_request(request)
        except Exception:  # fail closed: no answer is a decline (or a failed tool call)
            log.exception("request handler failed for %s; declining", request["method"])
            result = None
        self._actor.answer.remote(request["id"], result)

    def _died(self, error: BaseException) -> Message:
        self._on_death(error)
        self.completed = failed_turn(self.thread_id, self.turn_id, actor_died(error))
        return self.completed
