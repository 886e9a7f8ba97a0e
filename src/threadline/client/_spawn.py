"""`spawn()`: start `threadline` as a child process and talk to it over its stdio."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from typing import IO

import trio

from ..rpc.transport import Trace
from ._client import ApprovalHandler, Client, connected

__all__ = ["spawn"]

log = logging.getLogger("threadline.client")


def default_argv() -> list[str]:
    """This interpreter running threadline: the server matches the client's version."""
    return [sys.executable, "-m", "threadline"]


@asynccontextmanager
async def spawn(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stderr: int | IO[bytes] | None = None,
    approval_handler: ApprovalHandler | None = None,
    initialize: bool = True,
    client_name: str = "threadline.client",
    shutdown_timeout: float = 10.0,
    start_new_session: bool = False,
    trace: Trace | None = None,
) -> AsyncIterator[Client]:
    """Run a threadline server for the duration of the block.

    `env` is added to this process's environment (e.g. `{"AGENT_BACKEND": "mock"}`); `stderr`
    is where the server's logs go (inherited by default; `subprocess.DEVNULL` drops them).
    With `initialize` (the default) the handshake is done before the block starts.

    Leaving the block closes the server's stdin; the server then interrupts running turns,
    kills their CLIs and exits. It gets `shutdown_timeout` seconds before SIGTERM, then
    SIGKILL. `start_new_session` keeps a terminal's Ctrl-C from reaching the server. `trace`
    sees every line both ways (see `Client`)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = await trio.lowlevel.open_process(
        list(argv or default_argv()),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=full_env,
        cwd=cwd,
        start_new_session=start_new_session,
    )
    assert proc.stdin is not None and proc.stdout is not None
    client = Client(proc.stdin, proc.stdout, approval_handler=approval_handler, trace=trace)
    try:
        async with connected(
            client,
            initialize=initialize,
            client_name=client_name,
            wind_down=partial(_reap, proc, shutdown_timeout),
        ):
            yield client
    finally:
        with trio.CancelScope(shield=True):
            await _reap(proc, 0)


async def _reap(proc: trio.Process, timeout: float) -> None:
    for sig, wait in ((None, timeout), (signal.SIGTERM, 3.0), (signal.SIGKILL, None)):
        if proc.returncode is not None:
            return
        if sig is not None:
            log.warning("threadline (pid %d) did not exit; sending %s", proc.pid, sig.name)
            with suppress(ProcessLookupError):
                proc.send_signal(sig)
        if wait is None:
            await proc.wait()
            return
        with trio.move_on_after(wait):
            await proc.wait()
