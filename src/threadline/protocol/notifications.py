"""Server → client notifications: params types and the method table (Codex v2 names)."""

from __future__ import annotations

from typing import Literal

from .base import Base, ItemScoped, RequestId, TurnScoped
from .common import Thread, ThreadStatus, ThreadTokenUsage, Turn, TurnError, TurnPlanStep
from .items import ThreadItem
from .mailbox import MailboxMessageReceivedNotification
from .server_requests import ApprovalDecision

__all__ = [
    "NOTIFICATIONS",
    "AgentMessageDeltaNotification",
    "ApprovalAutoDecidedNotification",
    "CommandExecutionOutputDeltaNotification",
    "ContextCompactedNotification",
    "ErrorNotification",
    "FileChangeOutputDeltaNotification",
    "ItemCompletedNotification",
    "ItemStartedNotification",
    "McpToolCallProgressNotification",
    "PlanDeltaNotification",
    "ReasoningSummaryPartAddedNotification",
    "ReasoningSummaryTextDeltaNotification",
    "ReasoningTextDeltaNotification",
    "ServerRequestResolvedNotification",
    "ThreadArchivedNotification",
    "ThreadClosedNotification",
    "ThreadDeletedNotification",
    "ThreadNameUpdatedNotification",
    "ThreadStartedNotification",
    "ThreadStatusChangedNotification",
    "ThreadTokenUsageUpdatedNotification",
    "ThreadUnarchivedNotification",
    "TurnCompletedNotification",
    "TurnDiffUpdatedNotification",
    "TurnPlanUpdatedNotification",
    "TurnStartedNotification",
    "WarningNotification",
]


class ThreadStartedNotification(Base, kw_only=True):
    thread: Thread


class ThreadStatusChangedNotification(Base, kw_only=True):
    thread_id: str
    status: ThreadStatus


class ThreadArchivedNotification(Base, kw_only=True):
    thread_id: str


class ThreadClosedNotification(Base, kw_only=True):
    thread_id: str


class ThreadUnarchivedNotification(Base, kw_only=True):
    thread_id: str


class ThreadDeletedNotification(Base, kw_only=True):
    thread_id: str


class ThreadNameUpdatedNotification(Base, kw_only=True):
    thread_id: str
    thread_name: str | None = None


class ContextCompactedNotification(TurnScoped, kw_only=True):
    """Codex's older notice of a compaction (the `contextCompaction` item is the new one)."""


class _TurnNotification(Base, kw_only=True):
    # turn/started and turn/completed carry the same payload.
    thread_id: str
    turn: Turn


class TurnStartedNotification(_TurnNotification, kw_only=True):
    pass


class TurnCompletedNotification(_TurnNotification, kw_only=True):
    pass


class _ItemNotification(TurnScoped, kw_only=True):
    item: ThreadItem


class ItemStartedNotification(_ItemNotification, kw_only=True):
    started_at_ms: int


class ItemCompletedNotification(_ItemNotification, kw_only=True):
    completed_at_ms: int


class _ItemDelta(ItemScoped, kw_only=True):
    delta: str


class AgentMessageDeltaNotification(_ItemDelta, kw_only=True):
    pass


class PlanDeltaNotification(_ItemDelta, kw_only=True):
    pass


class ReasoningSummaryTextDeltaNotification(_ItemDelta, kw_only=True):
    summary_index: int


class ReasoningSummaryPartAddedNotification(ItemScoped, kw_only=True):
    summary_index: int


class ReasoningTextDeltaNotification(_ItemDelta, kw_only=True):
    content_index: int


class CommandExecutionOutputDeltaNotification(_ItemDelta, kw_only=True):
    pass


class FileChangeOutputDeltaNotification(_ItemDelta, kw_only=True):
    pass


class McpToolCallProgressNotification(ItemScoped, kw_only=True):
    message: str


class TurnPlanUpdatedNotification(TurnScoped, kw_only=True):
    plan: list[TurnPlanStep]
    explanation: str | None = None


class TurnDiffUpdatedNotification(TurnScoped, kw_only=True):
    diff: str


class ThreadTokenUsageUpdatedNotification(TurnScoped, kw_only=True):
    token_usage: ThreadTokenUsage


class ErrorNotification(Base, kw_only=True):
    error: TurnError
    will_retry: bool
    thread_id: str
    turn_id: str


class WarningNotification(Base, kw_only=True):
    message: str
    thread_id: str | None = None


class ServerRequestResolvedNotification(Base, kw_only=True):
    thread_id: str
    request_id: RequestId


class ApprovalAutoDecidedNotification(ItemScoped, kw_only=True):
    """threadline extension: an approval was decided without asking the client (policy
    `never`, a rule, or the approval timeout)."""

    method: str
    decision: ApprovalDecision
    reason: Literal["policy", "rule", "timeout", "noClient"]
    rule: str | None = None


NOTIFICATIONS: dict[str, type[Base]] = {
    "thread/started": ThreadStartedNotification,
    "thread/status/changed": ThreadStatusChangedNotification,
    "thread/archived": ThreadArchivedNotification,
    "thread/closed": ThreadClosedNotification,
    "thread/unarchived": ThreadUnarchivedNotification,
    "thread/deleted": ThreadDeletedNotification,
    "thread/name/updated": ThreadNameUpdatedNotification,
    "thread/compacted": ContextCompactedNotification,
    "turn/started": TurnStartedNotification,
    "turn/completed": TurnCompletedNotification,
    "item/started": ItemStartedNotification,
    "item/completed": ItemCompletedNotification,
    "item/agentMessage/delta": AgentMessageDeltaNotification,
    "item/plan/delta": PlanDeltaNotification,
    "item/reasoning/summaryTextDelta": ReasoningSummaryTextDeltaNotification,
    "item/reasoning/summaryPartAdded": ReasoningSummaryPartAddedNotification,
    "item/reasoning/textDelta": ReasoningTextDeltaNotification,
    "item/commandExecution/outputDelta": CommandExecutionOutputDeltaNotification,
    "item/fileChange/outputDelta": FileChangeOutputDeltaNotification,
    "item/mcpToolCall/progress": McpToolCallProgressNotification,
    "turn/plan/updated": TurnPlanUpdatedNotification,
    "turn/diff/updated": TurnDiffUpdatedNotification,
    "thread/tokenUsage/updated": ThreadTokenUsageUpdatedNotification,
    "error": ErrorNotification,
    "warning": WarningNotification,
    "serverRequest/resolved": ServerRequestResolvedNotification,
    "item/approval/autoDecided": ApprovalAutoDecidedNotification,
    "mailbox/messageReceived": MailboxMessageReceivedNotification,
}
