"""The server: wires the transport, the dispatcher and the thread service together, and owns
start-up and shutdown (stdin EOF, SIGTERM, SIGINT, SIGHUP)."""

from __future__ import annotations

import logging
import os
import platform
import signal
import sys
from collections.abc import Mapping
from typing import Any

import trio

from .. import __version__
from ..backends.base import Backend
from ..protocol import (
    CLIENT_METHODS,
    BackendInfo,
    InitializeParams,
    InitializeResponse,
    ServerInfo,
)
from ..rpc.connection import DEFAULT_MAX_REQUEST, Connection
from ..rpc.dispatch import Dispatcher, PreparedCall
from ..rpc.framing import write_loop
from ..rpc.peer import Peer
from ..store import ThreadStore
from .config import ServerConfig
from .service import ThreadService

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
    """Check every backend concurrently (binary found, version)."""
    infos: dict[str, BackendInfo] = {}

    async def one(backend: Backend) -> None:
        # BACKEND_CLI_PATH names the default backend's binary only.
        check = await backend.check(cli_path if backend.id == cli_path_for else None)
        infos[backend.id] = BackendInfo(
            id=backend.id,
            available=check.available,
            modes=list(backend.modes),
            default_mode=backend.default_mode,
            capabilities={m: backend.capabilities(m) for m in backend.modes},
            version=check.version,
            path=check.path,
            message=check.message,
            credentials=check.credentials,
        )

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            for backend in backends.values():
                nursery.start_soon(one, backend)
    return [
        infos.get(b.id)
        or BackendInfo(
            id=b.id,
            available=False,
            modes=list(b.modes),
            default_mode=b.default_mode,
            capabilities={m: b.capabilities(m) for m in b.modes},
            message="check timed out",
        )
        for b in backends.values()
    ]


class Server:
    def __init__(
        self,
        config: ServerConfig,
        store: ThreadStore,
        backends: Mapping[str, Backend],
        *,
        max_request: int = DEFAULT_MAX_REQUEST,
    ) -> None:
        self.config = config
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
                handlers: dict[str, Any] = {
                    "initialize": self._initialize,
                    "thread/start": service.thread_start,
                    "thread/resume": service.thread_resume,
                    "thread/list": service.thread_list,
                    "thread/read": service.thread_read,
                    "thread/archive": service.thread_archive,
                    "thread/loaded/list": service.thread_loaded_list,
                    "turn/start": service.turn_start,
                    "turn/interrupt": service.turn_interrupt,
                    "turn/cancel": service.turn_interrupt,
                    "model/list": service.model_list,
                }
                dispatcher = Dispatcher({m: (CLIENT_METHODS[m][0], h) for m, h in handlers.items()})
                self._peer = peer
                connection = Connection(
                    peer,
                    dispatcher,
                    on_initialize=self._run_initialize,
                    max_line=self.max_request,
                )
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
        caps = p.capabilities
        self._peer.opt_out = (
            frozenset(caps.opt_out_notification_methods or ()) if caps else frozenset()
        )
        infos = await backend_infos(
            self.backends, self.config.cli_path, cli_path_for=self.config.default_backend
        )
        system = platform.system()
        return InitializeResponse(
            user_agent=(
                f"{p.client_info.name}/{__version__} ({system} {platform.release()}; "
                f"{platform.machine()}) threadline/{__version__}"
            ),
            codex_home=str(self.store.root),
            platform_family="windows" if os.name == "nt" else "unix",
            platform_os={"Darwin": "macos", "Windows": "windows"}.get(system, "linux"),  # type: ignore[arg-type]
            server_info=ServerInfo(name="threadline", version=__version__),
            backends=infos,
        )


async def serve_stdio(server: Server) -> None:
    """Serve on this process's stdin/stdout. stdout is kept for the protocol alone: fd 1 is
    pointed at stderr, so a stray print() from any library cannot corrupt the stream."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    receive = trio.lowlevel.FdStream(in_fd)
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
                async for signum in sigs:
                    name = signal.Signals(signum).name
                    if not server.stopping:
                        log.info("received %s", name)
                        server.stop()
                    else:
                        log.warning("received %s again: already shutting down", name)

        nursery.start_soon(watch_signals)
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
