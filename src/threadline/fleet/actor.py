"""`ThreadlineActor`: a Ray actor that owns one threadline server (a `ServerHost`).

It is a threaded actor (`max_concurrency`): each running turn's stream holds one of its
threads while it waits for the next notifications, and requests, answers and interrupts run
beside them. Every message is Codex wire JSON.

`run_turn` is a Ray streaming generator (`num_returns="streaming"`): each yield is a batch of
the lines the server wrote for the turn, in order and as written (bytes: the caller decodes
them, `wire.decode`) — notifications (`method`, `params`) and the server's requests (`id`,
`method`, `params`), which the caller answers with `answer(id, result)`. The last batch ends
with the turn's `turn/completed`. `Fleet.run_turn` decodes and flattens the batches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import ray

from .host import ServerHost
from .procs import child_pids, wait_gone

__all__ = ["ThreadlineActor"]


class ThreadlineActor:
    """One threadline server in a Ray actor. `env` is added to the server's environment
    (`THREADLINE_HOME`, `AGENT_BACKEND`, ...)."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        argv: Sequence[str] | None = None,
        approval_timeout: float = 600.0,
    ) -> None:
        self._host = ServerHost(env, argv, approval_timeout, on_exit=_die)

    def info(self) -> dict[str, Any]:
        """Where this actor runs: its pid, its node and the pids of its children (the
        server), for placement and for checking that nothing outlives it."""
        return {
            "pid": os.getpid(),
            "nodeId": ray.get_runtime_context().get_node_id(),
            "children": child_pids(os.getpid()),
        }

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Any client request (`thread/start`, `thread/resume`, `thread/read`, ...); the
        result as wire JSON."""
        return self._host.request(method, params)

    @ray.method(num_returns="streaming")
    def run_turn(
        self,
        thread_id: str,
        prompt: str | Sequence[Any],
        params: Mapping[str, Any] | None = None,
    ) -> Iterator[list[bytes]]:
        """`turn/start` (`prompt`: text or wire input items; `params`: the request's other
        wire fields), then the turn's messages in batches, to its `turn/completed`. A refused
        `turn/start` raises `TurnRefused`."""
        turn = self._host.start_turn(thread_id, prompt, params or {})
        try:
            while batch := self._host.next_batch(turn):
                yield batch
        finally:
            self._host.abandon(turn)

    def resume(
        self,
        thread_id: str,
        params: Mapping[str, Any] | None = None,
        after: Mapping[str, Any] | None = None,
    ) -> Any:
        """`thread/resume`. `after` (`nodeId`, `pids`: an `info()` of a dead actor): when that
        actor ran on this node, its server may still be writing the thread's state on its way
        out; wait (up to `wait` seconds) for those processes to be gone first."""
        if after and after.get("nodeId") == ray.get_runtime_context().get_node_id():
            wait_gone(after.get("children", []), float(after.get("wait", 10.0)))
        return self._host.request("thread/resume", {**(params or {}), "threadId": thread_id})

    def abandon(self, thread_id: str, turn_id: str | None = None) -> None:
        """The caller stopped reading the thread's running turn (`turn_id`, when known):
        its pending and later server requests are declined."""
        self._host.abandon_thread(thread_id, turn_id)

    def interrupt(self, thread_id: str, turn_id: str) -> None:
        self._host.request("turn/interrupt", {"threadId": thread_id, "turnId": turn_id})

    def answer(self, request_id: int | str, result: Any) -> bool:
        """Answer a server request a turn's stream carried; False when it no longer waits
        (already declined: timed out, withdrawn or the turn ended)."""
        return self._host.answer(request_id, result)

    def close(self) -> None:
        """Stop the server (stdin EOF: it ends its turns and kills its CLIs)."""
        self._host.close()


def _die() -> None:
    """The server exited by itself: the actor goes too (after a moment, for the failed turns
    to reach their callers), so Ray reports it dead and the fleet replaces it, as for any
    actor death. An actor without its server would only answer errors."""
    threading.Timer(0.5, os._exit, (1,)).start()
