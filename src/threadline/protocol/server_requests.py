"""Server → client requests (approvals and questions) and their responses.

Decisions are `accept | acceptForSession | decline | cancel` (`cancel` = decline and interrupt
the turn). Anything else a client answers is treated as `decline` (fail closed)."""

from __future__ import annotations

from typing import Any, Literal

from .base import Base, ItemScoped, TurnScoped
from .items import CommandAction, ToolOutput

__all__ = [
    "SERVER_REQUESTS",
    "ApprovalDecision",
    "CommandExecutionRequestApprovalParams",
    "CommandExecutionRequestApprovalResponse",
    "DynamicToolCallParams",
    "DynamicToolCallResponse",
    "FileChangeRequestApprovalParams",
    "FileChangeRequestApprovalResponse",
    "ToolRequestApprovalParams",
    "ToolRequestApprovalResponse",
    "ToolRequestUserInputAnswer",
    "ToolRequestUserInputOption",
    "ToolRequestUserInputParams",
    "ToolRequestUserInputQuestion",
    "ToolRequestUserInputResponse",
]

ApprovalDecision = Literal["accept", "acceptForSession", "decline", "cancel"]


class _ApprovalParams(ItemScoped, kw_only=True):
    # When the item being approved started.
    started_at_ms: int


class CommandExecutionRequestApprovalParams(_ApprovalParams, kw_only=True):
    kind: Literal["command"] = "command"
    command: str | None = None
    cwd: str | None = None
    command_actions: list[CommandAction] | None = None
    reason: str | None = None


class CommandExecutionRequestApprovalResponse(Base, kw_only=True):
    # Codex's amendment object forms (acceptWithExecpolicyAmendment, ...) are accepted as
    # `accept`; see threadline.server.approvals.
    decision: ApprovalDecision | dict[str, Any]


class FileChangeRequestApprovalParams(_ApprovalParams, kw_only=True):
    reason: str | None = None
    grant_root: str | None = None


class FileChangeRequestApprovalResponse(Base, kw_only=True):
    decision: ApprovalDecision


class ToolRequestUserInputOption(Base, kw_only=True):
    label: str
    description: str


class ToolRequestUserInputQuestion(Base, kw_only=True):
    id: str
    header: str
    question: str
    options: list[ToolRequestUserInputOption] | None = None
    is_other: bool = False
    is_secret: bool = False


class ToolRequestUserInputParams(ItemScoped, kw_only=True):
    is_blocking: bool
    questions: list[ToolRequestUserInputQuestion]


class ToolRequestUserInputAnswer(Base, kw_only=True):
    answers: list[str]


class ToolRequestUserInputResponse(Base, kw_only=True):
    answers: dict[str, ToolRequestUserInputAnswer]


class ToolRequestApprovalParams(_ApprovalParams, kw_only=True):
    """threadline extension: approval for a tool that is neither a command nor a file change
    (an MCP tool, a web fetch, ...). The item being approved was announced by `item/started`."""

    tool: str
    arguments: Any = None
    reason: str | None = None


class ToolRequestApprovalResponse(Base, kw_only=True):
    decision: ApprovalDecision


class DynamicToolCallParams(TurnScoped, kw_only=True):
    """A call of one of the thread's client-defined tools (`dynamicTools`); the client runs
    it and answers with `DynamicToolCallResponse`. `callId` is the `dynamicToolCall` item's
    id."""

    call_id: str
    tool: str
    arguments: Any
    namespace: str | None = None


class DynamicToolCallResponse(Base, kw_only=True):
    content_items: list[ToolOutput]
    success: bool


#: method → (params type, response type)
SERVER_REQUESTS: dict[str, tuple[type[Base], type[Base]]] = {
    "item/commandExecution/requestApproval": (
        CommandExecutionRequestApprovalParams,
        CommandExecutionRequestApprovalResponse,
    ),
    "item/fileChange/requestApproval": (
        FileChangeRequestApprovalParams,
        FileChangeRequestApprovalResponse,
    ),
    "item/tool/requestUserInput": (ToolRequestUserInputParams, ToolRequestUserInputResponse),
    "item/tool/requestApproval": (ToolRequestApprovalParams, ToolRequestApprovalResponse),
    "item/tool/call": (DynamicToolCallParams, DynamicToolCallResponse),
}
