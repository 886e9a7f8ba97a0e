"""Loaded threads: one task per thread that owns its backend session and its turns.

A thread's session lives in the thread's own nursery (`LoadedThread.main`), opened lazily (and
pre-warmed at `thread/start`, so the first turn does not pay the CLI's start-up). A session that
became unhealthy (its CLI died, a turn was killed) is closed after the turn and reopened for the
next one with the CLI's session id, so the conversation resumes."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio

from .. import __version__
from ..agent_tools.servers import parse_servers, stored_servers
from ..backends.base import (
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    Backend,
    BackendError,
    BackendSession,
    SessionSettings,
)
from ..protocol import (
    BackendCapabilities,
    DynamicToolSpec,
    GitInfo,
    TextInput,
    Thread,
    ThreadActive,
    ThreadActiveFlag,
    ThreadIdle,
    ThreadNotLoaded,
    ThreadStatus,
    ThreadStatusChangedNotification,
    ThreadTui,
    ToolRequestUserInputQuestion,
    UserInput,
)
from ..rpc.errors import INVALID_REQUEST, RpcError
from ..rpc.peer import Peer
from ..store import LogEntry, ThreadRecord, ThreadStore
from .approvals import ApprovalRouter, ApprovalRule
from .injected import transcript
from .turns import TurnRun, input_text

__all__ = ["LoadedThread", "thread_view"]

log = logging.getLogger("threadline.threads")


def thread_view(record: ThreadRecord, status: ThreadStatus, turns: Sequence[Any] = ()) -> Thread:
    git = msgspec.convert(record.git_info, GitInfo) if record.git_info else None
    return Thread(
        id=record.id,
        session_id=record.id,
        preview=record.preview,
        ephemeral=record.ephemeral,
        model_provider=record.backend,
        created_at=record.created_at,
        updated_at=record.updated_at,
        status=status,
        cwd=record.cwd,
        cli_version=__version__,
        source="appServer",
        project_id=None,
        turns=list(turns),
        model=record.model,
        name=record.name,
        forked_from_id=record.forked_from_id,
        git_info=git,
    )


def _find_backend_error(exc: BaseException) -> BackendError | None:
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _find_backend_error(sub)
            if found is not None:
                return found
    return None


def _stored_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as stored with the thread: `env` may hold credentials and is never stored
    (pass it again on thread/resume); MCP servers keep their references, not their literal
    values (`agent_tools.servers`)."""
    stored = {k: v for k, v in config.items() if k not in ("env", "mcpServers", "mcp_servers")}
    servers = parse_servers(config)  # (validated when the thread was opened)
    if servers:
        stored["mcp_servers"] = stored_servers(servers)
    return stored


class LoadedThread:
    """One loaded thread; its turns run it through `TurnHost` (see `turn_host`). The thread's
    approval policy lives in `settings.approval_policy` (what the backend sees, what is
    persisted); the router is handed it with each decision."""

    def __init__(
        self,
        peer: Peer,
        store: ThreadStore,
        record: ThreadRecord,
        backend: Backend,
        settings: SessionSettings,
        *,
        rules: Sequence[ApprovalRule],
        approval_timeout: float | None,
        turn_timeout: float | None,
        interrupt_grace: float,
        idle_timeout: float | None = None,
        dynamic_tools: Sequence[DynamicToolSpec] = (),
    ) -> None:
        self._peer = peer
        #: A notification for the thread's followers (the peer's own method: one call less
        #: per streamed delta, benchmark P3).
        self.notify: Callable[[str, Any], Awaitable[None]] = peer.notify
        self._store = store
        self.record = record
        self.backend = backend
        self.settings = settings
        #: Said to the client (`warning`) once the thread is started or resumed.
        self.warnings: list[str] = []
        #: The client-defined tools (stored with the thread), and what stops serving them.
        self.dynamic_tools = list(dynamic_tools)
        self.on_close: list[Callable[[], None]] = []
        record.settings = self._settings_record()
        self.capabilities: BackendCapabilities = backend.capabilities(settings.mode)
        self.turn_timeout = turn_timeout
        self.interrupt_grace = interrupt_grace
        #: Seconds without a turn after which the thread's CLI is stopped (None: never); the
        #: next turn reopens it on the same conversation (`release_session`).
        self.idle_timeout = idle_timeout
        #: trio time of the last turn's start or end (or of loading the thread).
        self.last_active = trio.current_time()
        self._router = ApprovalRouter(
            peer,
            record.id,
            rules=rules,
            timeout=approval_timeout,
            set_flags=self._approval_flags,
        )
        self.session: BackendSession | None = None
        self.active_turn: TurnRun | None = None
        self.finished_turns: set[str] = set()
        self.status: ThreadStatus = ThreadIdle()
        self._nursery: trio.Nursery | None = None
        self._closing = trio.Event()
        self._closed = trio.Event()
        self._session_lock = trio.Lock()
        self._log_buffer: list[LogEntry] = []
        self._log_lock = trio.Lock()
        self._flush_scheduled = False
        # Set by a synced persist: whichever flush takes the buffer next fsyncs it.
        self._sync_wanted = False
        self._session_close: trio.Event | None = None
        self._session_done: trio.Event | None = None
        #: Override fields (`OVERRIDE_FIELDS`) changed since the session was opened: applied
        #: (`BackendSession.reconfigure`) before the next turn uses it.
        self.pending_changes: set[str] = set()
        #: tui mode: the wait for a turn started in the CLI's own interface, while no turn runs.
        self._outside_wait: trio.CancelScope | None = None

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def backend_id(self) -> str:
        return self.backend.id

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None, "thread task not running"
        return self._nursery

    # -- lifetime --------------------------------------------------------------------------------

    async def main(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._closing.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._closed.set()

    async def close(self) -> None:
        """End the running turn (hard), stop the session, end the thread task."""
        if self.active_turn is not None:
            await self.active_turn.interrupt(native=False)
            await self.active_turn.done.wait()
        await self._close_session()
        for stop in self.on_close:
            stop()
        await self._flush_log(sync=True)
        self._closing.set()
        await self._closed.wait()

    async def prewarm(self) -> None:
        """Open the CLI's session ahead of the first turn: in the background, or before the
        thread is answered when the session tells where to watch it (tui mode: the answer
        carries `thread.tui`)."""
        if self.settings.mode == "tui":
            await self._prewarm()
        else:
            self.nursery.start_soon(self._prewarm)

    async def _prewarm(self) -> None:
        try:
            await self.ensure_session()
        except Exception as exc:
            # The first turn retries and reports the error to the client.
            log.info("thread %s: session pre-warm failed: %s", self.id, exc)

    # -- session -------------------------------------------------------------------------------

    async def ensure_session(self) -> BackendSession:
        async with self._session_lock:
            if self.session is not None and self.session.healthy and self.pending_changes:
                changed, self.pending_changes = frozenset(self.pending_changes), set()
                left = await self.session.reconfigure(changed)
                if left:
                    log.info("thread %s: reopening the session for %s", self.id, sorted(left))
                    self.session.healthy = False
            if self.session is not None and self.session.healthy:
                return self.session
            if self.session is not None:
                await self._close_session()
            # A session opened now reads the settings as they are.
            self.pending_changes.clear()
            try:
                session: BackendSession = await self.nursery.start(self._session_main)
            except BaseException as exc:
                found = _find_backend_error(exc)
                if found is not None and found is not exc:
                    raise found from exc
                raise
            self.session = session
            return session

    async def _session_main(
        self, *, task_status: trio.TaskStatus[BackendSession] = trio.TASK_STATUS_IGNORED
    ) -> None:
        close, done = trio.Event(), trio.Event()
        self._session_close, self._session_done = close, done
        started = False
        try:
            async with self.backend.session(self.settings) as session:
                started = True
                task_status.started(session)
                if session.tui is None:
                    await close.wait()
                else:
                    async with trio.open_nursery() as watching:
                        watching.start_soon(self._watch_outside, session)
                        await close.wait()
                        watching.cancel_scope.cancel()
        except Exception:
            if not started:
                raise
            log.exception("thread %s: the %s session failed", self.id, self.backend.id)
        finally:
            done.set()
            if self.session is not None and started:
                self.session.healthy = False

    async def _watch_outside(self, session: BackendSession) -> None:
        """tui mode: a turn a person starts in the CLI's own interface, while no turn runs,
        is reported as a turn of the thread (`BackendSession.wait_outside_turn`)."""
        while session.healthy:
            running = self.running_turn
            if running is not None:
                await running.done.wait()
                continue
            prompt: str | None = None
            with trio.CancelScope() as self._outside_wait:
                prompt = await session.wait_outside_turn()
            self._outside_wait = None
            if prompt is not None and self.running_turn is None:
                log.info("thread %s: a turn was started in the CLI's own interface", self.id)
                self.start_turn([TextInput(text=prompt)], outside=True)

    async def _close_session(self) -> None:
        close, done = self._session_close, self._session_done
        self.session = None
        if close is not None and done is not None:
            close.set()
            with trio.CancelScope(shield=True):
                await done.wait()
        # Later sessions continue the CLI's conversation.
        self.settings.resumed = True
        self.settings.backend_session_id = self.record.backend_session_id
        self.settings.role_bootstrap_applied = self.record.role_bootstrap_applied
        self.settings.fork_of = None if self.record.backend_session_id else self.record.fork_of

    async def release_session(self) -> bool:
        """Stop the CLI of a thread with no running turn (an idle policy): the next turn
        reopens it on the same conversation, without the role bootstrap, with the thread's
        approvals and session grants as they were. Whether a session was stopped."""
        async with self._session_lock:
            if self.session is None or self.running_turn is not None:
                return False
            log.info("thread %s: no turn for %ss, stopping its CLI", self.id, self.idle_timeout)
            self.session.released = True
            await self._close_session()
            return True

    def mark_session_unhealthy(self, reason: str, *, cut_off: bool = False) -> None:
        session = self.session
        if session is None:
            return
        if cut_off:
            session.cut_off = True
        if session.healthy:
            log.info("thread %s: restarting the session after this turn (%s)", self.id, reason)
            session.healthy = False

    # -- state shared with turns -------------------------------------------------------------

    async def persist(self, entries: Sequence[LogEntry], *, sync: bool = False) -> None:
        """Queue log entries; a background flush writes them in order, batched, off the turn's
        path (a to_thread hop per item cost ~1 ms of latency each). `sync=True` waits until
        everything queued so far is on disk (fsync'd) — used at the end of a turn."""
        if self.record.ephemeral:
            return
        self._log_buffer.extend(entries)
        if sync:
            # A background flush already waiting on the lock may take these entries before
            # this call gets it, leaving it an empty buffer: that flush must fsync them then
            # (it did not, and turn/completed went out with the turn written but not fsynced).
            self._sync_wanted = True
            await self._flush_log(sync=True)
        elif not self._flush_scheduled and self._nursery is not None:
            self._flush_scheduled = True
            self._nursery.start_soon(self._flush_log)

    async def _flush_log(self, sync: bool = False) -> None:
        async with self._log_lock:
            self._flush_scheduled = False
            if not self._log_buffer:
                return
            batch, self._log_buffer = self._log_buffer, []
            sync = sync or self._sync_wanted
            self._sync_wanted = False
            try:
                with trio.CancelScope(shield=True):
                    await self._store.append(self.id, batch, sync=sync)
            except OSError:
                log.exception("thread %s: could not append to the log", self.id)

    async def save_record(self) -> None:
        self.record.updated_at = int(time.time())
        self.record.settings = self._settings_record()
        if self.record.ephemeral:
            return
        try:
            await self._store.save(self.record)
        except OSError:
            log.exception("thread %s: could not save the thread record", self.id)

    async def take_context(self) -> str | None:
        if not self.record.injected:
            return None
        batches, self.record.injected = self.record.injected, []
        await self.save_record()
        return transcript(batches)

    def pending_bootstrap(self) -> str | None:
        if self.record.role_bootstrap_applied:
            return None
        return self.settings.role_prompt

    async def set_backend_session_id(self, session_id: str) -> None:
        if self.record.backend_session_id != session_id:
            self.record.backend_session_id = session_id
            self.settings.backend_session_id = session_id
            self.record.fork_of = self.settings.fork_of = None
            await self.save_record()

    async def mark_role_bootstrap_applied(self) -> None:
        if not self.record.role_bootstrap_applied:
            self.record.role_bootstrap_applied = True
            self.settings.role_bootstrap_applied = True
            await self.save_record()

    async def _set_status(self, status: ThreadStatus) -> None:
        if status == self.status:
            return
        self.status = status
        await self.notify(
            "thread/status/changed",
            ThreadStatusChangedNotification(thread_id=self.id, status=status),
        )

    async def set_status_not_loaded(self) -> None:
        await self._set_status(ThreadNotLoaded())

    async def _approval_flags(self, flags: list[ThreadActiveFlag]) -> None:
        if self.running_turn is not None and isinstance(self.status, ThreadActive):
            await self._set_status(ThreadActive(active_flags=flags))

    # -- approvals -------------------------------------------------------------------------------

    def set_approval_policy(self, policy: ApprovalPolicy) -> None:
        """Later approvals of this thread, and later sessions of its CLI, follow `policy`."""
        self.settings.approval_policy = policy

    async def request_approval(self, turn_id: str, request: ApprovalRequest) -> ApprovalDecision:
        return await self._router.decide(turn_id, request, policy=self.settings.approval_policy)

    async def ask_user(
        self, turn_id: str, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        return await self._router.ask_user(turn_id, item_id, questions)

    # -- turns -----------------------------------------------------------------------------------

    @property
    def running_turn(self) -> TurnRun | None:
        turn = self.active_turn
        return turn if turn is not None and not turn.finished else None

    def refuse_when_busy(self) -> None:
        running = self.running_turn
        if running is not None:
            raise RpcError(
                INVALID_REQUEST,
                f"turn {running.id} is already in progress on thread {self.id}; "
                "wait for turn/completed or interrupt it first",
            )

    def start_turn(
        self,
        user_input: list[UserInput],
        *,
        output_schema: Any = None,
        compact: bool = False,
        outside: bool = False,
    ) -> TurnRun:
        """Start a turn; it begins once its `turn/start` response is out (`run.response_sent`),
        or at once when a person started it in the CLI's own interface (`outside`).
        Overrides were applied to the settings before (`overrides.apply`)."""
        self.refuse_when_busy()
        if self._outside_wait is not None:
            self._outside_wait.cancel()
        run = TurnRun(
            self, user_input, output_schema=output_schema, compact=compact, outside=outside
        )
        self.active_turn = run
        self.last_active = trio.current_time()
        if not self.record.preview:
            self.record.preview = input_text(user_input)[:200]
        self.nursery.start_soon(run.run)
        return run

    def interrupt_turn(self, turn_id: str) -> None:
        """Interrupt the running turn `turn_id` in the background; a finished one is left be."""
        if turn_id in self.finished_turns:
            return  # already over: interrupting it is harmless
        running = self.running_turn
        if running is None:
            raise RpcError(INVALID_REQUEST, "no active turn to interrupt")
        if running.id != turn_id:
            raise RpcError(
                INVALID_REQUEST, f"expected active turn id {turn_id} but found {running.id}"
            )
        self.nursery.start_soon(running.interrupt)

    async def turn_started(self) -> None:
        await self._set_status(ThreadActive(active_flags=[]))

    async def turn_finished(self, turn_id: str) -> None:
        if self.active_turn is not None and self.active_turn.id == turn_id:
            self.active_turn = None
        self.finished_turns.add(turn_id)
        self.last_active = trio.current_time()
        self.record.turn_count += 1
        await self.save_record()
        if self.session is not None and not self.session.healthy:
            await self._close_session()
        await self._set_status(ThreadIdle())

    def view(self) -> Thread:
        view = thread_view(self.record, self.status)
        tui = self.session.tui if self.session is not None else None
        if tui is not None:
            view.tui = ThreadTui(socket=tui.socket, session=tui.session, attach=tui.attach)
        return view

    def _settings_record(self) -> dict[str, Any]:
        """The parts of the settings persisted for resume."""
        s = self.settings
        data = {
            "mode": s.mode,
            "approvalPolicy": s.approval_policy,
            "sandbox": s.sandbox,
            "sandboxPolicy": msgspec.to_builtins(s.sandbox_policy) if s.sandbox_policy else None,
            "effort": s.effort,
            "summary": s.summary,
            "baseInstructions": s.base_instructions,
            "developerInstructions": s.developer_instructions,
            "maxTurns": s.max_turns,
            "allowedTools": s.allowed_tools,
            "config": _stored_config(s.config),
            "dynamicTools": msgspec.to_builtins(self.dynamic_tools) or None,
        }
        return {k: v for k, v in data.items() if v is not None}
