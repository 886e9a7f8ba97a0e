"""The turn runner: runs one turn on its thread's backend session and owns the protocol's
invariants for the turn as a whole (its items' are kept by `turn_items.TurnItems`).

- `turn/started`, then a `userMessage` item (started + completed) before anything else;
- in-flight items are closed when the turn ends, also on interrupt and failure;
- exactly one terminal `turn/completed` (`completed | interrupted | failed`, `error` when
  failed), preceded by `thread/status/changed` idle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Literal

import msgspec
import trio

from ..backends import base as b
from ..ids import new_id
from ..protocol import (
    ContextCompactedNotification,
    ContextCompactionItem,
    ErrorNotification,
    TextInput,
    ToolRequestUserInputQuestion,
    Turn,
    TurnCompletedNotification,
    TurnError,
    TurnStartedNotification,
    UserInput,
    UserMessageItem,
)
from ..store import TurnCompletedEntry, TurnStartedEntry
from .turn_host import TurnHost
from .turn_items import TurnItems, TurnStatus

__all__ = ["TurnRun", "input_text"]

log = logging.getLogger("threadline.turns")

# A command's process may start a little before its item/started reaches the turn runner:
# processes started up to this long before it count as the command's (see `_stop_commands`).
_COMMAND_START_SLACK = 0.5


def input_text(items: Sequence[UserInput]) -> str:
    return "\n\n".join(i.text for i in items if isinstance(i, TextInput))


async def _nothing() -> None:
    pass


def _leaves(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


class _Context:
    """The `TurnContext` a backend sees for one turn."""

    def __init__(self, run: TurnRun) -> None:
        self._run = run
        self.thread_id = run.thread.id
        self.turn_id = run.id
        self.log = logging.getLogger(f"threadline.backend.{run.thread.backend_id}")
        # How long the CLI gets to answer its native interrupt (a backend that ends an
        # interrupted turn without that answer still bounds its wait for it by this).
        self.interrupt_grace = run.thread.interrupt_grace

    def new_item_id(self) -> str:
        return new_id()

    async def emit(self, event: b.BackendEvent) -> None:
        await self._run.handle_event(event)

    async def request_approval(self, request: b.ApprovalRequest) -> b.ApprovalDecision:
        return await self._run.request_approval(request)

    async def request_user_input(
        self, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        if self._run.backend_done:
            # A stale context (its turn is over): never ask the client on a finished turn.
            log.warning("question for item %s after its turn ended: unanswered", item_id)
            return None
        return await self._run.thread.ask_user(self._run.id, item_id, questions)

    async def set_backend_session_id(self, session_id: str) -> None:
        await self._run.thread.set_backend_session_id(session_id)

    async def mark_role_bootstrap_applied(self) -> None:
        await self._run.thread.mark_role_bootstrap_applied()


class TurnRun:
    """One turn. `compact` makes it a compaction turn (`thread/compact/start`): no user
    message, a `contextCompaction` item around the backend's `compact`."""

    def __init__(
        self,
        thread: TurnHost,
        user_input: list[UserInput],
        *,
        output_schema: Any = None,
        compact: bool = False,
        outside: bool = False,
    ) -> None:
        self.thread = thread
        self.id = new_id()
        self.input = user_input
        self.output_schema = output_schema
        self.compact = compact
        #: A person started it in the CLI's own interface (tui mode): no `turn/start` response
        #: to wait for, and the prompt is the CLI's already.
        self.outside = outside
        self.started_at = int(time.time())
        self._started_mono = time.monotonic()
        self.items = TurnItems(thread, self.id)
        self._events_seen = 0
        self._interrupt_requested = False
        self._hard_cancelled = False
        self._timed_out = False
        # True once the backend's run_turn is over: from then on there is nothing to interrupt
        # natively (a late native interrupt could hit the CLI's *next* turn).
        self._backend_done = False
        # True from the moment the backend's run_turn is called. Before that, an interrupt
        # has nothing to stop natively (the CLI is not running this turn yet).
        self._backend_started = False
        self._response_sent = trio.Event()
        if outside:
            self._response_sent.set()
        self.done = trio.Event()
        #: Set once the turn is being interrupted or is over (pending tool calls withdraw).
        self.stopping = trio.Event()
        self._scope = trio.CancelScope()
        self.status: Literal["inProgress", "completed", "interrupted", "failed"] = "inProgress"

    # -- lifecycle -----------------------------------------------------------------------------

    def initial_turn(self) -> Turn:
        return Turn(id=self.id, status="inProgress", items=[], items_view="notLoaded")

    async def response_sent(self) -> None:
        self._response_sent.set()

    @property
    def finished(self) -> bool:
        return self.done.is_set()

    @property
    def backend_done(self) -> bool:
        return self._backend_done

    async def run(self) -> None:
        """The turn task (runs in the thread's nursery)."""
        try:
            await self._response_sent.wait()
            await self._run()
        finally:
            self.stopping.set()
            self.done.set()

    async def _notify(self, method: str, params: object) -> None:
        await self.thread.notify(method, params)

    async def _run(self) -> None:
        await self._begin()
        try:
            status, error = await self._run_backend()
        except BaseException:
            # Cancelled from outside our own scope (the thread or the server is going away
            # past its grace): trio lets that through `self._scope`. Still close every item
            # and send exactly one turn/completed, then let the cancellation continue.
            self._backend_done = True
            self.thread.mark_session_unhealthy("turn cancelled by shutdown", cut_off=True)
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self._finish("interrupted", None)
            raise
        self._backend_done = True
        self.stopping.set()
        status, error = self._settle(status, error)
        with trio.CancelScope(shield=True):
            await self._finish(status, error)

    async def _begin(self) -> None:
        """`turn/started` and the user's message, before anything of the backend's."""
        await self.thread.turn_started()
        await self._notify(
            "turn/started",
            TurnStartedNotification(
                thread_id=self.thread.id,
                turn=Turn(
                    id=self.id,
                    status="inProgress",
                    items=[],
                    items_view="notLoaded",
                    started_at=self.started_at,
                ),
            ),
        )
        await self.thread.persist([TurnStartedEntry(turn_id=self.id, started_at=self.started_at)])
        if self.input:
            await self.show_user_message(self.input)

    async def show_user_message(self, user_input: list[UserInput]) -> None:
        """A `userMessage` item (started and completed) for input the turn was given."""
        user_item = UserMessageItem(id=new_id(), content=user_input)
        await self.handle_event(b.ItemStarted(user_item))
        await self.handle_event(b.ItemCompleted(user_item))

    async def steer(self, user_input: list[UserInput]) -> None:
        """Add input to this running turn (`turn/steer`): handed to the backend, then shown
        as a user message; BackendError (and no item) when the backend cannot take it."""
        session = self.thread.session
        if session is None or not self._backend_started or self._backend_done:
            raise b.BackendError("the turn is not running on its CLI yet; try again")
        text = input_text(user_input)
        await session.steer(b.TurnInput(turn_id=self.id, input=user_input, text=text))
        await self.show_user_message(user_input)

    async def _run_backend(self) -> tuple[TurnStatus, TurnError | None]:
        """How the backend ended the turn (before interrupts and the timeout are applied)."""
        status: TurnStatus = "completed"
        error: TurnError | None = None
        try:
            with self._scope:
                timeout = self.thread.turn_timeout
                with trio.move_on_after(timeout if timeout else float("inf")) as timer:
                    outcome = await self._run_on_session()
                    if outcome is not None:
                        status, error = outcome.status, outcome.error
                if timer.cancelled_caught:
                    self._timed_out = True
        except b.BackendError as exc:
            return "failed", exc.to_turn_error()
        except Exception as exc:
            return "failed", self._crash_error(exc)
        return status, error

    async def _run_on_session(self) -> b.TurnOutcome | None:
        thread = self.thread
        session = await thread.ensure_session()
        if self.compact:
            return await self._compact(session)
        given = self.input
        context = None if self.outside else await thread.take_context()
        if context is not None:
            given = [TextInput(text=context), *given]
        turn_input = b.TurnInput(
            turn_id=self.id,
            input=given,
            text=input_text(given),
            bootstrap=None if self.outside else thread.pending_bootstrap(),
            output_schema=self.output_schema,
            outside=self.outside,
        )
        self._backend_started = True
        seen = self._events_seen
        try:
            return await session.run_turn(turn_input, _Context(self))
        except b.SessionLost as lost:
            if self._events_seen != seen:
                raise  # part of the turn happened: report it as failed
            # The CLI died while idle: reopen (resuming) and run the turn again.
            log.info("thread %s: %s; reopening the session", thread.id, lost)
            thread.mark_session_unhealthy("CLI found dead at turn start")
            session = await thread.ensure_session()
            return await session.run_turn(turn_input, _Context(self))

    async def _compact(self, session: b.BackendSession) -> b.TurnOutcome | None:
        item = ContextCompactionItem(id=new_id())
        await self.handle_event(b.ItemStarted(item))
        self._backend_started = True
        outcome = await session.compact(_Context(self))
        if outcome is None or outcome.status == "completed":
            await self.handle_event(b.ItemCompleted(item))
            await self._notify(
                "thread/compacted",
                ContextCompactedNotification(thread_id=self.thread.id, turn_id=self.id),
            )
        return outcome

    def _crash_error(self, exc: Exception) -> TurnError:
        """The error a turn fails with when the backend raised something else than a plain
        BackendError. Backends run reader tasks in nurseries, so their errors arrive wrapped in
        an ExceptionGroup: report the BackendError inside (its message and error info), or the
        actual crash, not "Exceptions from Trio nursery (1 sub-exception)"."""
        leaves = _leaves(exc)
        found = next((e for e in leaves if isinstance(e, b.BackendError)), None)
        if found is not None:
            return found.to_turn_error()
        backend_id = self.thread.backend_id
        log.exception("backend %s crashed in a turn", backend_id)
        cause = next((e for e in leaves if not isinstance(e, trio.Cancelled)), exc)
        return TurnError(
            message=f"internal error in the {backend_id} backend: {cause}",
            codex_error_info="other",
        )

    def _settle(
        self, status: TurnStatus, error: TurnError | None
    ) -> tuple[TurnStatus, TurnError | None]:
        """The turn's final status: the backend's, unless it timed out or was interrupted."""
        thread = self.thread
        if self._timed_out:
            status, error = "failed", TurnError(message="Query timed out", codex_error_info="other")
            thread.mark_session_unhealthy("turn timed out", cut_off=True)
        elif self._hard_cancelled or (self._backend_started and self._scope.cancelled_caught):
            # (The second case: an interrupt that came before run_turn was called cancels
            # without `_hard_cancelled`; if run_turn was entered anyway, it was cut off.)
            thread.mark_session_unhealthy(
                "turn was cancelled without a native interrupt", cut_off=True
            )
            if status != "failed":
                status, error = "interrupted", None
        elif self._interrupt_requested and status == "completed":
            status, error = "interrupted", None
        if status == "failed" and error is None:
            error = TurnError(message="the turn failed", codex_error_info="other")
        if status != "failed":
            error = None
        return status, error

    async def _finish(self, status: TurnStatus, error: TurnError | None) -> None:
        await self.items.close_all(status)
        thread = self.thread
        if error is not None:
            await self._notify(
                "error",
                ErrorNotification(
                    error=error, will_retry=False, thread_id=thread.id, turn_id=self.id
                ),
            )
        duration = int((time.monotonic() - self._started_mono) * 1000)
        completed_at = int(time.time())
        self.status = status
        await thread.persist(
            [
                TurnCompletedEntry(
                    turn_id=self.id,
                    status=status,
                    completed_at=completed_at,
                    duration_ms=duration,
                    error=msgspec.Raw(msgspec.json.encode(error)) if error else msgspec.Raw(),
                )
            ],
            sync=True,
        )
        await thread.turn_finished(self.id)
        final = self.items.final_message if status == "completed" else None
        await self._notify(
            "turn/completed",
            TurnCompletedNotification(
                thread_id=thread.id,
                turn=Turn(
                    id=self.id,
                    status=status,
                    # As Codex: a completed turn carries its final answer as a summary; the
                    # notifications remain the authoritative item list.
                    items=[final] if final is not None else [],
                    items_view="summary" if final is not None else "notLoaded",
                    error=error,
                    started_at=self.started_at,
                    completed_at=completed_at,
                    duration_ms=duration,
                ),
            ),
        )

    # -- interrupt -----------------------------------------------------------------------------

    async def interrupt(self, *, native: bool = True) -> None:
        """Stop the turn: the backend's native interrupt first (if it has one), then — after
        the grace period, or at once when `native` is False — cancel it hard (the backend's
        cleanup kills its process group)."""
        if self.finished:
            return
        self._interrupt_requested = True
        self.stopping.set()
        if self._backend_done:
            # The backend already returned and the turn is being finalised: nothing to stop,
            # and a native interrupt now would reach an idle CLI (or its next turn).
            return
        if not self._backend_started:
            # The turn has not reached the backend (turn/started, session open, ...): a native
            # interrupt would go to a CLI that is not running it and be lost, costing the whole
            # grace period plus a needless session restart. Cancelling now is clean: the
            # session (if any) never saw this turn, so it stays healthy.
            self._scope.cancel()
            return
        caps = self.thread.capabilities
        session = self.thread.session
        if native and caps.interrupt and session is not None and self._response_sent.is_set():
            try:
                await session.interrupt()
            except Exception:
                log.exception("native interrupt failed; cancelling the turn")
            else:
                self._stop_commands(session)
                with trio.move_on_after(self.thread.interrupt_grace):
                    await self.done.wait()
        if not self.finished:
            self._hard_cancelled = True
            self._scope.cancel()

    def _stop_commands(self, session: b.BackendSession) -> None:
        """Kill the turn's running commands now, right after the native interrupt went out,
        instead of whenever the CLI gets to it (Gemini first walks the shell's process tree
        with one `pgrep` per level: 150-300 ms; Claude ~40 ms; Codex never does, and
        threadline restarts its app-server for that). The CLI keeps running; its interrupt
        still ends the turn (see `BackendSession.stop_commands`)."""
        running = self.items.running_commands()
        if not running:
            return
        since = max(self._started_mono, min(running) - _COMMAND_START_SLACK)
        try:
            session.stop_commands(since)
        except Exception:
            log.exception("stopping the running commands failed (the CLI still stops them)")

    # -- approvals -----------------------------------------------------------------------------

    async def request_approval(self, request: b.ApprovalRequest) -> b.ApprovalDecision:
        if self._backend_done:
            # A stale context (e.g. a reader task that outlived its turn): fail closed without
            # sending the client a request for a turn that already completed.
            log.warning("approval for item %s after its turn ended: declined", request.item_id)
            return "decline"
        if not self.items.is_open(request.item_id):
            log.warning("approval for item %s that was not started", request.item_id)
        # "pending" survives a cancelled request: an item closed by an interrupt while waiting
        # is reported as declined (the tool never ran).
        self.items.set_approval(request.item_id, "pending")
        decision = await self.thread.request_approval(self.id, request)
        self.items.set_approval(request.item_id, decision)
        if decision == "cancel":
            # Decline, then interrupt the turn (Codex semantics), without blocking the backend
            # that is waiting for this answer. The flag is set here, synchronously: a backend
            # that returns right after the "cancel" must still end the turn `interrupted`
            # (the interrupt task may only run after the status was decided).
            self._interrupt_requested = True
            self.thread.nursery.start_soon(self.interrupt)
        return decision

    # -- events ----------------------------------------------------------------------------------

    def handle_event(self, event: b.BackendEvent) -> Awaitable[None]:
        """The notifications `event` makes, to be awaited (see `TurnItems.handle`)."""
        self._events_seen += 1
        if self._backend_done:
            # Events through a stale context (its run_turn is over) would reach the client
            # after this turn's turn/completed, or break item pairing: drop them.
            log.warning("dropping %s emitted after turn %s ended", type(event).__name__, self.id)
            return _nothing()
        return self.items.handle(event)
