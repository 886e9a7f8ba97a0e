"""The listener server (`--listen ws://IP:PORT` or `unix://PATH`): one engine shared by every
connection, each connection a WebSocket carrying one JSON-RPC message per text frame.

Each connection initializes on its own and has its own `Peer`; the engine talks to them all
through the `Hub`, which routes a thread's notifications and requests to the connections
attached to it (see server/hub.py). A connection that goes away leaves its threads running.
SIGTERM/SIGINT/SIGHUP stop accepting, end every turn, close every connection and remove the
unix socket."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from ..backends.base import Backend
from ..protocol import CLIENT_METHODS, InitializeParams, InitializeResponse
from ..rpc.connection import Connection
from ..rpc.dispatch import Dispatcher, PreparedCall
from ..rpc.errors import INVALID_REQUEST
from ..rpc.framing import with_queued
from ..rpc.peer import Peer
from ..rpc.prefixed import PrefixedStream
from ..server import routes
from ..server.app import OUTBOX_SIZE, backend_infos
from ..server.config import ServerConfig
from ..server.handshake import initialize_response, opt_out_methods
from ..server.hub import Hub
from ..server.residency import keep_residency
from ..server.service import ThreadService
from ..server.subscriptions import SUBSCRIBING, subscribing, unsubscribe_handler
from ..store import ThreadStore
from .address import ListenAddress
from .auth import WsAuth
from .coalesce import Coalescing
from .gate import HEALTH_PATHS, answer, read_head
from .sockets import open_listeners
from .wsconn import accept_websocket

__all__ = ["ListenerServer"]

log = logging.getLogger("threadline.listen")

#: Seconds a connection may take to send its HTTP request head.
HEAD_TIMEOUT = 10.0


class ListenerServer:
    def __init__(
        self,
        config: ServerConfig,
        store: ThreadStore,
        backends: Mapping[str, Backend],
        address: ListenAddress,
        auth: WsAuth,
        *,
        exit_when_idle: float | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.backends = dict(backends)
        self.address = address
        self.auth = auth
        #: End the server after this many seconds with no connection and no running turn.
        self.exit_when_idle = exit_when_idle
        self.hub = Hub()
        self.service: ThreadService | None = None
        self._stop = trio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, *, banner: Callable[[str], None] | None = None) -> None:
        """Serve until stopped (a signal, or `stop()`)."""
        listeners, cleanup = await open_listeners(self.address)
        try:
            async with trio.open_nursery() as root:
                # The handler is in place before the banner says the server is up: a SIGTERM
                # right after it ends the server cleanly.
                await root.start(self._watch_signals)
                async with trio.open_nursery() as engine:
                    self.service = ThreadService(
                        config=self.config,
                        store=self.store,
                        peer=self.hub,
                        backends=self.backends,
                        nursery=engine,
                    )
                    engine.start_soon(keep_residency, self.service)
                    async with trio.open_nursery() as conns:
                        conns.start_soon(trio.serve_listeners, self._handle, listeners)
                        if self.exit_when_idle is not None:
                            conns.start_soon(self._exit_when_idle, self.exit_when_idle)
                        (banner or _print_banner)(self._url(listeners))
                        await self._stop.wait()
                        log.info("shutting down")
                        await self.service.shutdown()
                        self.hub.close()
                        conns.cancel_scope.cancel()
                    engine.cancel_scope.cancel()
                root.cancel_scope.cancel()
        finally:
            cleanup()

    def _url(self, listeners: list[trio.SocketListener]) -> str:
        if self.address.kind != "ws":
            return self.address.url()
        return self.address.url(port=listeners[0].socket.getsockname()[1])

    def _busy(self) -> bool:
        loaded = self.service.loaded.values() if self.service is not None else ()
        return bool(self.hub.connections) or any(t.running_turn is not None for t in loaded)

    async def _exit_when_idle(self, seconds: float) -> None:
        idle_since = trio.current_time()
        while True:
            await trio.sleep(min(1.0, seconds / 4))
            now = trio.current_time()
            if self._busy():
                idle_since = now
            elif now - idle_since >= seconds:
                log.info("no connection and no running turn for %ss: exiting", seconds)
                self.stop()
                return

    async def _watch_signals(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
            task_status.started()
            async for signum in sigs:
                log.info("received %s", signal.Signals(signum).name)
                self.stop()

    # -- one connection ---------------------------------------------------------------------

    async def _handle(self, stream: trio.abc.Stream) -> None:
        try:
            await self._gate(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.info("connection ended: %r", exc)
        except Exception:
            # Last line of defence: one connection's failure (a handshake cut short, a
            # library error) must never end the server and every other connection.
            log.exception("a connection failed")
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _gate(self, stream: trio.abc.Stream) -> None:
        """Answer a plain HTTP request, refuse a bad upgrade, or serve the WebSocket."""
        head = None
        with trio.move_on_after(HEAD_TIMEOUT) as waited:
            head, raw, conn = await read_head(stream)
        if waited.cancelled_caught:
            log.info("a connection sent no request head within %ss", HEAD_TIMEOUT)
            return
        if head is None:
            return await answer(stream, conn, 400, "bad request")
        if not head.upgrade:
            path = head.target.split("?", 1)[0]
            if head.method == "GET" and path in HEALTH_PATHS:
                return await answer(stream, conn, 200, "ok")
            return await answer(stream, conn, 400, "expected a WebSocket upgrade")
        if "origin" in head.headers:
            log.warning("refused an upgrade with Origin %r", head.headers["origin"])
            return await answer(stream, conn, 403, "Origin header not allowed")
        why = self.auth.refusal(head.headers.get("authorization"))
        if why is not None:
            log.warning("refused an upgrade: %s", why)
            return await answer(stream, conn, 401, why)
        async with trio.open_nursery() as nursery:
            coalescing = Coalescing(PrefixedStream(raw, stream))
            ws = await accept_websocket(
                nursery, coalescing, max_message_size=self.config.max_request
            )
            await self._serve(ws, coalescing)
            nursery.cancel_scope.cancel()

    async def _serve(self, ws: WebSocketConnection, coalescing: Coalescing) -> None:
        out_send, out_recv = trio.open_memory_channel[bytes](OUTBOX_SIZE)
        peer = Peer(out_send)
        connection = Connection(
            peer,
            self._dispatcher(peer),
            on_initialize=_run_initialize,
            max_line=self.config.max_request,
        )
        self.hub.add(peer)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_write_frames, ws, coalescing, out_recv)
                async with out_send:
                    await connection.serve_messages(_frames(ws, peer))
        finally:
            self.hub.remove(peer)
            peer.close()
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await ws.aclose()

    def _dispatcher(self, peer: Peer) -> Dispatcher:
        assert self.service is not None
        handlers: dict[str, Any] = routes.handlers(self.service)
        for method in SUBSCRIBING:
            handlers[method] = subscribing(handlers[method], partial(self.hub.attach, peer=peer))
        handlers["thread/unsubscribe"] = unsubscribe_handler(
            self.service, partial(self.hub.detach, peer=peer)
        )

        async def initialize(p: InitializeParams) -> InitializeResponse:
            peer.opt_out = opt_out_methods(p)
            infos = await backend_infos(
                self.backends, self.config.cli_path, cli_path_for=self.config.default_backend
            )
            return initialize_response(p, self.store.root, infos)

        handlers["initialize"] = initialize
        return Dispatcher({m: (CLIENT_METHODS[m][0], h) for m, h in handlers.items()})


async def _run_initialize(call: PreparedCall) -> Any:
    return await call.handler(call.params)


def _frames(ws: WebSocketConnection, peer: Peer) -> Callable[[], Awaitable[bytes | None]]:
    async def receive() -> bytes | None:
        while True:
            try:
                message = await ws.get_message()
            except ConnectionClosed:
                return None
            if isinstance(message, str):
                return message.encode()
            await peer.respond_error(
                None,
                INVALID_REQUEST,
                "Invalid request: binary frames are not accepted; send each JSON-RPC message "
                "as one text frame",
            )

    return receive


async def _write_frames(
    ws: WebSocketConnection, coalescing: Coalescing, outbox: trio.MemoryReceiveChannel[bytes]
) -> None:
    """The connection's single writer: one text frame per queued message, whatever is queued
    already written together. A slow reader makes the writes wait, the bounded outbox fills,
    and producers wait in turn."""
    broken = False
    async with outbox:
        async for first in outbox:
            batch = with_queued(first, outbox)
            if broken:
                continue  # keep draining so producers never block on a dead connection
            messages = [line[:-1] for line in batch]  # each ends with the stdio newline
            try:
                broken = not await coalescing.send_text(messages, lambda: ws.closed is None)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                broken = True


def _print_banner(url: str) -> None:
    kind = "unix socket" if url.startswith("unix://") else "WebSockets"
    lines = [f"threadline app-server ({kind})", f"  listening on: {url}"]
    if url.startswith("ws://"):
        http = "http://" + url[len("ws://") :]
        lines += [f"  readyz: {http}/readyz", f"  healthz: {http}/healthz"]
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
