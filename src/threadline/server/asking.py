"""One server→client request that a turn waits on (an approval, a question, a tool call):
sent, awaited up to a timeout, and always followed by `serverRequest/resolved` — answered,
timed out, withdrawn (cancelled: the turn was interrupted) or left by a client that went away."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import trio

from ..protocol import ServerRequestResolvedNotification
from ..rpc.peer import Peer, PeerGone, PeerResponse

__all__ = ["Asked", "ask_client"]

log = logging.getLogger("threadline.requests")


@dataclass(frozen=True)
class Asked:
    """The client's answer, or None: `timed_out`, else the client went away."""

    response: PeerResponse | None
    timed_out: bool = False


async def ask_client(
    peer: Peer, method: str, params: Any, *, thread_id: str, rid: int, timeout: float | None
) -> Asked:
    """Send request `rid` and wait for its answer (see the module docstring)."""
    try:
        with trio.move_on_after(timeout if timeout is not None else float("inf")):
            try:
                linger = timeout is not None
                return Asked(await peer.request(method, params, request_id=rid, linger=linger))
            except PeerGone:
                log.info("client gone while %s %s was pending", method, rid)
                return Asked(None)
        log.info("%s %s unanswered after %ss", method, rid, timeout)
        return Asked(None, timed_out=True)
    finally:
        with trio.CancelScope(shield=True):
            await peer.notify(
                "serverRequest/resolved",
                ServerRequestResolvedNotification(thread_id=thread_id, request_id=rid),
            )
