"""ThreadItem variants (discriminator `type`), as in the Codex v2 schema.

`dynamicToolCall` is our generic tool item: tools with no Codex analogue (a CLI's Read, Grep,
Task, ...) are reported with `namespace` = the backend id and `tool` = the CLI's tool name."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .base import Base, TypeTagged
from .inputs import UserInput

__all__ = [
    "AgentMessageItem",
    "CommandAction",
    "CommandExecutionItem",
    "CommandExecutionStatus",
    "ContextCompactionItem",
    "DynamicToolCallItem",
    "FileChangeItem",
    "FileUpdateChange",
    "ListFilesAction",
    "McpToolCallError",
    "McpToolCallItem",
    "McpToolCallResult",
    "PatchApplyStatus",
    "PatchChangeKind",
    "PatchKindAdd",
    "PatchKindDelete",
    "PatchKindUpdate",
    "PlanItem",
    "ReadAction",
    "ReasoningItem",
    "SearchAction",
    "ThreadItem",
    "ToolCallStatus",
    "ToolOutput",
    "ToolOutputAudio",
    "ToolOutputImage",
    "ToolOutputText",
    "UnknownAction",
    "UserMessageItem",
    "WebSearchActionFindInPage",
    "WebSearchActionOpenPage",
    "WebSearchActionOther",
    "WebSearchActionSearch",
    "WebSearchItem",
]

CommandExecutionStatus = Literal["inProgress", "completed", "failed", "declined"]
PatchApplyStatus = Literal["inProgress", "completed", "failed", "declined"]
ToolCallStatus = Literal["inProgress", "completed", "failed"]


# -- command actions (parsed summary of a shell command, for display) ------------------------


class _ActionBase(TypeTagged, kw_only=True):
    command: str


class ReadAction(_ActionBase, tag="read", kw_only=True):
    name: str
    path: str


class ListFilesAction(_ActionBase, tag="listFiles", kw_only=True):
    path: str | None = None


class SearchAction(_ActionBase, tag="search", kw_only=True):
    query: str | None = None
    path: str | None = None


class UnknownAction(_ActionBase, tag="unknown", kw_only=True):
    pass


CommandAction = ReadAction | ListFilesAction | SearchAction | UnknownAction


# -- file changes --------------------------------------------------------------------------------


class PatchKindAdd(TypeTagged, tag="add", kw_only=True):
    pass


class PatchKindDelete(TypeTagged, tag="delete", kw_only=True):
    pass


class PatchKindUpdate(TypeTagged, tag="update", kw_only=True):
    # snake_case on the wire, as in Codex.
    move_path: str | None = msgspec.field(default=None, name="move_path")


PatchChangeKind = PatchKindAdd | PatchKindDelete | PatchKindUpdate


class FileUpdateChange(Base, kw_only=True):
    path: str
    kind: PatchChangeKind
    diff: str


# -- tool results --------------------------------------------------------------------------------


class McpToolCallResult(Base, kw_only=True):
    content: list[Any]
    structured_content: Any | None = None


class McpToolCallError(Base, kw_only=True):
    message: str


class ToolOutputText(TypeTagged, tag="inputText", kw_only=True):
    text: str


class ToolOutputImage(TypeTagged, tag="inputImage", kw_only=True):
    image_url: str


class ToolOutputAudio(TypeTagged, tag="inputAudio", kw_only=True):
    audio_url: str


#: What a dynamic tool call returned (Codex's `DynamicToolCallOutputContentItem`).
ToolOutput = ToolOutputText | ToolOutputImage | ToolOutputAudio


# -- web search actions --------------------------------------------------------------------------


class WebSearchActionSearch(TypeTagged, tag="search", kw_only=True):
    query: str | None = None
    queries: list[str] | None = None


class WebSearchActionOpenPage(TypeTagged, tag="openPage", kw_only=True):
    url: str | None = None


class WebSearchActionFindInPage(TypeTagged, tag="findInPage", kw_only=True):
    url: str | None = None
    pattern: str | None = None


class WebSearchActionOther(TypeTagged, tag="other", kw_only=True):
    pass


WebSearchAction = (
    WebSearchActionSearch
    | WebSearchActionOpenPage
    | WebSearchActionFindInPage
    | WebSearchActionOther
)


# -- items -----------------------------------------------------------------------------------------


class _ItemBase(TypeTagged, kw_only=True):
    id: str


class UserMessageItem(_ItemBase, tag="userMessage", kw_only=True):
    content: list[UserInput]
    client_id: str | None = None


class AgentMessageItem(_ItemBase, tag="agentMessage", kw_only=True):
    text: str
    phase: Literal["commentary", "partial_answer", "final_answer"] | None = None


class PlanItem(_ItemBase, tag="plan", kw_only=True):
    text: str


class ReasoningItem(_ItemBase, tag="reasoning", kw_only=True):
    # Summaries (one string per section) and raw reasoning text (one string per part).
    summary: list[str] = msgspec.field(default_factory=list)
    content: list[str] = msgspec.field(default_factory=list)


class CommandExecutionItem(_ItemBase, tag="commandExecution", kw_only=True):
    command: str
    cwd: str
    status: CommandExecutionStatus
    command_actions: list[CommandAction]
    aggregated_output: str | None = None
    exit_code: int | None = None
    duration_ms: int | None = None
    process_id: str | None = None


class FileChangeItem(_ItemBase, tag="fileChange", kw_only=True):
    changes: list[FileUpdateChange]
    status: PatchApplyStatus


class McpToolCallItem(_ItemBase, tag="mcpToolCall", kw_only=True):
    server: str
    tool: str
    arguments: Any
    status: ToolCallStatus
    result: McpToolCallResult | None = None
    error: McpToolCallError | None = None
    duration_ms: int | None = None


class DynamicToolCallItem(_ItemBase, tag="dynamicToolCall", kw_only=True):
    tool: str
    arguments: Any
    status: ToolCallStatus
    namespace: str | None = None
    content_items: list[ToolOutput] | None = None
    success: bool | None = None
    duration_ms: int | None = None


class WebSearchItem(_ItemBase, tag="webSearch", kw_only=True):
    query: str
    action: WebSearchAction | None = None


class ContextCompactionItem(_ItemBase, tag="contextCompaction", kw_only=True):
    pass


ThreadItem = (
    UserMessageItem
    | AgentMessageItem
    | PlanItem
    | ReasoningItem
    | CommandExecutionItem
    | FileChangeItem
    | McpToolCallItem
    | DynamicToolCallItem
    | WebSearchItem
    | ContextCompactionItem
)
