"""What a loaded thread keeps while nothing happens on it, checked by one sweeper task:
- its CLI, until the thread has had no turn for its `idle_timeout` (`config.idleTimeoutMs`,
  `THREADLINE_IDLE_TIMEOUT`, 10 min): then the CLI is stopped, and the next turn reopens it on
  the same conversation (`LoadedThread.release_session`);
- its place among the loaded threads, until no connection has followed it (every one
  unsubscribed or gone) and no turn has run for `ServerConfig.unload_after` (Codex: 30 min):
  then it is unloaded — CLI stopped, `thread/status/changed` to `notLoaded`, `thread/closed`
  announced to every connection. Its history stays in the store; `thread/resume` loads it
  again."""

from __future__ import annotations

import logging

import trio

from ..protocol import ThreadClosedNotification
from .service import ThreadService
from .threads import LoadedThread

__all__ = ["keep_residency"]

log = logging.getLogger("threadline.residency")

#: The longest pause between two looks at the loaded threads.
MAX_TICK = 5.0


async def keep_residency(service: ThreadService) -> None:
    """Run for the server's life: release idle CLIs, unload threads nobody follows."""
    after = service.config.unload_after
    unfollowed_since: dict[str, float] = {}
    while True:
        await trio.sleep(_tick(service))
        now = trio.current_time()
        for tid, thread in list(service.loaded.items()):
            if service.shutting_down or thread.running_turn is not None:
                continue
            quiet = now - thread.last_active
            if service.peer.subscribers(tid) > 0:
                unfollowed_since.pop(tid, None)
            elif min(quiet, now - unfollowed_since.setdefault(tid, now)) >= after:
                del unfollowed_since[tid]
                await _unload(service, tid)
                continue
            if thread.idle_timeout is not None and quiet >= thread.idle_timeout:
                await thread.release_session()
        for tid in set(unfollowed_since) - set(service.loaded):
            del unfollowed_since[tid]


def _tick(service: ThreadService) -> float:
    """A quarter of the shortest period in force, at most MAX_TICK seconds."""
    periods = [service.config.unload_after]
    periods += [t.idle_timeout for t in service.loaded.values() if t.idle_timeout is not None]
    return min(min(periods) / 4, MAX_TICK)


async def _unload(service: ThreadService, tid: str) -> None:
    thread: LoadedThread | None = service.loaded.pop(tid, None)
    if thread is None:
        return
    log.info("thread %s: no subscriber for a while, unloading it", tid)
    await thread.close()
    await thread.set_status_not_loaded()
    await service.peer.announce("thread/closed", ThreadClosedNotification(thread_id=tid))
