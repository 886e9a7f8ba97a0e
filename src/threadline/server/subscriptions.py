"""Which connection follows which thread: `thread/start`, `thread/resume` and `thread/fork`
subscribe their caller to the thread they answer with; `thread/unsubscribe` ends that. On stdio
(one `Peer`) an unsubscribed thread's notifications are no longer sent; with listeners the
`Hub` detaches the connection (no notifications, no server requests)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..protocol import ThreadUnsubscribeParams, ThreadUnsubscribeResponse
from ..rpc.connection import Reply
from .service import ThreadService

__all__ = ["SUBSCRIBING", "subscribing", "unsubscribe_handler"]

#: Methods whose caller is subscribed to the thread they answer with.
SUBSCRIBING = ("thread/start", "thread/resume", "thread/fork")

Handler = Callable[[Any], Awaitable[Any]]


def subscribing(handler: Handler, subscribe: Callable[[str], None]) -> Handler:
    """`handler`, then `subscribe(thread id of its answer)` before the answer is sent."""

    async def subscribe_caller(params: Any) -> Any:
        result = await handler(params)
        response = result.result if isinstance(result, Reply) else result
        subscribe(response.thread.id)
        return result

    return subscribe_caller


def unsubscribe_handler(
    service: ThreadService, unsubscribe: Callable[[str], bool]
) -> Callable[[ThreadUnsubscribeParams], Awaitable[ThreadUnsubscribeResponse]]:
    """`thread/unsubscribe`; `unsubscribe(thread id)` says whether the caller was subscribed."""

    async def thread_unsubscribe(p: ThreadUnsubscribeParams) -> ThreadUnsubscribeResponse:
        tid = service.thread_id(p.thread_id)
        if tid not in service.loaded:
            return ThreadUnsubscribeResponse(status="notLoaded")
        was = unsubscribe(tid)
        return ThreadUnsubscribeResponse(status="unsubscribed" if was else "notSubscribed")

    return thread_unsubscribe
