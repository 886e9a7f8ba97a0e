"""Server → client notifications: params types and the method table (Codex v2 names)."""

from __future__ import annotations

from typing import Literal

from .base import Base, RequestId
from .common import Thread, ThreadStatus, ThreadTokenUsage, Turn, TurnError, TurnPlanStep
from .items import ThreadItem

__all__ = [
    "NOTIFICATIONS",
    "AgentMessageDeltaNotification",
    "ApprovalAutoDecidedNotification",
    "CommandExecutionOutputDeltaNotification",
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
    "ThreadStartedNotification",
    "ThreadStatusChangedNotification",
    "ThreadTokenUsageUpdatedNotification",
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


class TurnStartedNotification(Base, kw_only=True):
    thread_id: str
    turn: Turn


class TurnCompletedNotification(Base, kw_only=True):
    thread_id: str
    turn: Turn


class ItemStartedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    item: ThreadItem
    started_at_ms: int


class ItemCompletedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    item: ThreadItem
    completed_at_ms: int


class _ItemDelta(Base, kw_only=True):
    thread_id: str
    turn_id: str
    item_id: str
    delta: str


class AgentMessageDeltaNotification(_ItemDelta, kw_only=True):
    pass


class PlanDeltaNotification(_ItemDelta, kw_only=True):
    pass


class ReasoningSummaryTextDeltaNotification(_ItemDelta, kw_only=True):
    summary_index: int


class ReasoningSummaryPartAddedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    item_id: str
    summary_index: int


class ReasoningTextDeltaNotification(_ItemDelta, kw_only=True):
    content_index: int


class CommandExecutionOutputDeltaNotification(_ItemDelta, kw_only=True):
    pass


class FileChangeOutputDeltaNotification(_ItemDelta, kw_only=True):
    pass


class McpToolCallProgressNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    item_id: str
    message: str


class TurnPlanUpdatedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    plan: list[TurnPlanStep]
    explanation: str | None = None


class TurnDiffUpdatedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
    diff: str


class ThreadTokenUsageUpdatedNotification(Base, kw_only=True):
    thread_id: str
    turn_id: str
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


class ApprovalAutoDecidedNotification(Base, kw_only=True):
    """threadline extension: an approval was decided without asking the client (policy
    `never`, a rule, or the approval timeout)."""

    thread_id: str
    turn_id: str
    item_id: str
    method: str
    decision: Literal["accept", "acceptForSession", "decline", "cancel"]
    reason: Literal["policy", "rule", "timeout", "noClient"]
    rule: str | None = None


NOTIFICATIONS: dict[str, type[Base]] = {
    "thread/started": ThreadStartedNotification,
    "thread/status/changed": ThreadStatusChangedNotification,
    "thread/archived": ThreadArchivedNotification,
    "thread/closed": ThreadClosedNotification,
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
}
