"""One ACP agent process: JSON-RPC 2.0 over its stdio (an `rpc.endpoint.Endpoint`), requests
both ways."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, Protocol

import trio

from ....procs.early import ANY, Eligible
from ....procs.group import GroupProcess, ProcessError
from ....rpc.endpoint import Endpoint, Incoming, PeerClosed, RequestTimeout, ResponseError
from ....rpc.errors import INVALID_PARAMS, RpcError
from ... import base as b
from ..spawn import open_cli_process
from .offer import SessionOffer

log = logging.getLogger("threadline.backend.acp")

__all__ = [
    "AUTH_REQUIRED",
    "AcpError",
    "AcpHost",
    "HostedSession",
    "Prompt",
    "StderrHandler",
    "error_info_for_code",
]

#: ACP's error code for "authentication required" (an agent with no credentials).
AUTH_REQUIRED = -32000

#: Our `initialize` params. fs is not advertised: Gemini then does its own file I/O; OpenCode
#: calls fs/* anyway and we answer it (confined to the cwd).
_INITIALIZE = {
    "protocolVersion": 1,
    "clientCapabilities": {
        "fs": {"readTextFile": False, "writeTextFile": False},
        "terminal": False,
    },
    "clientInfo": {"name": "threadline", "version": "1"},
}


class AcpError(RpcError):
    """An ACP error: the agent's answer to a request of ours, or (raised by a session's
    `on_request`) ours to one of the agent's."""


def error_info_for_code(code: int, message: str) -> str:
    """Codex error info for an ACP error (Gemini uses the HTTP status as the code)."""
    text = message.lower()
    if code in (401, 403) or "401" in text or "unauthorized" in text or "api key" in text:
        return "unauthorized"
    if code == 429 or "429" in text or "rate limit" in text:
        return "rateLimitExceeded"
    if code == 400:
        return "badRequest"
    if 500 <= code < 600 or any(s in text for s in ("500", "internal server error", "overloaded")):
        return "internalServerError"
    return "other"


#: Called with the host and each line its agent writes to stderr (must not block).
StderrHandler = Callable[["AcpHost", str], None]


class HostedSession(Protocol):
    """What the host needs of a session it routes the agent's messages to."""

    @property
    def ignores_updates(self) -> bool: ...

    @property
    def in_turn(self) -> bool:
        """A turn of this session is running."""
        ...

    def on_update(self, update: dict[str, Any]) -> None: ...

    async def on_request(self, method: str, params: dict[str, Any]) -> Any: ...

    def host_died(self) -> None: ...


class Prompt:
    """One `session/prompt` in flight. It runs in the agent process's task, not the turn's,
    so an interrupted turn can end before the agent answers it (Gemini first walks the killed
    command's process tree with pgrep, OpenCode answers 70-800 ms late): the session stays
    busy until the answer comes, and the next prompt (or a `session/load` of the session)
    waits for it. Once the turn has ended without it (`detached`), nothing the agent sends for
    the session reaches a turn until the next prompt, and the answer must come by the
    scope's deadline (the interrupt grace, as when the turn waited for it), or the agent is
    retired as a hung one."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.answered = False  # with a result or an ACP error
        self.result: Any = None
        self.error: AcpError | None = None
        self.failure: b.BackendError | None = None  # the request itself failed
        self.detached = False  # its turn has ended
        self.abandoned = False  # given up on (the agent was retired)


class AcpHost:
    """One ACP agent process and its JSON-RPC connection."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        name: str,
        on_stderr_line: StderrHandler | None = None,
        early: Eligible = ANY,
    ) -> None:
        self.argv = list(argv)
        self.early = early
        self.cwd = cwd
        self.env = env
        self.name = name
        self.on_stderr_line = on_stderr_line
        self.proc: GroupProcess | None = None
        self.init_result: dict[str, Any] = {}
        #: What the agent offered its first new session: its defaults (model, modes) and
        #: its models (`Backend.list_models`).
        self.defaults: SessionOffer | None = None
        self.refs = 0
        #: Whether it stays up a while after its last thread (not after an idle release).
        self.linger = True
        self.alive = False
        #: Set when a session gave up on a prompt the agent never answered (a turn timeout, a
        #: hard cancel): the agent may be wedged, so no new session is put on it and it stops
        #: once its last session is gone.
        self.retired = False
        self._endpoint: Endpoint | None = None
        self._stop = trio.Event()
        self._stopped = trio.Event()
        #: sessionId → callbacks of the session using it
        self.sessions: dict[str, HostedSession] = {}
        #: sessionId → its `session/prompt` the agent has not answered yet (also after the
        #: turn that sent it ended: the session is busy until the answer comes).
        self.prompts: dict[str, Prompt] = {}
        self._idle_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None  # the host task's: prompts in flight

    # lifetime

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host task: spawn, initialize, serve until stopped. Never raises after `started`."""
        started = False
        early_exit: b.BackendError | None = None
        handler = self.on_stderr_line
        try:
            async with open_cli_process(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin="pipe",
                name=self.name,
                grace=3.0,
                early=self.early,
            ) as proc:
                if handler is not None:
                    proc.on_stderr_line = lambda line: handler(self, line)
                self.proc = proc
                self.alive = True
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self._endpoint = Endpoint(
                        proc,
                        name=self.name,
                        on_message=self._on_message,
                        on_request=self._on_request,
                        on_eof=self._on_eof,
                    )
                    nursery.start_soon(self._endpoint.run)
                    self.init_result = (
                        await self.request("initialize", _INITIALIZE, timeout=120) or {}
                    )
                    started = True
                    task_status.started()
                    await self._stop.wait()
                    await proc.close_stdin()  # ACP agents exit 0 on stdin EOF
                    with trio.move_on_after(3):
                        await proc.wait()
                    nursery.cancel_scope.cancel()
            if not started:
                # The agent exited before answering `initialize`: its end (`_on_eof`) cancelled
                # the pending request, so nothing raised (and `nursery.start` would report
                # "child exited without calling task_status.started()" as an internal error).
                early_exit = self.failure("exited during start-up")
        except (ProcessError, AcpError, b.BackendError) as exc:
            if not started:
                raise b.BackendError(f"{self.name}: {exc}", codex_error_info="other") from None
            log.warning("%s stopped: %s", self.name, exc)
        except Exception:
            if not started:
                raise
            log.exception("%s crashed", self.name)
        finally:
            self.alive = False
            self._stopped.set()
            if self._endpoint is not None:
                self._endpoint.close(f"{self.name} has stopped")
            for session in list(self.sessions.values()):
                session.host_died()
        if early_exit is not None:
            raise early_exit

    def stop(self) -> None:
        self._stop.set()

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` in the host task (it ends with the agent process)."""
        if self._nursery is None or not self.alive:
            raise self.failure("is not running")
        try:
            self._nursery.start_soon(fn, *args)
        except RuntimeError:  # the nursery is closing: the agent is going away
            raise self.failure("is not running") from None

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def failure(self, what: str) -> b.BackendError:
        tail = self.proc.stderr_tail(2000) if self.proc is not None else ""
        code = self.proc.returncode if self.proc is not None else None
        message = f"{self.name} {what}"
        if code is not None and code < 0:
            with suppress(ValueError):
                message += f" (killed by {signal.Signals(-code).name})"
        elif code is not None:
            message += f" (exit code {code})"
        if tail:
            message += f": {tail}"
        return b.BackendError(message, codex_error_info="other", additional_details=tail or None)

    # JSON-RPC

    async def _on_eof(self) -> None:
        """The agent's output ended: it is gone, and so is everything running for it (the
        start-up, prompts in flight); requests waiting elsewhere then fail."""
        assert self.proc is not None and self._nursery is not None
        await self.proc.wait()
        self.alive = False
        for session in list(self.sessions.values()):
            session.host_died()
        self._nursery.cancel_scope.cancel()

    def _running(self) -> Endpoint:
        endpoint = self._endpoint
        if endpoint is None or endpoint.closed is not None or not self.alive:
            raise self.failure("is not running")
        return endpoint

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        """The agent's result; raises `AcpError` for its error answer, `BackendError` when it
        does not answer."""
        endpoint = self._running()
        sent = trio.Event()
        try:
            return await endpoint.request(method, params, timeout=timeout, sent=sent)
        except ResponseError as exc:
            raise AcpError(exc.code, exc.message, exc.data) from None
        except RequestTimeout:
            raise b.BackendError(
                f"{self.name} did not answer {method} in time", codex_error_info="other"
            ) from None
        except PeerClosed:
            what = (
                f"exited while answering {method}" if sent.is_set() else "stopped accepting input"
            )
            raise self.failure(what) from None

    async def notify(self, method: str, params: Any) -> None:
        try:
            await self._running().notify(method, params)
        except PeerClosed:
            raise self.failure("stopped accepting input") from None

    async def _on_message(self, message: Incoming) -> None:
        params = message.json_params()
        if message.method != "session/update" or not isinstance(params, dict):
            return
        session = self.sessions.get(str(params.get("sessionId")))
        if session is not None and not session.ignores_updates:
            session.on_update(params.get("update") or {})

    async def _on_request(self, request: Incoming) -> Any:
        """The answer to the agent's request, from the session it names (its `AcpError` is
        the error answer)."""
        params = request.json_params()
        params = params if isinstance(params, dict) else {}
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            raise AcpError(INVALID_PARAMS, f"unknown session {params.get('sessionId')!r}")
        return await session.on_request(request.method, params)
