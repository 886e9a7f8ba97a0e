"""Shared data model: user input, threads, turns, statuses, errors, usage, policies.

Field names, casing and enum values follow the Codex app-server v2 schema (0.169.0)."""

from __future__ import annotations

from typing import Any, Literal

from .base import Base, TypeTagged
from .items import ThreadItem

__all__ = [
    "ApprovalPolicy",
    "AskForApproval",
    "CodexErrorInfo",
    "DangerFullAccessSandbox",
    "ExternalSandbox",
    "GitInfo",
    "GranularApproval",
    "ReadOnlySandbox",
    "SandboxMode",
    "SandboxPolicy",
    "Thread",
    "ThreadActive",
    "ThreadActiveFlag",
    "ThreadIdle",
    "ThreadNotLoaded",
    "ThreadStatus",
    "ThreadSystemError",
    "ThreadTokenUsage",
    "ThreadTui",
    "TokenUsageBreakdown",
    "Turn",
    "TurnError",
    "TurnItemsView",
    "TurnPlanStep",
    "TurnStatus",
    "WorkspaceWriteSandbox",
]


# -- policies ------------------------------------------------------------------------------


class GranularApproval(Base, kw_only=True):
    """Codex's experimental fine-grained policy; accepted and treated as `on-request`."""

    granular: dict[str, Any]


ApprovalPolicy = Literal["untrusted", "on-request", "never"]
AskForApproval = ApprovalPolicy | GranularApproval
SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]


class DangerFullAccessSandbox(TypeTagged, tag="dangerFullAccess", kw_only=True):
    pass


class ReadOnlySandbox(TypeTagged, tag="readOnly", kw_only=True):
    network_access: bool | None = None


class ExternalSandbox(TypeTagged, tag="externalSandbox", kw_only=True):
    network_access: Literal["restricted", "enabled"] | None = None


class WorkspaceWriteSandbox(TypeTagged, tag="workspaceWrite", kw_only=True):
    writable_roots: list[str] | None = None
    network_access: bool | None = None
    exclude_tmpdir_env_var: bool | None = None
    exclude_slash_tmp: bool | None = None


SandboxPolicy = DangerFullAccessSandbox | ReadOnlySandbox | ExternalSandbox | WorkspaceWriteSandbox


# -- errors and usage --------------------------------------------------------------------------

#: One of Codex's error strings (`unauthorized`, `internalServerError`, `other`, ...) or one of
#: its object forms such as `{"httpConnectionFailed": {"httpStatusCode": 502}}`.
CodexErrorInfo = str | dict[str, Any]


class TurnError(Base, kw_only=True):
    message: str
    codex_error_info: CodexErrorInfo | None = None
    additional_details: str | None = None


class TokenUsageBreakdown(Base, kw_only=True):
    total_tokens: int
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_output_tokens: int
    cache_write_input_tokens: int | None = None


class ThreadTokenUsage(Base, kw_only=True):
    total: TokenUsageBreakdown
    last: TokenUsageBreakdown
    model_context_window: int | None = None


class TurnPlanStep(Base, kw_only=True):
    step: str
    status: Literal["pending", "inProgress", "completed"]


# -- thread status ---------------------------------------------------------------------------

ThreadActiveFlag = Literal["waitingOnApproval", "waitingOnUserInput"]


class ThreadNotLoaded(TypeTagged, tag="notLoaded", kw_only=True):
    pass


class ThreadIdle(TypeTagged, tag="idle", kw_only=True):
    pass


class ThreadSystemError(TypeTagged, tag="systemError", kw_only=True):
    pass


class ThreadActive(TypeTagged, tag="active", kw_only=True):
    # Required (also when empty), as in Codex.
    active_flags: list[ThreadActiveFlag]


ThreadStatus = ThreadNotLoaded | ThreadIdle | ThreadSystemError | ThreadActive


# -- turns and threads -------------------------------------------------------------------------

TurnStatus = Literal["inProgress", "completed", "interrupted", "failed"]
TurnItemsView = Literal["notLoaded", "summary", "full"]


class Turn(Base, kw_only=True):
    id: str
    status: TurnStatus
    # Not authoritative (as in Codex): notifications carry the items; `itemsView` says what
    # this list holds.
    items: list[ThreadItem]
    items_view: TurnItemsView | None = None
    error: TurnError | None = None
    started_at: int | None = None
    completed_at: int | None = None
    duration_ms: int | None = None


class GitInfo(Base, kw_only=True):
    branch: str | None = None
    origin_url: str | None = None
    sha: str | None = None


class ThreadTui(Base, kw_only=True):
    """A tui-mode thread's CLI, running in tmux: `attach` is the command that shows it."""

    socket: str
    session: str
    attach: str


class Thread(Base, kw_only=True):
    id: str
    session_id: str
    preview: str
    ephemeral: bool
    model_provider: str
    created_at: int
    updated_at: int
    status: ThreadStatus
    cwd: str
    cli_version: str
    source: str | dict[str, Any]
    # Required-but-nullable in Codex's schema: no default, so it is always sent.
    project_id: str | None
    # Filled by thread/read includeTurns and thread/resume only.
    turns: list[Turn]
    model: str | None = None
    name: str | None = None
    path: str | None = None
    originator: str | None = None
    #: The thread this one was forked from (`thread/fork`).
    forked_from_id: str | None = None
    git_info: GitInfo | None = None
    #: tui mode (a threadline addition): where a person can watch the CLI's own interface,
    #: once it runs.
    tui: ThreadTui | None = None
