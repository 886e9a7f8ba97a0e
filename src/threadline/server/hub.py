"""`Hub`: the engine's `Peer` when several connections share one server (listeners).

Threads belong to the server. A connection that starts, resumes or forks a thread is attached
to it: the thread's notifications (those whose params name a `threadId`, and
`thread/started`) go to every attached connection, in order; other notifications go to every
connection. A server→client request
(approval, question, client tool call) goes to every connection attached to its thread, and
one that attaches while it is pending gets it too; the first answer wins (the others see
`serverRequest/resolved`). With no attached connection left it fails with `PeerGone` and the
caller fails closed (declines) — unless the caller bounds the wait (`linger`: the thread has
an approval or tool-call timeout), in which case a connection that attaches in time gets the
request. stdio keeps the plain one-connection `Peer`."""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..rpc.peer import Peer, PeerGone, PeerResponse, thread_of

__all__ = ["Hub"]

log = logging.getLogger("threadline.hub")


class _Asking:
    """One pending request, asked of one or more connections."""

    def __init__(
        self, method: str, params: Any, rid: int, nursery: trio.Nursery, linger: bool
    ) -> None:
        self.method, self.params, self.rid = method, params, rid
        self._nursery = nursery
        self._linger = linger
        self.answer: PeerResponse | None = None
        self.done = trio.Event()
        self.live = 0

    def ask(self, peer: Peer) -> None:
        self.live += 1
        self._nursery.start_soon(self._one, peer)

    async def _one(self, peer: Peer) -> None:
        try:
            response = await peer.request(self.method, self.params, request_id=self.rid)
            if self.answer is None:
                self.answer = response
        except PeerGone:
            pass
        finally:
            self.live -= 1
            if self.answer is not None or (self.live == 0 and not self._linger):
                self.done.set()


class Hub(Peer):
    def __init__(self) -> None:  # no outbox of its own: each connection's Peer has one
        self._next_id = 0
        self._closed = False
        self.opt_out = frozenset()
        self.connections: list[Peer] = []
        self._attached: dict[str, list[Peer]] = {}
        self._asking: dict[int, tuple[str | None, _Asking]] = {}

    # -- membership ----------------------------------------------------------------------------

    def add(self, peer: Peer) -> None:
        self.connections.append(peer)

    def remove(self, peer: Peer) -> None:
        """`peer` went away: it leaves every thread (its pending requests fail with it)."""
        if peer in self.connections:
            self.connections.remove(peer)
        for thread_id in list(self._attached):
            self.detach(thread_id, peer)

    def attach(self, thread_id: str, peer: Peer) -> None:
        peers = self._attached.setdefault(thread_id, [])
        if peer in peers or peer.closed:
            return
        peers.append(peer)
        for tid, asking in self._asking.values():
            if tid == thread_id:
                asking.ask(peer)

    def detach(self, thread_id: str, peer: Peer) -> bool:
        peers = self._attached.get(thread_id, [])
        if peer not in peers:
            return False
        peers.remove(peer)
        if not peers:
            del self._attached[thread_id]
        return True

    def attached(self, thread_id: str) -> list[Peer]:
        return list(self._attached.get(thread_id, ()))

    # -- the Peer interface the engine uses -----------------------------------------------------

    def _targets(self, params: Any) -> list[Peer]:
        tid = thread_of(params)
        return self.attached(tid) if tid is not None else list(self.connections)

    async def send_message(self, message: Any) -> None:
        for peer in list(self.connections):
            await peer.send_message(message)

    async def notify(self, method: str, params: Any) -> None:
        for peer in self._targets(params):
            await peer.notify(method, params)

    def subscribers(self, thread_id: str) -> int:
        return len(self._attached.get(thread_id, ()))

    async def announce(self, method: str, params: Any) -> None:
        for peer in list(self.connections):
            await peer.announce(method, params)

    async def request(
        self, method: str, params: Any, request_id: int | None = None, *, linger: bool = False
    ) -> PeerResponse:
        rid = self.allocate_id() if request_id is None else request_id
        try:
            async with trio.open_nursery() as nursery:
                asking = _Asking(method, params, rid, nursery, linger)
                self._asking[rid] = (thread_of(params), asking)
                for peer in self._targets(params):
                    asking.ask(peer)
                if asking.live or linger:
                    await asking.done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._asking.pop(rid, None)
        if asking.answer is None:
            raise PeerGone("no client attached to the thread")
        return asking.answer

    def close(self) -> None:
        self._closed = True
        for peer in list(self.connections):
            peer.close()
