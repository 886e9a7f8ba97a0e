"""Requests that act on a thread's conversation: `turn/steer`, `thread/fork`,
`thread/compact/start`, `thread/inject_items`. Whether a backend can is its mode's
capability (`steer`, `fork`, `compact`, `inject_items`); when it cannot, the request is
refused with a message naming the backend and mode, and nothing changes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..backends.base import BackendError
from ..ids import new_id
from ..protocol import (
    ThreadCompactStartParams,
    ThreadCompactStartResponse,
    ThreadForkParams,
    ThreadForkResponse,
    ThreadInjectItemsParams,
    ThreadInjectItemsResponse,
    TurnSteerParams,
    TurnSteerResponse,
)
from ..rpc.connection import Reply
from ..rpc.errors import INVALID_PARAMS, INVALID_REQUEST, RpcError
from ..store import ThreadRecord
from .injected import check_items
from .threads import LoadedThread

if TYPE_CHECKING:
    from .service import ThreadService

__all__ = ["ThreadControl"]


def _cannot(thread_backend: str, mode: str, what: str) -> RpcError:
    return RpcError(INVALID_REQUEST, f"the {thread_backend} backend ({mode} mode) cannot {what}")


class ThreadControl:
    def __init__(self, service: ThreadService) -> None:
        self.service = service

    def _thread(self, thread_id: str) -> LoadedThread:
        return self.service.loaded_thread(thread_id)

    async def turn_steer(self, p: TurnSteerParams) -> TurnSteerResponse:
        thread = self._thread(p.thread_id)
        running = thread.running_turn
        if running is None:
            raise RpcError(INVALID_REQUEST, "no active turn to steer")
        if running.id != p.expected_turn_id:
            raise RpcError(
                INVALID_REQUEST,
                f"expected active turn id {p.expected_turn_id} but found {running.id}",
            )
        if not p.input:
            raise RpcError(INVALID_PARAMS, "Invalid params for turn/steer: input must not be empty")
        if running.compact or not thread.capabilities.steer:
            raise _cannot(
                thread.backend.id,
                thread.settings.mode,
                "add input to a running turn; send it with the next turn/start",
            )
        self.service.check_input(thread, p.input, "turn/steer")
        try:
            await running.steer(list(p.input))
        except BackendError as exc:
            raise RpcError(INVALID_REQUEST, exc.message) from None
        return TurnSteerResponse(turn_id=running.id)

    async def compact_start(self, p: ThreadCompactStartParams) -> Reply:
        self.service.refuse_when_shutting_down()
        thread = self._thread(p.thread_id)
        if not thread.capabilities.compact:
            raise _cannot(thread.backend.id, thread.settings.mode, "compact its conversation")
        run = thread.start_turn([], compact=True)
        return Reply(ThreadCompactStartResponse(), run.response_sent)

    async def inject_items(self, p: ThreadInjectItemsParams) -> ThreadInjectItemsResponse:
        thread = self._thread(p.thread_id)
        problem = check_items(p.items)
        if problem:
            raise RpcError(INVALID_PARAMS, f"Invalid params for thread/inject_items: {problem}")
        if thread.capabilities.inject_items == "native":
            try:
                session = await thread.ensure_session()
                if await session.inject_items(list(p.items)):
                    return ThreadInjectItemsResponse()
            except BackendError as exc:
                raise RpcError(INVALID_REQUEST, exc.message) from None
        thread.record.injected.append(list(p.items))
        await thread.save_record()
        return ThreadInjectItemsResponse()

    async def fork(self, p: ThreadForkParams) -> Reply:
        service = self.service
        service.refuse_when_shutting_down()
        if p.path:
            raise RpcError(
                INVALID_PARAMS, "Invalid params for thread/fork: threadline forks by threadId only"
            )
        source = await self._fork_source(p)
        backend = service.backend_of(source)
        tid = new_id()
        settings = service.stored_settings(source, tid, p)
        if not backend.capabilities(settings.mode).fork and source.backend_session_id:
            raise _cannot(backend.id, settings.mode, "fork a conversation")
        now = int(time.time())
        record = ThreadRecord(
            id=tid,
            backend=source.backend,
            cwd=source.cwd,
            model=settings.model,
            created_at=now,
            updated_at=now,
            preview=source.preview,
            ephemeral=p.ephemeral,
            role_bootstrap_applied=source.role_bootstrap_applied,
            turn_count=source.turn_count,
            forked_from_id=source.id,
            fork_of=source.backend_session_id,
            injected=list(source.injected),
        )
        settings.fork_of = record.fork_of
        settings.resumed = record.fork_of is not None
        thread = await service.open_forked(record, backend, settings, source)
        turns = None if p.exclude_turns else await service.turns(record)
        response = service.response(thread, ThreadForkResponse, turns)
        response.reasoning_effort = settings.effort
        return service.started_reply(thread, response)

    async def _fork_source(self, p: ThreadForkParams) -> ThreadRecord:
        service = self.service
        tid = service.thread_id(p.thread_id)
        loaded = service.loaded.get(tid)
        if loaded is not None and loaded.running_turn is not None:
            raise RpcError(
                INVALID_REQUEST, f"thread {tid} has a turn in progress; fork it once it is over"
            )
        source = loaded.record if loaded else await service.load_record(tid)
        if p.cwd is not None and p.cwd != source.cwd:
            raise RpcError(
                INVALID_REQUEST,
                f"thread {tid} belongs to cwd {source.cwd}; a fork stays in it (agent CLIs"
                " fork sessions only in their original directory)",
            )
        if p.model_provider is not None and p.model_provider != source.backend:
            raise RpcError(
                INVALID_REQUEST,
                f"thread {tid} runs on backend {source.backend!r}, not {p.model_provider!r}",
            )
        if p.last_turn_id is not None:
            turns = await service.turns(source)
            if not turns or turns[-1].id != p.last_turn_id:
                raise RpcError(
                    INVALID_PARAMS,
                    "Invalid params for thread/fork: lastTurnId must be the thread's last turn"
                    " (a CLI forks its whole conversation)",
                )
        return source
