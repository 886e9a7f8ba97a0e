"""The turn runner: turns a backend's normalized events into protocol notifications and owns
the protocol's invariants for one turn.

- `turn/started`, then a `userMessage` item (started + completed) before anything else;
- every `item/started` gets exactly one `item/completed` with the same id — also on interrupt
  and failure, when in-flight items are closed here (Codex leaves them dangling);
- deltas concatenate to the completed item's text (a backend that sends only the final text
  gets one synthetic delta; a divergent final text is replaced by what was streamed);
- exactly one terminal `turn/completed` (`completed | interrupted | failed`, `error` when
  failed), preceded by `thread/status/changed` idle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import trio

from ..backends import base as b
from ..ids import new_id
from ..protocol import (
    AgentMessageDeltaNotification,
    AgentMessageItem,
    CommandExecutionItem,
    CommandExecutionOutputDeltaNotification,
    DynamicToolCallItem,
    ErrorNotification,
    FileChangeItem,
    FileChangeOutputDeltaNotification,
    ItemCompletedNotification,
    ItemStartedNotification,
    McpToolCallError,
    McpToolCallItem,
    McpToolCallProgressNotification,
    PlanDeltaNotification,
    PlanItem,
    ReasoningItem,
    ReasoningSummaryPartAddedNotification,
    ReasoningSummaryTextDeltaNotification,
    ReasoningTextDeltaNotification,
    TextInput,
    ThreadItem,
    ThreadTokenUsageUpdatedNotification,
    ToolRequestUserInputQuestion,
    Turn,
    TurnCompletedNotification,
    TurnDiffUpdatedNotification,
    TurnError,
    TurnPlanUpdatedNotification,
    TurnStartedNotification,
    UserInput,
    UserMessageItem,
    WarningNotification,
)
from ..store import ItemEntry, TurnCompletedEntry, TurnStartedEntry

if TYPE_CHECKING:
    from .threads import LoadedThread

__all__ = ["TurnRun", "input_text"]

log = logging.getLogger("threadline.turns")

# A command's process may start a little before its item/started reaches the turn runner:
# processes started up to this long before it count as the command's (see `_stop_commands`).
_COMMAND_START_SLACK = 0.5

TurnStatus = Literal["completed", "interrupted", "failed"]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def input_text(items: Sequence[UserInput]) -> str:
    return "\n\n".join(i.text for i in items if isinstance(i, TextInput))


def _leaves(exc: BaseException) -> list[BaseException]:
    """The leaf exceptions of a (possibly nested) exception group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


@dataclass
class _OpenItem:
    item: ThreadItem
    text: list[str] = field(default_factory=list)  # agentMessage / plan deltas, command output
    summary: dict[int, list[str]] = field(default_factory=dict)
    content: dict[int, list[str]] = field(default_factory=dict)


class _Context:
    """The `TurnContext` a backend sees for one turn."""

    def __init__(self, run: TurnRun) -> None:
        self._run = run
        self.thread_id = run.thread.id
        self.turn_id = run.id
        self.log = logging.getLogger(f"threadline.backend.{run.thread.backend.id}")
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
        return await self._run.thread.router.ask_user(self._run.id, item_id, questions)

    async def set_backend_session_id(self, session_id: str) -> None:
        await self._run.thread.set_backend_session_id(session_id)

    async def mark_role_bootstrap_applied(self) -> None:
        await self._run.thread.mark_role_bootstrap_applied()


class TurnRun:
    def __init__(self, thread: LoadedThread, user_input: list[UserInput]) -> None:
        self.thread = thread
        self.id = new_id()
        self.input = user_input
        self.started_at = int(time.time())
        self._started_mono = time.monotonic()
        self._open: dict[str, _OpenItem] = {}
        self._final_message: AgentMessageItem | None = None
        self._events_seen = 0
        # item id → last approval state; "pending" survives a cancelled request, so an item
        # closed by an interrupt while waiting is reported as declined (the tool never ran).
        self._approvals: dict[str, str] = {}
        self._completed: set[str] = set()
        # In-flight commandExecution items -> when they started (time.monotonic()).
        self._commands: dict[str, float] = {}
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
        self.done = trio.Event()
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
            self.done.set()

    async def _notify(self, method: str, params: Any) -> None:
        await self.thread.notify(method, params)

    async def _run(self) -> None:
        thread = self.thread
        await thread.set_status_active([])
        await self._notify(
            "turn/started",
            TurnStartedNotification(
                thread_id=thread.id,
                turn=Turn(
                    id=self.id,
                    status="inProgress",
                    items=[],
                    items_view="notLoaded",
                    started_at=self.started_at,
                ),
            ),
        )
        await thread.persist([TurnStartedEntry(turn_id=self.id, started_at=self.started_at)])
        user_item = UserMessageItem(id=new_id(), content=self.input)
        await self.handle_event(b.ItemStarted(user_item))
        await self.handle_event(b.ItemCompleted(user_item))

        status: TurnStatus = "completed"
        error: TurnError | None = None
        try:
            with self._scope:
                timeout = thread.turn_timeout
                with trio.move_on_after(timeout if timeout else float("inf")) as timer:
                    session = await thread.ensure_session()
                    turn_input = b.TurnInput(
                        turn_id=self.id,
                        input=self.input,
                        text=input_text(self.input),
                        bootstrap=thread.pending_bootstrap(),
                    )
                    self._backend_started = True
                    seen = self._events_seen
                    try:
                        outcome = await session.run_turn(turn_input, _Context(self))
                    except b.SessionLost as lost:
                        if self._events_seen != seen:
                            raise  # part of the turn happened: report it as failed
                        # The CLI died while idle: reopen (resuming) and run the turn again.
                        log.info("thread %s: %s; reopening the session", thread.id, lost)
                        thread.mark_session_unhealthy("CLI found dead at turn start")
                        session = await thread.ensure_session()
                        outcome = await session.run_turn(turn_input, _Context(self))
                    if outcome is not None:
                        status, error = outcome.status, outcome.error
                if timer.cancelled_caught:
                    self._timed_out = True
        except b.BackendError as exc:
            status, error = "failed", exc.to_turn_error()
        except Exception as exc:
            # Backends run reader tasks in nurseries, so their errors arrive wrapped in an
            # ExceptionGroup: report the BackendError inside (its message and error info), or
            # the actual crash, not "Exceptions from Trio nursery (1 sub-exception)".
            leaves = _leaves(exc)
            found = next((e for e in leaves if isinstance(e, b.BackendError)), None)
            if found is not None:
                status, error = "failed", found.to_turn_error()
            else:
                log.exception("backend %s crashed in a turn", thread.backend.id)
                cause = next((e for e in leaves if not isinstance(e, trio.Cancelled)), exc)
                status = "failed"
                error = TurnError(
                    message=f"internal error in the {thread.backend.id} backend: {cause}",
                    codex_error_info="other",
                )
        except BaseException:
            # Cancelled from outside our own scope (the thread or the server is going away
            # past its grace): trio lets that through `self._scope`. Still close every item
            # and send exactly one turn/completed, then let the cancellation continue.
            self._backend_done = True
            thread.mark_session_unhealthy("turn cancelled by shutdown")
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await self._finish("interrupted", None)
            raise
        self._backend_done = True
        if self._timed_out:
            status, error = "failed", TurnError(message="Query timed out", codex_error_info="other")
            thread.mark_session_unhealthy("turn timed out")
        elif self._hard_cancelled or (self._backend_started and self._scope.cancelled_caught):
            # (The second case: an interrupt that came before run_turn was called cancels
            # without `_hard_cancelled`; if run_turn was entered anyway, it was cut off.)
            thread.mark_session_unhealthy("turn was cancelled without a native interrupt")
            if status != "failed":
                status, error = "interrupted", None
        elif self._interrupt_requested and status == "completed":
            status, error = "interrupted", None
        if status == "failed" and error is None:
            error = TurnError(message="the turn failed", codex_error_info="other")
        if status != "failed":
            error = None
        with trio.CancelScope(shield=True):
            await self._finish(status, error)

    async def _finish(self, status: TurnStatus, error: TurnError | None) -> None:
        for item_id in list(self._open):
            await self._complete(self._close_in_flight(item_id, status))
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
        await thread.turn_finished(self)
        await thread.set_status_idle()
        final = self._final_message if status == "completed" else None
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
        running = [
            started
            for item_id, started in self._commands.items()
            if self._approvals.get(item_id) not in ("pending", "decline", "cancel")
        ]
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
        if request.item_id not in self._open:
            log.warning("approval for item %s that was not started", request.item_id)
        self._approvals[request.item_id] = "pending"
        decision = await self.thread.router.decide(self.id, request)
        self._approvals[request.item_id] = decision
        if decision == "cancel":
            # Decline, then interrupt the turn (Codex semantics), without blocking the backend
            # that is waiting for this answer. The flag is set here, synchronously: a backend
            # that returns right after the "cancel" must still end the turn `interrupted`
            # (the interrupt task may only run after the status was decided).
            self._interrupt_requested = True
            self.thread.nursery.start_soon(self.interrupt)
        return decision

    # -- events → notifications ------------------------------------------------------------------

    async def handle_event(self, event: b.BackendEvent) -> None:
        self._events_seen += 1
        if self._backend_done:
            # Events through a stale context (its run_turn is over) would reach the client
            # after this turn's turn/completed, or break item pairing: drop them.
            log.warning("dropping %s emitted after turn %s ended", type(event).__name__, self.id)
            return
        tid, turn_id = self.thread.id, self.id
        if type(event) is b.AgentMessageDelta and event.delta:
            # The hot path (benchmark P3): a delta of a message already open goes straight out.
            entry = self._open.get(event.item_id)
            if entry is not None:
                entry.text.append(event.delta)
                await self.thread.notify(
                    "item/agentMessage/delta",
                    AgentMessageDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=event.item_id, delta=event.delta
                    ),
                )
                return
        match event:
            case b.ItemStarted(item=item):
                await self._start(item)
            case b.ItemCompleted(item=item):
                if item.id in self._completed:
                    log.warning("ignoring a second completion of item %s", item.id)
                    return
                if item.id not in self._open:
                    # Completed without being started: announce it first. A message/plan
                    # starts empty (as in Codex) and its text then goes out as a delta, so a
                    # client building the text from item/started + deltas gets it once.
                    started = item
                    if isinstance(item, (AgentMessageItem, PlanItem)):
                        started = msgspec.structs.replace(item, text="")
                    await self._start(started)
                await self._complete(self._reconcile(item))
            case b.AgentMessageDelta(item_id=iid, delta=delta):
                entry = await self._ensure_open(iid, lambda: AgentMessageItem(id=iid, text=""))
                if entry is None or not delta:
                    return
                entry.text.append(delta)
                await self._notify(
                    "item/agentMessage/delta",
                    AgentMessageDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta
                    ),
                )
            case b.PlanDelta(item_id=iid, delta=delta):
                entry = await self._ensure_open(iid, lambda: PlanItem(id=iid, text=""))
                if entry is None or not delta:
                    return
                entry.text.append(delta)
                await self._notify(
                    "item/plan/delta",
                    PlanDeltaNotification(thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta),
                )
            case b.ReasoningSummaryPartAdded(item_id=iid, summary_index=idx):
                entry = await self._ensure_open(iid, lambda: ReasoningItem(id=iid))
                if entry is None:
                    return
                entry.summary.setdefault(idx, [])
                await self._notify(
                    "item/reasoning/summaryPartAdded",
                    ReasoningSummaryPartAddedNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, summary_index=idx
                    ),
                )
            case b.ReasoningSummaryDelta(item_id=iid, delta=delta, summary_index=idx):
                entry = await self._ensure_open(iid, lambda: ReasoningItem(id=iid))
                if entry is None or not delta:
                    return
                entry.summary.setdefault(idx, []).append(delta)
                await self._notify(
                    "item/reasoning/summaryTextDelta",
                    ReasoningSummaryTextDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta, summary_index=idx
                    ),
                )
            case b.ReasoningTextDelta(item_id=iid, delta=delta, content_index=idx):
                entry = await self._ensure_open(iid, lambda: ReasoningItem(id=iid))
                if entry is None or not delta:
                    return
                entry.content.setdefault(idx, []).append(delta)
                await self._notify(
                    "item/reasoning/textDelta",
                    ReasoningTextDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta, content_index=idx
                    ),
                )
            case b.CommandOutputDelta(item_id=iid, delta=delta):
                entry = self._open.get(iid)
                if entry is None or not delta:
                    return
                entry.text.append(delta)
                await self._notify(
                    "item/commandExecution/outputDelta",
                    CommandExecutionOutputDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta
                    ),
                )
            case b.FileChangeOutputDelta(item_id=iid, delta=delta):
                if iid not in self._open or not delta:
                    return
                await self._notify(
                    "item/fileChange/outputDelta",
                    FileChangeOutputDeltaNotification(
                        thread_id=tid, turn_id=turn_id, item_id=iid, delta=delta
                    ),
                )
            case b.McpProgress(item_id=iid, message=message):
                if iid in self._open:
                    await self._notify(
                        "item/mcpToolCall/progress",
                        McpToolCallProgressNotification(
                            thread_id=tid, turn_id=turn_id, item_id=iid, message=message
                        ),
                    )
            case b.PlanUpdated(plan=plan, explanation=explanation):
                await self._notify(
                    "turn/plan/updated",
                    TurnPlanUpdatedNotification(
                        thread_id=tid, turn_id=turn_id, plan=plan, explanation=explanation
                    ),
                )
            case b.DiffUpdated(diff=diff):
                await self._notify(
                    "turn/diff/updated",
                    TurnDiffUpdatedNotification(thread_id=tid, turn_id=turn_id, diff=diff),
                )
            case b.TokenUsageUpdated(usage=usage):
                await self._notify(
                    "thread/tokenUsage/updated",
                    ThreadTokenUsageUpdatedNotification(
                        thread_id=tid, turn_id=turn_id, token_usage=usage
                    ),
                )
            case b.RetryableError(error=error):
                await self._notify(
                    "error",
                    ErrorNotification(error=error, will_retry=True, thread_id=tid, turn_id=turn_id),
                )
            case b.Warning(message=message):
                await self._notify("warning", WarningNotification(message=message, thread_id=tid))
            case _:
                log.warning("unknown backend event %r", event)

    async def _ensure_open(self, item_id: str, make: Any) -> _OpenItem | None:
        if item_id in self._completed:
            log.warning("ignoring a delta for completed item %s", item_id)
            return None
        if item_id not in self._open:
            await self._start(make())
        return self._open[item_id]

    async def _start(self, item: ThreadItem) -> None:
        if item.id in self._open or item.id in self._completed:
            log.warning("ignoring a second start of item %s", item.id)
            return
        self._open[item.id] = _OpenItem(item=item)
        if isinstance(item, CommandExecutionItem):
            self._commands[item.id] = time.monotonic()
        try:
            await self._notify(
                "item/started",
                ItemStartedNotification(
                    thread_id=self.thread.id, turn_id=self.id, item=item, started_at_ms=_now_ms()
                ),
            )
        except BaseException:
            # Cancelled (shutdown) before the notification went out (trio raises Cancelled
            # only when nothing was sent): the client never saw the item, so the turn's end
            # must not complete it either (found by the fault matrix: SIGTERM mid-turn).
            self._open.pop(item.id, None)
            self._commands.pop(item.id, None)
            raise

    def _reconcile(self, item: ThreadItem) -> ThreadItem:
        """Make the completed item agree with the deltas the client already saw."""
        entry = self._open[item.id]
        if isinstance(item, (AgentMessageItem, PlanItem)) and entry.text:
            streamed = "".join(entry.text)
            # A final text that extends the deltas keeps its remainder: `_complete` sends it
            # as one more delta. (Appending it to entry.text here made `_complete` see nothing
            # missing, so the remainder never reached the client.)
            if not item.text.startswith(streamed):
                log.warning("final text of %s differs from its deltas; keeping the deltas", item.id)
                item.text = streamed
        elif isinstance(item, ReasoningItem):
            if not item.summary and entry.summary:
                item.summary = ["".join(entry.summary[k]) for k in sorted(entry.summary)]
            if not item.content and entry.content:
                item.content = ["".join(entry.content[k]) for k in sorted(entry.content)]
        elif (
            isinstance(item, CommandExecutionItem) and item.aggregated_output is None and entry.text
        ):
            item.aggregated_output = "".join(entry.text)
        return item

    async def _complete(self, item: ThreadItem) -> None:
        entry = self._open.pop(item.id)
        self._completed.add(item.id)
        started = self._commands.pop(item.id, None)
        try:
            completed_at = await self._send_completion(item, entry)
        except BaseException:
            # Cancelled before `item/completed` went out: the item is still open for the
            # client, and the turn's end must close it.
            self._completed.discard(item.id)
            self._open[item.id] = entry
            if started is not None:
                self._commands[item.id] = started
            raise
        if isinstance(item, AgentMessageItem):
            self._final_message = item
        await self.thread.persist(
            [
                ItemEntry(
                    turn_id=self.id,
                    item=msgspec.Raw(msgspec.json.encode(item)),
                    completed_at_ms=completed_at,
                )
            ]
        )

    async def _send_completion(self, item: ThreadItem, entry: _OpenItem) -> int:
        """The deltas the client has not seen, then `item/completed`; returns its time."""
        if isinstance(item, (AgentMessageItem, PlanItem)):
            streamed = "".join(entry.text)
            # Deltas must concatenate to the final text: send what the client has not seen.
            missing = item.text[len(streamed) :] if item.text.startswith(streamed) else ""
            if missing and (streamed or item.text):
                method = (
                    "item/agentMessage/delta"
                    if isinstance(item, AgentMessageItem)
                    else "item/plan/delta"
                )
                cls = (
                    AgentMessageDeltaNotification
                    if isinstance(item, AgentMessageItem)
                    else PlanDeltaNotification
                )
                await self._notify(
                    method,
                    cls(thread_id=self.thread.id, turn_id=self.id, item_id=item.id, delta=missing),
                )
                entry.text.append(missing)  # the client has it now
        completed_at = _now_ms()
        await self._notify(
            "item/completed",
            ItemCompletedNotification(
                thread_id=self.thread.id, turn_id=self.id, item=item, completed_at_ms=completed_at
            ),
        )
        return completed_at

    def _close_in_flight(self, item_id: str, status: TurnStatus) -> ThreadItem:
        """The final state of an item the backend left open when the turn ended."""
        entry = self._open[item_id]
        item = msgspec.structs.replace(entry.item)
        never_ran = self._approvals.get(item_id) in ("pending", "decline", "cancel")
        match item:
            case AgentMessageItem() | PlanItem():
                item.text = "".join(entry.text)
            case ReasoningItem():
                item = self._reconcile(item)
            case CommandExecutionItem():
                item.status = "declined" if never_ran else "failed"
                if entry.text:
                    item.aggregated_output = "".join(entry.text)
            case FileChangeItem():
                item.status = "declined" if never_ran else "failed"
            case McpToolCallItem():
                item.status = "failed"
                item.error = McpToolCallError(message=f"turn {status} before the tool finished")
            case DynamicToolCallItem():
                item.status = "failed"
                item.success = False
            case _:
                pass
        return item
