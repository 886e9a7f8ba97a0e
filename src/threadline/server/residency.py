"""How long a thread nobody follows stays loaded: a loaded thread with no subscriber (every
connection unsubscribed or went away) and no running turn for `ServerConfig.unload_after`
seconds (Codex: 30 minutes) is unloaded — its CLI stopped, `thread/status/changed` to
`notLoaded`, and `thread/closed` announced to every connection. Its history stays in the
store; `thread/resume` loads it again."""

from __future__ import annotations

import logging

import trio

from ..protocol import ThreadClosedNotification
from .service import ThreadService

__all__ = ["unload_unfollowed"]

log = logging.getLogger("threadline.residency")

#: The longest pause between two looks at the loaded threads.
MAX_TICK = 30.0


async def unload_unfollowed(service: ThreadService, after: float) -> None:
    """Run for the server's life, unloading threads nobody has followed for `after` s."""
    #: thread id -> (since when it is unfollowed and idle, the last turn seen then)
    idle: dict[str, tuple[float, object]] = {}
    while True:
        await trio.sleep(min(after / 4, MAX_TICK))
        now = trio.current_time()
        for tid, thread in list(service.loaded.items()):
            last_turn = thread.active_turn
            followed = service.peer.subscribers(tid) > 0
            if followed or thread.running_turn is not None or service.shutting_down:
                idle.pop(tid, None)
                continue
            since, seen_turn = idle.setdefault(tid, (now, last_turn))
            if seen_turn is not last_turn:  # a turn ran (and ended) since the last look
                idle[tid] = (now, last_turn)
            elif now - since >= after:
                del idle[tid]
                await _unload(service, tid)
        for tid in set(idle) - set(service.loaded):
            del idle[tid]


async def _unload(service: ThreadService, tid: str) -> None:
    thread = service.loaded.pop(tid, None)
    if thread is None:
        return
    log.info("thread %s: no subscriber for a while, unloading it", tid)
    await thread.close()
    await thread.set_status_not_loaded()
    await service.peer.announce("thread/closed", ThreadClosedNotification(thread_id=tid))
