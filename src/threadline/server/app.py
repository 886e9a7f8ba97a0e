"""The server: wires the transport, the dispatcher and the thread service together, and owns
start-up and shutdown (stdin EOF, SIGTERM, SIGINT, SIGHUP)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from ..backends.base import Backend, BackendCheck
from ..procs import early
from ..protocol import (
    CLIENT_METHODS,
    BackendInfo,
    InitializeParams,
    InitializeResponse,
    ProfileInfo,
)
from ..rpc.connection import Connection
from ..rpc.dispatch import Dispatcher, PreparedCall
from ..rpc.framing import write_loop
from ..rpc.limits import DEFAULT_MAX_REQUEST
from ..rpc.peer import Peer
from ..rpc.prefixed import PrefixedReceiveStream
from ..store import ThreadStore
from . import routes
from .config import ServerConfig
from .handshake import (
    Handshake,
    backend_info,
    initialize_response,
    opt_out_methods,
    profile_infos,
)
from .residency import keep_residency
from .service import ThreadService
from .subscriptions import SUBSCRIBING, subscribing, unsubscribe_handler

__all__ = ["Server", "backend_infos", "serve_stdio"]

log = logging.getLogger("threadline.server")

#: Outbound queue depth: producers (turns) wait when the client reads slowly (backpressure).
OUTBOX_SIZE = 1024


async def backend_infos(
    backends: Mapping[str, Backend],
    cli_path: str | None = None,
    timeout: float = 10.0,
    cli_path_for: str | None = None,
) -> list[BackendInfo]:
    """Check every backend concurrently (binary found, version); the operator's provider
    profiles for each."""
    infos: dict[str, BackendInfo] = {}
    profiles = profile_infos(os.environ)

    async def one(backend: Backend) -> None:
        # BACKEND_CLI_PATH names the default backend's binary only.
        check = await backend.check(cli_path if backend.id == cli_path_for else None)
        infos[backend.id] = _info(backend, check, profiles.get(backend.id, ()))

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            for backend in backends.values():
                nursery.start_soon(one, backend)
    return [infos.get(b.id) or _info(b, None, profiles.get(b.id, ())) for b in backends.values()]


def _info(
    backend: Backend, check: BackendCheck | None, profiles: Sequence[ProfileInfo] = ()
) -> BackendInfo:
    caps = {m: backend.capabilities(m) for m in backend.modes}
    return backend_info(backend.id, backend.modes, backend.default_mode, caps, check, profiles)


class Server:
    def __init__(
        self,
        config: ServerConfig,
        store: ThreadStore,
        backends: Mapping[str, Backend],
        *,
        max_request: int = DEFAULT_MAX_REQUEST,
        handshake: Handshake | None = None,
    ) -> None:
        self.config = config
        #: What happened before the engine loaded (see `handshake`): serve_stdio reads it.
        self.handshake = handshake or Handshake()
        self.store = store
        self.backends = dict(backends)
        self.max_request = max_request
        self.service: ThreadService | None = None
        self._read_scope = trio.CancelScope()
        self._stopping = False

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Begin a graceful shutdown (as on SIGTERM): stop reading, end turns, exit."""
        self._stopping = True
        self._read_scope.cancel()

    async def serve(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        out_send, out_recv = trio.open_memory_channel[bytes](OUTBOX_SIZE)
        peer = Peer(out_send)
        async with trio.open_nursery() as io_nursery:
            io_nursery.start_soon(write_loop, send, out_recv)
            async with out_send, trio.open_nursery() as threads_nursery:
                service = ThreadService(
                    config=self.config,
                    store=self.store,
                    peer=peer,
                    backends=self.backends,
                    nursery=threads_nursery,
                )
                self.service = service
                threads_nursery.start_soon(keep_residency, service)
                handlers = {"initialize": self._initialize, **routes.handlers(service)}
                for method in SUBSCRIBING:
                    handlers[method] = subscribing(handlers[method], peer.unsubscribed.discard)
                handlers["thread/unsubscribe"] = unsubscribe_handler(
                    service, lambda tid: _unsubscribe(peer, tid)
                )
                dispatcher = Dispatcher({m: (CLIENT_METHODS[m][0], h) for m, h in handlers.items()})
                self._peer = peer
                connection = Connection(
                    peer,
                    dispatcher,
                    on_initialize=self._run_initialize,
                    max_line=self.max_request,
                )
                if self.handshake.params is not None:
                    # `initialize` was answered before the engine loaded.
                    peer.opt_out = opt_out_methods(self.handshake.params)
                    connection.initialized = True
                with self._read_scope:
                    await connection.serve(receive)
                log.info("%s: shutting down", "signalled" if self._stopping else "stdin closed")
                # Interrupt every turn first (a pending approval is withdrawn and its tool never
                # runs; the turn is recorded as interrupted), then let go of the client.
                await service.shutdown()
                peer.close()
                threads_nursery.cancel_scope.cancel()

    async def _run_initialize(self, call: PreparedCall) -> Any:
        return await call.handler(call.params)

    async def _initialize(self, p: InitializeParams) -> InitializeResponse:
        self._peer.opt_out = opt_out_methods(p)
        infos = await backend_infos(
            self.backends, self.config.cli_path, cli_path_for=self.config.default_backend
        )
        return initialize_response(p, self.store.root, infos)


def _unsubscribe(peer: Peer, thread_id: str) -> bool:
    """The stdio client stops following `thread_id`; whether it followed it."""
    if thread_id in peer.unsubscribed:
        return False
    peer.unsubscribed.add(thread_id)
    return True


async def _discard_early_later() -> None:
    """A CLI started early (procs/early.py) that no thread took is killed after a while."""
    await trio.sleep(early.UNCLAIMED_SECONDS)
    early.discard()


async def serve_stdio(server: Server) -> None:
    """Serve on this process's stdin/stdout. stdout is kept for the protocol alone: fd 1 is
    pointed at stderr, so a stray print() from any library cannot corrupt the stream."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    receive: trio.abc.ReceiveStream = trio.lowlevel.FdStream(in_fd)
    if server.handshake.pending:
        receive = PrefixedReceiveStream(server.handshake.pending, receive)
    send = trio.lowlevel.FdStream(out_fd)
    async with trio.open_nursery() as nursery:

        async def watch_signals() -> None:
            # Keep the receiver until we exit: once it was closed after the first signal, a
            # second SIGTERM/SIGHUP hit the default action and killed us mid-shutdown, leaving
            # the CLIs' process groups running as orphans (a second SIGINT raised
            # KeyboardInterrupt through the cleanup). The shutdown is bounded anyway
            # (ThreadService.shutdown's grace, then the process groups' kill grace); SIGKILL
            # remains the way to cut it short.
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
                if server.handshake.signals:
                    # Received while the engine was loading (see handshake.py).
                    log.info("received %s before start-up", server.handshake.signals)
                    server.stop()
                async for signum in sigs:
                    name = signal.Signals(signum).name
                    if not server.stopping:
                        log.info("received %s", name)
                        server.stop()
                    else:
                        log.warning("received %s again: already shutting down", name)

        nursery.start_soon(watch_signals)
        if early.waiting():
            nursery.start_soon(_discard_early_later)
        try:
            await server.serve(receive, send)
        finally:
            nursery.cancel_scope.cancel()
            # Shielded: in the cancelled scope aclose()'s checkpoint raised Cancelled, which
            # replaced any exception from serve() and was then absorbed by this nursery — a
            # crash exited silently with status 0 (and `send` was never closed).
            with trio.CancelScope(shield=True):
                await receive.aclose()
                await send.aclose()
