"""`Fleet`: N `ThreadlineActor`s behind one front — threads placed on the least-loaded live
actor (round-robin among equals), every later call for a thread sent to its actor.

Only Ray's actor and streaming-generator APIs are used: Ray schedules the actors (on any node
of the cluster `ray.init()` joined), carries the calls and reports an actor's death
(`RayActorError`). A dead actor's running turns end `failed` (see `TurnEvents`); its slot is
refilled by a new actor, and `resume(thread)` reopens each of its threads on a live actor.
Thread state lives in `THREADLINE_HOME` (`home`), which every actor must see: a directory on
this machine for a one-machine cluster, a shared filesystem across machines.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self

import ray
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from .actor import ThreadlineActor
from .turn_events import ACTOR_GONE, RequestHandler, TurnEvents, actor_died
from .wire import Message

__all__ = ["ActorLost", "Fleet", "Slot"]


class ActorLost(Exception):
    """The actor a request went to has died; resume the thread on another actor."""


@dataclass
class Slot:
    """One actor of the fleet and the threads placed on it."""

    index: int
    handle: Any
    threads: set[str] = field(default_factory=set)
    dead: bool = False
    #: The actor's `info()` (its pid, node and children: the server), asked for at its start.
    info_ref: Any = None

    def info(self) -> dict[str, Any] | None:
        """The actor's `info()`; None when it died before answering."""
        try:
            info: dict[str, Any] = ray.get(self.info_ref, timeout=10)
        except (RayActorError, GetTimeoutError):
            return None
        return info


class Fleet:
    """`size` threadline servers, one per Ray actor. `home` is their shared THREADLINE_HOME;
    `env` is added to each server's environment (e.g. `{"AGENT_BACKEND": "mock"}`).
    `max_concurrency` bounds an actor's concurrent calls: its running turns plus requests.
    Call `ray.init()` first (or let Ray start a local cluster)."""

    def __init__(
        self,
        size: int = 2,
        *,
        home: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        argv: Sequence[str] | None = None,
        approval_timeout: float = 600.0,
        max_concurrency: int = 64,
        actor_options: Mapping[str, Any] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError("a fleet needs at least one actor")
        self._env = dict(env or {})
        if home is not None:
            self._env["THREADLINE_HOME"] = os.fspath(home)
        self._args = (self._env, list(argv) if argv else None, approval_timeout)
        options = {"max_concurrency": max_concurrency, **(actor_options or {})}
        self._actor_class = ray.remote(ThreadlineActor).options(**options)
        self._lock = threading.RLock()
        self._turn = itertools.count()
        self._slots = [self._new_slot(i) for i in range(size)]
        self._where: dict[str, Slot] = {}
        # Every actor has started its server (an actor that cannot start raises here).
        ray.get([slot.info_ref for slot in self._slots])

    def _new_slot(self, index: int) -> Slot:
        handle: Any = self._actor_class.remote(*self._args)
        return Slot(index, handle, info_ref=handle.info.remote())

    # -- placement -------------------------------------------------------------------------------

    @property
    def actors(self) -> list[Any]:
        """The live actors' handles, by slot."""
        with self._lock:
            return [slot.handle for slot in self._slots if not slot.dead]

    def actor_of(self, thread_id: str) -> Any:
        """The handle of the actor serving `thread_id`."""
        return self._slot_of(thread_id).handle

    def _slot_of(self, thread_id: str) -> Slot:
        with self._lock:
            slot = self._where.get(thread_id)
        if slot is None:
            raise KeyError(f"thread {thread_id} is not on this fleet: start or resume it")
        return slot

    def _place(self) -> Slot:
        with self._lock:
            start = next(self._turn)
            live = [slot for slot in self._slots if not slot.dead]
            n = len(self._slots)
            return min(live, key=lambda s: (len(s.threads), (s.index - start) % n))

    def _assign(self, thread_id: str, slot: Slot) -> None:
        with self._lock:
            old = self._where.get(thread_id)
            if old is not None:
                old.threads.discard(thread_id)
            slot.threads.add(thread_id)
            self._where[thread_id] = slot

    def _lost(self, slot: Slot, error: BaseException) -> None:
        """`slot`'s actor died: a new actor takes its place; its threads stay mapped to the
        dead slot until `resume`."""
        if isinstance(error, ActorUnavailableError):
            return  # unreachable for now, not dead
        with self._lock:
            if slot.dead or self._slots[slot.index] is not slot:
                return
            slot.dead = True
            self._slots[slot.index] = self._new_slot(slot.index)
        ray.kill(slot.handle)  # dead already, or about to exit with its server

    def _get(self, slot: Slot, ref: Any) -> Any:
        try:
            return ray.get(ref)
        except ActorUnavailableError:
            raise  # unreachable for now (Ray retries), not dead
        except ACTOR_GONE as exc:
            self._lost(slot, exc)
            raise ActorLost(actor_died(exc)) from exc

    # -- threads ---------------------------------------------------------------------------------

    def start_thread(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`thread/start` (wire params: `cwd`, `model`, `approvalPolicy`, ...) on the
        least-loaded actor; returns its result (`thread.id`)."""
        slot = self._place()
        result: dict[str, Any] = self._get(slot, slot.handle.request.remote("thread/start", params))
        self._assign(result["thread"]["id"], slot)
        return result

    def resume(self, thread_id: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`thread/resume` on the thread's actor if it lives, else on the least-loaded live
        one (history from the shared THREADLINE_HOME). An actor found dead on the way is
        replaced and the thread resumed on another."""
        with self._lock:
            old = self._where.get(thread_id)
        try:
            if old is not None and not old.dead:
                return self._resume_on(old, thread_id, params, None)
        except ActorLost:
            pass
        dead = old.info() if old is not None else None
        return self._resume_on(self._place(), thread_id, params, dead)

    def _resume_on(
        self,
        slot: Slot,
        thread_id: str,
        params: Mapping[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> dict[str, Any]:
        ref = slot.handle.resume.remote(thread_id, dict(params or {}), after)
        result: dict[str, Any] = self._get(slot, ref)
        self._assign(thread_id, slot)
        return result

    def read(self, thread_id: str, include_turns: bool = True) -> dict[str, Any]:
        """`thread/read`, on the thread's actor (any live one once it died)."""
        slot = self._slot_of(thread_id)
        if slot.dead:
            slot = self._place()
        params = {"threadId": thread_id, "includeTurns": include_turns}
        result: dict[str, Any] = self._get(slot, slot.handle.request.remote("thread/read", params))
        return result

    def request(self, thread_id: str, method: str, params: Mapping[str, Any]) -> Any:
        """Any other request about `thread_id`, sent to its actor."""
        slot = self._slot_of(thread_id)
        return self._get(slot, slot.handle.request.remote(method, params))

    # -- turns -----------------------------------------------------------------------------------

    def run_turn(
        self,
        thread_id: str,
        prompt: str | Sequence[Any],
        params: Mapping[str, Any] | None = None,
        *,
        on_request: RequestHandler | None = None,
    ) -> TurnEvents:
        """Start a turn; iterate the result (`for` or `async for`) for its messages. `prompt`
        is text or a list of wire input items; `params` are `turn/start`'s other wire fields
        (`model`, `effort`, `approvalPolicy`, ...). Server requests are in the stream: answer
        each with `answer()`, or pass `on_request` to answer them as they arrive."""
        slot = self._slot_of(thread_id)
        refs = slot.handle.run_turn.remote(thread_id, prompt, dict(params or {}))
        return TurnEvents(slot.handle, thread_id, refs, on_request, partial(self._lost, slot))

    def answer(self, request: Message, result: Any) -> bool:
        """Answer a server request a turn's stream carried (`{"decision": "accept"}`, ...).
        False when it no longer waits: it was declined already (timeout, turn over)."""
        slot = self._slot_of(request["params"]["threadId"])
        return bool(self._get(slot, slot.handle.answer.remote(request["id"], result)))

    def interrupt(self, thread_id: str, turn_id: str) -> None:
        """`turn/interrupt`: the turn's stream then ends with status `interrupted`."""
        slot = self._slot_of(thread_id)
        self._get(slot, slot.handle.interrupt.remote(thread_id, turn_id))

    # -- lifetime --------------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Stop every actor's server (stdin EOF: turns end, CLIs are killed), then the
        actors."""
        with self._lock:
            live = [slot for slot in self._slots if not slot.dead]
        closing = [slot.handle.close.remote() for slot in live]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=timeout)
        finally:
            for slot in live:
                ray.kill(slot.handle)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
