"""One `codex app-server` process, possibly shared by several threads: its JSON-RPC
connection, and the routing of what it sends to the thread it names.

Codex names the thread (`threadId`) in every turn notification and every server request.
A message for a thread no session has claimed yet (its `thread/start` answer is still on the
way) is kept, a few hundred per thread, and handed over when the session claims the thread.
A server request for a thread no session holds is refused (fail closed); a notification
without a thread goes to every thread on the process (warnings, rate limits).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

import msgspec
import trio

from ...procs.early import Eligible
from ...procs.group import GroupProcess
from ...rpc.endpoint import Endpoint, Incoming, PeerClosed, RequestTimeout
from ...rpc.errors import INVALID_PARAMS, RpcError
from .. import base as b
from ..kit.spawn import open_session_process
from .invocation import LAUNCHER_VARS, _exit_error

__all__ = ["CodexHost", "HostedThread"]

log = logging.getLogger("threadline.backend.codex")

#: How long the app-server may take to exit once its stdin is closed (it exits 0 on EOF).
EXIT_GRACE = 3.0
#: Messages kept per thread not claimed yet, and how many such threads are remembered.
_UNCLAIMED_MESSAGES = 256
_UNCLAIMED_THREADS = 64


class HostedThread(Protocol):
    """What the host needs of the session of one of its threads."""

    async def deliver(self, message: Incoming) -> None:
        """A message Codex sent for the thread (a notification, or a request to answer)."""
        ...

    def deliver_nowait(self, message: Incoming) -> None:
        """`deliver` without waiting (messages kept before the thread was claimed)."""
        ...

    def host_died(self) -> None:
        """The process has ended: whatever the thread runs on it is over."""
        ...


class _ThreadRef(msgspec.Struct, rename="camel"):
    thread_id: str | None = None


_THREAD_REF = msgspec.json.Decoder(_ThreadRef)


def _thread_of(message: Incoming) -> str | None:
    """The thread a message names (`params.threadId`), decoding nothing else."""
    if not message.params:
        return None
    try:
        return _THREAD_REF.decode(message.params).thread_id
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class CodexHost:
    """A `codex app-server` and its threads (`threads`: Codex thread id → session)."""

    def __init__(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.proc: GroupProcess | None = None
        self.threads: dict[str, HostedThread] = {}
        self._unclaimed: OrderedDict[str, list[Incoming]] = OrderedDict()
        #: Sessions using the process (the pool's count: a thread being opened holds one).
        self.refs = 0
        #: Whether it stays up a while after its last thread (not after an idle release).
        self.linger = True
        self.alive = False
        #: Set when a thread's turn on it hung (no answer to an interrupt in time): no new
        #: thread is put on it, and it stops once its last thread is gone.
        self.retired = False
        self.exited = trio.Event()
        self.idle_scope: trio.CancelScope | None = None
        self._stop = trio.Event()
        self._endpoint: Endpoint | None = None
        self._nursery: trio.Nursery | None = None

    # -- lifetime ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host task: spawn, `initialize`, serve until stopped. Raises only before `started`."""
        started = False
        try:
            async with open_session_process(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                name="codex app-server",
                early=Eligible(env_keys=LAUNCHER_VARS),
            ) as proc:
                self.proc = proc
                self.alive = True
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    async with self._link(proc, nursery) as transport:
                        self._endpoint = Endpoint(
                            transport,
                            name="codex app-server",
                            on_message=self._route,
                            on_eof=self._ended,
                        )
                        nursery.start_soon(self._serve, self._endpoint, nursery.cancel_scope)
                        await self._handshake()
                        started = True
                        task_status.started()
                        await self._stop.wait()
                        await self._shut_down(proc)
                        nursery.cancel_scope.cancel()
            if not started:
                raise _exit_error(self.proc, "exited during start-up")
        except Exception:
            if not started:
                raise
            log.exception("codex app-server %s failed", self.proc)
        finally:
            self._gone()

    @asynccontextmanager
    async def _link(self, proc: GroupProcess, nursery: trio.Nursery) -> AsyncIterator[Any]:
        """What the JSON-RPC endpoint speaks over: the app-server's stdio."""
        yield proc

    async def _shut_down(self, proc: GroupProcess) -> None:
        """Stopping: the app-server ends at stdin's EOF."""
        await proc.close_stdin()
        with trio.move_on_after(EXIT_GRACE):
            await proc.wait()

    def _gone(self) -> None:
        self.alive = False
        self.exited.set()
        if self._endpoint is not None:
            self._endpoint.close("codex app-server has stopped")
        for thread in list(self.threads.values()):
            thread.host_died()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """`stop` was called (its end is no crash)."""
        return self._stop.is_set()

    def retire(self, why: str) -> None:
        if not self.retired:
            log.warning("codex app-server %s retired: %s", self.proc, why)
        self.retired = True

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)` in the host task (it ends with the process); False when it is
        going away."""
        if self._nursery is None or not self.alive:
            return False
        try:
            self._nursery.start_soon(fn, *args)
        except RuntimeError:  # the nursery is closing
            return False
        return True

    async def _serve(self, endpoint: Endpoint, scope: trio.CancelScope) -> None:
        """Read codex's output; once it ends (and its pending requests failed), so does the
        process."""
        await endpoint.run()
        scope.cancel()

    async def _ended(self) -> None:
        assert self.proc is not None
        await self.proc.wait()
        self._gone()

    async def _handshake(self) -> None:
        await self.request(
            "initialize",
            {
                "clientInfo": {"name": "threadline", "title": "threadline", "version": "1"},
                "capabilities": {"experimentalApi": False},
            },
        )
        try:
            await self._running().notify("initialized")
        except PeerClosed:
            raise _exit_error(self.proc, "stopped accepting input") from None

    # -- threads -------------------------------------------------------------------------------

    def claim(self, thread_id: str, thread: HostedThread) -> None:
        """Route `thread_id`'s messages to `thread` from now on, those kept so far first."""
        self.threads[thread_id] = thread
        for message in self._unclaimed.pop(thread_id, []):
            thread.deliver_nowait(message)

    def release(self, thread: HostedThread) -> None:
        """Route nothing to `thread` any more."""
        for thread_id in [i for i, t in self.threads.items() if t is thread]:
            del self.threads[thread_id]

    async def _route(self, message: Incoming) -> None:
        thread_id = _thread_of(message)
        if thread_id is None:
            if message.id is not None:
                self.start_soon(self._refuse, message, "threadline does not handle")
                return
            for thread in list(self.threads.values()):
                await thread.deliver(message)
            return
        target = self.threads.get(thread_id)
        if target is not None:
            await target.deliver(message)
        elif message.id is not None:
            self.start_soon(self._refuse, message, "no threadline thread holds the thread of")
        else:
            kept = self._unclaimed.setdefault(thread_id, [])
            if len(kept) < _UNCLAIMED_MESSAGES:
                kept.append(message)
            while len(self._unclaimed) > _UNCLAIMED_THREADS:
                self._unclaimed.popitem(last=False)

    async def _refuse(self, request: Incoming, why: str) -> None:
        await self.respond(request, None, RpcError(INVALID_PARAMS, f"{why} {request.method}"))

    # -- JSON-RPC ------------------------------------------------------------------------------

    def _running(self) -> Endpoint:
        endpoint = self._endpoint
        if endpoint is None or endpoint.closed is not None or not self.alive:
            raise _exit_error(self.proc, "is not running")
        return endpoint

    async def request(
        self, method: str, params: Any, timeout: float = 60, sent: trio.Event | None = None
    ) -> Any:
        """Codex's result; raises `ResponseError` for its error answer, `BackendError` when it
        does not answer."""
        endpoint = self._running()
        sent = trio.Event() if sent is None else sent
        try:
            return await endpoint.request(method, params, timeout=timeout, sent=sent)
        except RequestTimeout:
            raise b.BackendError(
                f"codex did not answer {method} within {timeout:.0f} s", codex_error_info="other"
            ) from None
        except PeerClosed:
            if not sent.is_set():
                raise _exit_error(self.proc, "stopped accepting input") from None
            raise _exit_error(self.proc, f"exited while answering {method}") from None

    async def respond(self, request: Incoming, result: Any, error: RpcError | None) -> None:
        """Answer a request of codex's with `result`, or with `error` when there is one."""
        assert request.id is not None
        try:
            endpoint = self._running()
            if error is not None:
                await endpoint.respond_error(request.id, error.code, error.message)
            else:
                await endpoint.respond(request.id, result)
        except (PeerClosed, b.BackendError) as exc:
            log.info("codex app-server: cannot answer %s: %s", request.method, exc)
