"""One turn's items: a backend's normalized events become item and turn notifications here,
with one handler per event type (`_HANDLERS`).

- every `item/started` gets exactly one `item/completed` with the same id; items the backend
  left open are closed by `close_all` when the turn ends (Codex leaves them dangling);
- deltas concatenate to the completed item's text (a backend that sends only the final text
  gets one synthetic delta; a divergent final text is replaced by what was streamed);
- an item completed without being started is announced first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import msgspec

from ..backends import base as b
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
    ThreadItem,
    ThreadTokenUsageUpdatedNotification,
    TurnDiffUpdatedNotification,
    TurnPlanUpdatedNotification,
    WarningNotification,
)
from ..store import ItemEntry
from .turn_host import TurnHost

__all__ = ["ApprovalState", "TurnItems", "TurnStatus"]

log = logging.getLogger("threadline.turns")

TurnStatus = Literal["completed", "interrupted", "failed"]

#: Where an item's approval stands: asked ("pending"), or the decision.
ApprovalState = Literal["pending"] | b.ApprovalDecision
#: The approval states of an item whose tool never ran.
_NEVER_RAN: frozenset[ApprovalState] = frozenset({"pending", "decline", "cancel"})

_TextItem = AgentMessageItem | PlanItem
_TextDelta = AgentMessageDeltaNotification | PlanDeltaNotification
_TextStream = tuple[type[_TextItem], str, type[_TextDelta]]
_AGENT_MESSAGE: _TextStream = (
    AgentMessageItem,
    "item/agentMessage/delta",
    AgentMessageDeltaNotification,
)
_PLAN: _TextStream = (PlanItem, "item/plan/delta", PlanDeltaNotification)
#: The streamed-text items (by the item's type and by its delta event's type), and how their
#: deltas go out.
_TEXT_STREAMS: dict[type[Any], _TextStream] = {
    AgentMessageItem: _AGENT_MESSAGE,
    b.AgentMessageDelta: _AGENT_MESSAGE,
    PlanItem: _PLAN,
    b.PlanDelta: _PLAN,
}


class _TurnIds(TypedDict):
    thread_id: str
    turn_id: str


class _ItemIds(_TurnIds):
    item_id: str


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _OpenItem:
    item: ThreadItem
    text: list[str] = field(default_factory=list)  # agentMessage / plan deltas, command output
    summary: dict[int, list[str]] = field(default_factory=dict)
    content: dict[int, list[str]] = field(default_factory=dict)


class TurnItems:
    """The items of one turn: which are open, what the client has seen of each, how their
    tools' approvals went; sends their notifications and persists each completed item."""

    def __init__(self, host: TurnHost, turn_id: str) -> None:
        self._host = host
        self._thread_id = host.id
        self._turn_id = turn_id
        #: The fields naming this turn in its notifications.
        self._ids: _TurnIds = {"thread_id": host.id, "turn_id": turn_id}
        self._open: dict[str, _OpenItem] = {}
        self._completed: set[str] = set()
        # In-flight commandExecution items -> when they started (time.monotonic()).
        self._commands: dict[str, float] = {}
        self._approvals: dict[str, ApprovalState] = {}
        self.final_message: AgentMessageItem | None = None

    async def _notify(self, method: str, params: Any) -> None:
        await self._host.notify(method, params)

    def _item_ids(self, item_id: str) -> _ItemIds:
        """The fields naming item `item_id` in its notifications."""
        return {"thread_id": self._thread_id, "turn_id": self._turn_id, "item_id": item_id}

    # -- approvals and running commands ----------------------------------------------------------

    def is_open(self, item_id: str) -> bool:
        return item_id in self._open

    def set_approval(self, item_id: str, state: ApprovalState) -> None:
        self._approvals[item_id] = state

    def running_commands(self) -> list[float]:
        """When each in-flight command that may be running started (its tool was not held
        back by a pending, declined or cancelled approval)."""
        return [
            started
            for item_id, started in self._commands.items()
            if self._approvals.get(item_id) not in _NEVER_RAN
        ]

    # -- events ------------------------------------------------------------------------------

    def handle(self, event: b.BackendEvent) -> Awaitable[None]:
        """The notifications `event` makes, to be awaited (a plain method handing out the
        handler's coroutine: one frame less per streamed delta)."""
        return _HANDLERS.get(type(event), TurnItems._unknown)(self, event)

    async def _unknown(self, event: object) -> None:
        log.warning("unknown backend event %r", event)

    async def _item_started(self, event: b.ItemStarted) -> None:
        await self._start(event.item)

    async def _item_completed(self, event: b.ItemCompleted) -> None:
        item = event.item
        if item.id in self._completed:
            log.warning("ignoring a second completion of item %s", item.id)
            return
        if item.id not in self._open:
            # Completed without being started: announce it first. A message/plan starts empty
            # (as in Codex) and its text then goes out as a delta, so a client building the
            # text from item/started + deltas gets it once.
            started = item
            if isinstance(item, (AgentMessageItem, PlanItem)):
                started = msgspec.structs.replace(item, text="")
            await self._start(started)
        await self._complete(self._reconcile(item))

    async def _text_delta(self, event: b.AgentMessageDelta | b.PlanDelta) -> None:
        # The hot path (benchmark P3): a delta of a message already open goes straight out.
        item_id, delta = event.item_id, event.delta
        kind, method, notification = _TEXT_STREAMS[type(event)]
        entry = self._open.get(item_id)
        if entry is None:
            entry = await self._ensure_open(item_id, lambda: kind(id=item_id, text=""))
        if entry is None or not delta:
            return
        entry.text.append(delta)
        await self._host.notify(
            method,
            notification(
                thread_id=self._thread_id, turn_id=self._turn_id, item_id=item_id, delta=delta
            ),
        )

    async def _open_reasoning(self, item_id: str) -> _OpenItem | None:
        return await self._ensure_open(item_id, lambda: ReasoningItem(id=item_id))

    async def _reasoning_part_added(self, event: b.ReasoningSummaryPartAdded) -> None:
        entry = await self._open_reasoning(event.item_id)
        if entry is None:
            return
        entry.summary.setdefault(event.summary_index, [])
        note = ReasoningSummaryPartAddedNotification(
            **self._item_ids(event.item_id), summary_index=event.summary_index
        )
        await self._notify("item/reasoning/summaryPartAdded", note)

    async def _reasoning_delta(self, event: b.ReasoningSummaryDelta | b.ReasoningTextDelta) -> None:
        """A delta of one part of a reasoning item's summary, or of its raw content."""
        entry = await self._open_reasoning(event.item_id)
        if entry is None or not event.delta:
            return
        ids, delta = self._item_ids(event.item_id), event.delta
        note: ReasoningSummaryTextDeltaNotification | ReasoningTextDeltaNotification
        if isinstance(event, b.ReasoningSummaryDelta):
            entry.summary.setdefault(event.summary_index, []).append(delta)
            note = ReasoningSummaryTextDeltaNotification(
                **ids, delta=delta, summary_index=event.summary_index
            )
            await self._notify("item/reasoning/summaryTextDelta", note)
        else:
            entry.content.setdefault(event.content_index, []).append(delta)
            note = ReasoningTextDeltaNotification(
                **ids, delta=delta, content_index=event.content_index
            )
            await self._notify("item/reasoning/textDelta", note)

    async def _command_output_delta(self, event: b.CommandOutputDelta) -> None:
        entry = self._open.get(event.item_id)
        if entry is None or not event.delta:
            return
        entry.text.append(event.delta)
        note = CommandExecutionOutputDeltaNotification(
            **self._item_ids(event.item_id), delta=event.delta
        )
        await self._notify("item/commandExecution/outputDelta", note)

    async def _file_change_output_delta(self, event: b.FileChangeOutputDelta) -> None:
        if event.item_id in self._open and event.delta:
            note = FileChangeOutputDeltaNotification(
                **self._item_ids(event.item_id), delta=event.delta
            )
            await self._notify("item/fileChange/outputDelta", note)

    async def _mcp_progress(self, event: b.McpProgress) -> None:
        if event.item_id in self._open:
            note = McpToolCallProgressNotification(
                **self._item_ids(event.item_id), message=event.message
            )
            await self._notify("item/mcpToolCall/progress", note)

    async def _plan_updated(self, event: b.PlanUpdated) -> None:
        note = TurnPlanUpdatedNotification(
            **self._ids, plan=event.plan, explanation=event.explanation
        )
        await self._notify("turn/plan/updated", note)

    async def _diff_updated(self, event: b.DiffUpdated) -> None:
        await self._notify(
            "turn/diff/updated", TurnDiffUpdatedNotification(**self._ids, diff=event.diff)
        )

    async def _token_usage_updated(self, event: b.TokenUsageUpdated) -> None:
        note = ThreadTokenUsageUpdatedNotification(**self._ids, token_usage=event.usage)
        await self._notify("thread/tokenUsage/updated", note)

    async def _retryable_error(self, event: b.RetryableError) -> None:
        await self._notify(
            "error", ErrorNotification(**self._ids, error=event.error, will_retry=True)
        )

    async def _warning(self, event: b.Warning) -> None:
        note = WarningNotification(message=event.message, thread_id=self._thread_id)
        await self._notify("warning", note)

    # -- starting and completing items -----------------------------------------------------------

    async def _ensure_open(self, item_id: str, make: Callable[[], ThreadItem]) -> _OpenItem | None:
        """The open item `item_id`, started with `make()` if it is new; None once completed."""
        entry = self._open.get(item_id)
        if entry is not None:
            return entry
        if item_id in self._completed:
            log.warning("ignoring a delta for completed item %s", item_id)
            return None
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
            note = ItemStartedNotification(**self._ids, item=item, started_at_ms=_now_ms())
            await self._notify("item/started", note)
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
            # A final text that extends the deltas keeps its remainder: `_send_completion`
            # sends it as one more delta.
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
            self.final_message = item
        await self._host.persist(
            [
                ItemEntry(
                    turn_id=self._turn_id,
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
                _, method, notification = _TEXT_STREAMS[type(item)]
                await self._notify(method, notification(**self._item_ids(item.id), delta=missing))
                entry.text.append(missing)  # the client has it now
        completed_at = _now_ms()
        note = ItemCompletedNotification(**self._ids, item=item, completed_at_ms=completed_at)
        await self._notify("item/completed", note)
        return completed_at

    # -- the turn's end --------------------------------------------------------------------------

    async def close_all(self, status: TurnStatus) -> None:
        """Complete every item the backend left open, in its final state for `status`."""
        for item_id in list(self._open):
            await self._complete(self._close_in_flight(item_id, status))

    def _close_in_flight(self, item_id: str, status: TurnStatus) -> ThreadItem:
        """The final state of an item the backend left open when the turn ended."""
        entry = self._open[item_id]
        item = msgspec.structs.replace(entry.item)
        never_ran = self._approvals.get(item_id) in _NEVER_RAN
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


#: One handler per backend event type (events are the exact classes of `backends.base`).
_HANDLERS: dict[type[Any], Callable[[TurnItems, Any], Awaitable[None]]] = {
    b.ItemStarted: TurnItems._item_started,
    b.ItemCompleted: TurnItems._item_completed,
    b.AgentMessageDelta: TurnItems._text_delta,
    b.PlanDelta: TurnItems._text_delta,
    b.ReasoningSummaryPartAdded: TurnItems._reasoning_part_added,
    b.ReasoningSummaryDelta: TurnItems._reasoning_delta,
    b.ReasoningTextDelta: TurnItems._reasoning_delta,
    b.CommandOutputDelta: TurnItems._command_output_delta,
    b.FileChangeOutputDelta: TurnItems._file_change_output_delta,
    b.McpProgress: TurnItems._mcp_progress,
    b.PlanUpdated: TurnItems._plan_updated,
    b.DiffUpdated: TurnItems._diff_updated,
    b.TokenUsageUpdated: TurnItems._token_usage_updated,
    b.RetryableError: TurnItems._retryable_error,
    b.Warning: TurnItems._warning,
}
