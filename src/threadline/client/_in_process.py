"""`in_process()`: run a threadline server inside this trio run and talk to it over in-memory
streams (no child process: for tools and tests that drive the engine directly)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import trio
import trio.testing

from ..rpc.transport import Trace
from ._client import ApprovalHandler, Client, connected

__all__ = ["in_process"]

#: How a server serves one connection: `threadline.server.app.Server.serve`.
Serve = Callable[[trio.abc.ReceiveStream, trio.abc.SendStream], Awaitable[None]]


def in_process(
    serve: Serve,
    *,
    approval_handler: ApprovalHandler | None = None,
    initialize: bool = True,
    client_name: str = "threadline.client",
    shutdown_timeout: float = 10.0,
    trace: Trace | None = None,
) -> AbstractAsyncContextManager[Client]:
    """Run `serve` (e.g. `Server(config, store, backends).serve`) for the duration of the
    block, connected to the client it yields. Leaving the block closes the server's input; it
    gets `shutdown_timeout` seconds to wind down before it is cancelled."""
    client_end, server_end = trio.testing.memory_stream_pair()
    stopped = trio.Event()

    async def run_server() -> None:
        try:
            await serve(server_end, server_end)
        finally:
            stopped.set()

    async def wind_down() -> None:
        with trio.move_on_after(shutdown_timeout):
            await stopped.wait()

    client = Client(
        client_end.send_stream,
        client_end.receive_stream,
        approval_handler=approval_handler,
        trace=trace,
    )
    return connected(
        client,
        initialize=initialize,
        client_name=client_name,
        wind_down=wind_down,
        background=run_server,
    )
