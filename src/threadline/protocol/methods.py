"""Client → server requests: params and results, and the method table.

Params follow Codex 0.169.0; unknown fields are ignored. Backend choice uses Codex's own
fields: `modelProvider` = backend id, `model` = that CLI's model, backend options in `config`."""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

import msgspec

from .base import Base, TurnScoped
from .common import (
    AskForApproval,
    SandboxMode,
    SandboxPolicy,
    Thread,
    Turn,
)
from .control import (
    ThreadCompactStartParams,
    ThreadCompactStartResponse,
    ThreadInjectItemsParams,
    ThreadInjectItemsResponse,
    TurnSteerParams,
    TurnSteerResponse,
)
from .inputs import UserInput
from .management import (
    ThreadDeleteParams,
    ThreadDeleteResponse,
    ThreadItemsListParams,
    ThreadItemsListResponse,
    ThreadMetadataUpdateParams,
    ThreadMetadataUpdateResponse,
    ThreadSetNameParams,
    ThreadSetNameResponse,
    ThreadTurnsListParams,
    ThreadTurnsListResponse,
    ThreadUnarchiveParams,
    ThreadUnarchiveResponse,
)

__all__ = [
    "CLIENT_METHODS",
    "BackendCapabilities",
    "BackendInfo",
    "ClientInfo",
    "DynamicToolSpec",
    "EmptyParams",
    "EmptyResult",
    "InitializeCapabilities",
    "InitializeParams",
    "InitializeResponse",
    "Model",
    "ModelListParams",
    "ModelListResponse",
    "ProfileInfo",
    "ReasoningEffortOption",
    "ServerInfo",
    "ThreadArchiveParams",
    "ThreadArchiveResponse",
    "ThreadForkParams",
    "ThreadForkResponse",
    "ThreadListParams",
    "ThreadListResponse",
    "ThreadLoadedListParams",
    "ThreadLoadedListResponse",
    "ThreadReadParams",
    "ThreadReadResponse",
    "ThreadResumeParams",
    "ThreadResumeResponse",
    "ThreadSettingsParams",
    "ThreadStartParams",
    "ThreadStartResponse",
    "ThreadUnsubscribeParams",
    "ThreadUnsubscribeResponse",
    "TurnInterruptParams",
    "TurnInterruptResponse",
    "TurnStartParams",
    "TurnStartResponse",
]

_T = TypeVar("_T")


class EmptyParams(Base, kw_only=True):
    pass


class EmptyResult(Base, kw_only=True):
    pass


# -- initialize --------------------------------------------------------------------------------


class ClientInfo(Base, kw_only=True):
    name: str
    version: str
    title: str | None = None


class InitializeCapabilities(Base, kw_only=True):
    experimental_api: bool = False
    opt_out_notification_methods: list[str] | None = None


class InitializeParams(Base, kw_only=True):
    client_info: ClientInfo
    capabilities: InitializeCapabilities | None = None


class ServerInfo(Base, kw_only=True):
    name: str
    version: str


class BackendCapabilities(Base, kw_only=True):
    """What a backend can do in a given mode, as reported by its code (never hand-kept)."""

    approvals: bool
    interrupt: bool
    resume: bool
    deltas: bool
    reasoning: bool
    images: bool = False
    #: With `images`: an `image` given by an http(s) URL reaches the model too (else only
    #: local files and `data:` URLs do).
    image_urls: bool = True
    #: How each `turn/start` override reaches the CLI: `native` (applied to the running CLI,
    #: or at its next per-turn spawn), `restart` (the CLI is reopened, resuming its session),
    #: `unsupported` (a `warning` names the field; the value is kept for the thread).
    overrides: dict[str, Literal["native", "restart", "unsupported"]] = msgspec.field(
        default_factory=dict
    )
    #: `turn/start.outputSchema` constrains the final message.
    output_schema: bool = False
    #: `turn/steer` adds input to the running turn.
    steer: bool = False
    #: `thread/fork` copies the CLI's conversation into a new thread.
    fork: bool = False
    #: `thread/compact/start` compacts the CLI's context.
    compact: bool = False
    #: How `thread/inject_items` reaches the CLI: `native`, or `transcript` (a transcript
    #: block sent once with the next turn).
    inject_items: Literal["native", "transcript"] = "transcript"
    #: How threadline runs the CLI in this mode (process model and command line).
    invocation: str = ""
    #: How a thread's role (baseInstructions/developerInstructions) reaches the agent.
    role_injection: str = ""


class ProfileInfo(Base, kw_only=True):
    """A provider profile of the operator's for this backend (`thread/start.config.profile`):
    its names, never its values."""

    name: str
    #: False when a reference does not resolve now (`problems` says which).
    usable: bool
    model: str | None = None
    mode: str | None = None
    #: The variables it sets (names only).
    env: list[str] = []
    problems: list[str] = []


class BackendInfo(Base, kw_only=True):
    id: str
    available: bool
    modes: list[str]
    default_mode: str
    capabilities: dict[str, BackendCapabilities]
    version: str | None = None
    path: str | None = None
    message: str | None = None
    #: A hint whether credentials look configured (never the credentials themselves), or
    #: what to do when none are found.
    credentials: str | None = None
    #: True when the installed CLI is older than the oldest version threadline is tested with
    #: (`message` names the versions and the upgrade command).
    outdated: bool = False
    #: The operator's provider profiles for this backend.
    profiles: list[ProfileInfo] = []


class InitializeResponse(Base, kw_only=True):
    user_agent: str
    codex_home: str
    platform_family: Literal["unix", "windows"]
    platform_os: Literal["linux", "macos", "windows"]
    # threadline additions (Codex clients ignore unknown fields).
    server_info: ServerInfo
    backends: list[BackendInfo]


# -- threads -------------------------------------------------------------------------------------


class ThreadSettingsParams(Base, kw_only=True):
    """What thread/start, thread/resume and thread/fork all set for the thread."""

    model: str | None = None
    model_provider: str | None = None
    cwd: str | None = None
    approval_policy: AskForApproval | None = None
    approvals_reviewer: str | None = None
    sandbox: SandboxMode | None = None
    config: dict[str, Any] | None = None
    base_instructions: str | None = None
    developer_instructions: str | None = None
    personality: str | None = None


class DynamicToolSpec(Base, kw_only=True):
    """A client-defined tool (Codex's `DynamicToolSpec`): a `function` (`type` may be left
    out), or a `namespace` of functions (`tools`). Calls reach the client as `item/tool/call`."""

    name: str
    description: str = ""
    input_schema: Any = None
    type: Literal["function", "namespace"] = "function"
    tools: list[DynamicToolSpec] | None = None
    defer_loading: bool | None = None


class ThreadStartParams(ThreadSettingsParams, kw_only=True):
    #: Client-defined tools (experimental in Codex; threadline accepts them without
    #: `experimentalApi`). Stored with the thread: a resumed thread offers them again.
    dynamic_tools: list[DynamicToolSpec] | None = None
    ephemeral: bool | None = None
    service_name: str | None = None
    service_tier: str | None = None


class ThreadStartResponse(Base, kw_only=True):
    thread: Thread
    model: str
    model_provider: str
    cwd: str
    approval_policy: AskForApproval
    approvals_reviewer: Literal["user", "auto_review", "guardian_subagent"]
    sandbox: SandboxPolicy


class ThreadResumeParams(ThreadSettingsParams, kw_only=True):
    """Resume a threadline thread (`threadId`), or adopt a session of the CLI's own, started
    outside threadline too (`modelProvider` names the backend; `backendSessionId`, `latest`
    or `path` the session): a new thread is bound to it, or the thread already bound to it
    is resumed."""

    #: The thread to resume (required unless a CLI session is adopted).
    thread_id: str | None = None
    exclude_turns: bool = False
    #: Adopt the CLI's session with this id (as `thread/list` with `source: "native"`
    #: lists it).
    backend_session_id: str | None = None
    #: Adopt the CLI's newest session begun in `cwd` (the server's directory by default).
    latest: bool = False
    #: Adopt the session kept in this file (Codex's rollout path; claude's transcript).
    path: str | None = None
    #: An adopted session: deliver the thread's role prompt as a bootstrap message with its
    #: first turn. By default it is not (the chat already has its own).
    inject_role: bool = False


class ThreadResumeResponse(ThreadStartResponse, kw_only=True):
    pass


class ThreadForkParams(ThreadSettingsParams, kw_only=True):
    """`thread/fork`: a new thread with the source's history; the settings given override
    the source's."""

    thread_id: str
    #: Codex's fork-by-rollout-path; threadline forks by `threadId` only.
    path: str | None = None
    #: Fork through this turn (inclusive); it must be the source's last finished turn, as a
    #: CLI's fork copies its whole conversation.
    last_turn_id: str | None = None
    exclude_turns: bool = False
    ephemeral: bool = False


class ThreadForkResponse(ThreadStartResponse, kw_only=True):
    reasoning_effort: str | None = None


class _PageParams(Base, kw_only=True):
    # The request of a cursor-paged list: `cursor` is the `nextCursor` of the page before.
    cursor: str | None = None
    limit: int | None = None


class _Page(Base, Generic[_T], kw_only=True):
    # One page of a cursor-paged list; no `nextCursor` on the last.
    data: list[_T]
    next_cursor: str | None = None


class ThreadListParams(_PageParams, kw_only=True):
    sort_key: Literal["created_at", "updated_at", "recency_at", "section_position"] | None = None
    sort_direction: Literal["asc", "desc"] | None = None
    archived: bool | None = None
    cwd: str | list[str] | None = None
    model_providers: list[str] | None = None
    search_term: str | None = None
    #: `native`: list the sessions in the CLIs' own stores instead (whoever started them:
    #: `id` is the CLI's session id, for `thread/resume` `backendSessionId`).
    source: Literal["threadline", "native"] | None = None


class ThreadListResponse(_Page[Thread], kw_only=True):
    pass


class ThreadReadParams(Base, kw_only=True):
    thread_id: str
    include_turns: bool = False


class ThreadReadResponse(Base, kw_only=True):
    thread: Thread


class ThreadArchiveParams(Base, kw_only=True):
    thread_id: str


class ThreadArchiveResponse(Base, kw_only=True):
    pass


class ThreadUnsubscribeParams(Base, kw_only=True):
    thread_id: str


class ThreadUnsubscribeResponse(Base, kw_only=True):
    status: Literal["unsubscribed", "notSubscribed", "notLoaded"]


class ThreadLoadedListParams(_PageParams, kw_only=True):
    pass


class ThreadLoadedListResponse(_Page[str], kw_only=True):
    pass


# -- turns -----------------------------------------------------------------------------------------


class TurnStartParams(Base, kw_only=True):
    thread_id: str
    input: list[UserInput]
    cwd: str | None = None
    approval_policy: AskForApproval | None = None
    sandbox_policy: SandboxPolicy | None = None
    model: str | None = None
    effort: str | None = None
    summary: str | None = None
    output_schema: Any | None = None
    client_user_message_id: str | None = None


class TurnStartResponse(Base, kw_only=True):
    turn: Turn


class TurnInterruptParams(TurnScoped, kw_only=True):
    """Params of `turn/interrupt` and of its alias `turn/cancel`."""


class TurnInterruptResponse(Base, kw_only=True):
    pass


# -- models ---------------------------------------------------------------------------------


class ModelListParams(_PageParams, kw_only=True):
    include_hidden: bool | None = None
    model_provider: str | None = None


class ReasoningEffortOption(Base, kw_only=True):
    reasoning_effort: str
    description: str


class Model(Base, kw_only=True):
    id: str
    model: str
    display_name: str
    description: str
    hidden: bool
    is_default: bool
    default_reasoning_effort: str
    supported_reasoning_efforts: list[ReasoningEffortOption]


class ModelListResponse(_Page[Model], kw_only=True):
    pass


#: method → (params type, result type). `turn/cancel` is threadline's name for Codex's
#: `turn/interrupt`: same params, same effect.
CLIENT_METHODS: dict[str, tuple[type[Base], type[Base]]] = {
    "initialize": (InitializeParams, InitializeResponse),
    "thread/start": (ThreadStartParams, ThreadStartResponse),
    "thread/resume": (ThreadResumeParams, ThreadResumeResponse),
    "thread/list": (ThreadListParams, ThreadListResponse),
    "thread/read": (ThreadReadParams, ThreadReadResponse),
    "thread/archive": (ThreadArchiveParams, ThreadArchiveResponse),
    "thread/loaded/list": (ThreadLoadedListParams, ThreadLoadedListResponse),
    "thread/unsubscribe": (ThreadUnsubscribeParams, ThreadUnsubscribeResponse),
    "thread/fork": (ThreadForkParams, ThreadForkResponse),
    "thread/unarchive": (ThreadUnarchiveParams, ThreadUnarchiveResponse),
    "thread/delete": (ThreadDeleteParams, ThreadDeleteResponse),
    "thread/name/set": (ThreadSetNameParams, ThreadSetNameResponse),
    "thread/metadata/update": (ThreadMetadataUpdateParams, ThreadMetadataUpdateResponse),
    "thread/turns/list": (ThreadTurnsListParams, ThreadTurnsListResponse),
    "thread/items/list": (ThreadItemsListParams, ThreadItemsListResponse),
    "thread/inject_items": (ThreadInjectItemsParams, ThreadInjectItemsResponse),
    "thread/compact/start": (ThreadCompactStartParams, ThreadCompactStartResponse),
    "turn/start": (TurnStartParams, TurnStartResponse),
    "turn/steer": (TurnSteerParams, TurnSteerResponse),
    "turn/interrupt": (TurnInterruptParams, TurnInterruptResponse),
    "turn/cancel": (TurnInterruptParams, TurnInterruptResponse),
    "model/list": (ModelListParams, ModelListResponse),
}

#: Client notifications we accept (and ignore beyond logging).
CLIENT_NOTIFICATIONS: frozenset[str] = frozenset({"initialized"})
