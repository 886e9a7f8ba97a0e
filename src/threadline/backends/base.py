"""The Backend interface: what every CLI adapter implements, and what the engine gives it.

A backend knows one CLI; the engine (threadline.server) knows the protocol. A backend never
writes a notification: it reports *normalized events* through `TurnContext.emit`, asks for
approvals through `TurnContext.request_approval`, and returns (or raises `BackendError`) when
the turn is over. The turn runner turns that into protocol notifications and owns every
invariant (item pairing, delta concatenation, exactly one `turn/completed`).

Events are pushed (`await ctx.emit(...)`) rather than yielded from an async generator: trio
forbids yielding from inside a nursery or cancel scope, and every real backend needs one
(stderr drain, reader tasks).
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import trio

from ..agent_tools.servers import McpServer
from ..procs.executables import ProcessError
from ..protocol import (
    ApprovalPolicy,
    BackendCapabilities,
    CommandAction,
    Model,
    ReasoningEffortOption,
    SandboxPolicy,
    ThreadItem,
    ThreadTokenUsage,
    ToolRequestUserInputQuestion,
    TurnError,
    TurnPlanStep,
    UserInput,
)
from .kit.cli_binary import check_cli, resolve_cli
from .kit.native import NativeSession
from .kit.session_files import remove_files
from .registry import SPECS
from .spec import BackendCheck, BackendSpec, foreign_model

__all__ = [
    "AgentMessageDelta",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Backend",
    "BackendCheck",
    "BackendError",
    "BackendEvent",
    "BackendSession",
    "CommandOutputDelta",
    "ConfigInvalid",
    "DiffUpdated",
    "FileChangeOutputDelta",
    "ItemCompleted",
    "ItemStarted",
    "McpProgress",
    "PlanDelta",
    "PlanUpdated",
    "ReasoningSummaryDelta",
    "ReasoningSummaryPartAdded",
    "ReasoningTextDelta",
    "RetryableError",
    "SessionLost",
    "SessionSettings",
    "TokenUsageUpdated",
    "TuiAttach",
    "TurnContext",
    "TurnInput",
    "TurnOutcome",
    "Warning",
]

ApprovalDecision = Literal["accept", "acceptForSession", "decline", "cancel"]


class BackendError(Exception):
    """Ends the current turn as `failed` with a readable message (and optional Codex error
    info such as `unauthorized`). The thread stays usable."""

    def __init__(
        self,
        message: str,
        *,
        codex_error_info: str | dict[str, Any] | None = None,
        additional_details: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.codex_error_info = codex_error_info
        self.additional_details = additional_details

    @classmethod
    def of(cls, error: TurnError) -> BackendError:
        """The exception that ends the turn with `error`."""
        return cls(
            error.message,
            codex_error_info=error.codex_error_info,
            additional_details=error.additional_details,
        )

    def to_turn_error(self) -> TurnError:
        return TurnError(
            message=self.message,
            codex_error_info=self.codex_error_info or "other",
            additional_details=self.additional_details,
        )


class ConfigInvalid(ValueError):
    """The thread's config cannot run on this backend (thread/start answers -32602)."""


class SessionLost(BackendError):
    """The CLI turned out to be dead when a turn began (it died while idle) and nothing of the
    turn reached it. The engine reopens the session (resuming the CLI's conversation) and runs
    the turn once more instead of failing it."""


# -- what the engine hands a backend ---------------------------------------------------------


@dataclass
class SessionSettings:
    """Everything a backend needs to run one thread, resolved from the thread's params, the
    stored record (on resume) and the environment. Per-thread values override the env."""

    thread_id: str
    cwd: str
    mode: str
    model: str | None = None
    approval_policy: ApprovalPolicy = "on-request"
    #: `read-only` | `workspace-write` | `danger-full-access`, or None (the CLI's default).
    sandbox: str | None = None
    #: Codex's full sandbox policy when a `turn/start` gave one (`sandbox` is its mode).
    sandbox_policy: SandboxPolicy | None = None
    #: Codex's reasoning effort (`none` `minimal` `low` `medium` `high` `xhigh`), or None.
    effort: str | None = None
    #: Codex's reasoning summary (`auto` `concise` `detailed` `none`), or None.
    summary: str | None = None
    base_instructions: str | None = None
    developer_instructions: str | None = None
    max_turns: int = 25
    allowed_tools: list[str] | None = None
    #: Free-form backend options from `thread/start.config` (mode, permissionMode, ...).
    config: dict[str, Any] = field(default_factory=dict)
    #: Environment for the CLI (the server's environment, passed through, with `own_env`).
    env: dict[str, str] = field(default_factory=dict)
    #: The entries of `env` the thread sets itself (its provider profile's, its
    #: `config.env`; values resolved: never log or store them). Threads that differ in them
    #: never share a CLI process.
    own_env: dict[str, str] = field(default_factory=dict)
    #: The MCP servers the CLI gets for this thread, values resolved (never log or store
    #: them): the thread's `config.mcp_servers`, and `DYNAMIC_TOOLS_SERVER` when it has
    #: client-defined tools (see `kit.mcp`).
    mcp_servers: list[McpServer] = field(default_factory=list)
    #: `BACKEND_CLI_PATH` or `config.cliPath`: use this binary instead of the PATH lookup.
    cli_path: str | None = None
    #: `BACKEND_CLI_ARGS` (shell-split): the arguments of the default backend's CLI.
    cli_args: list[str] = field(default_factory=list)
    #: The CLI's own session id, known when resuming.
    backend_session_id: str | None = None
    #: True when this session continues a stored thread (thread/resume).
    resumed: bool = False
    #: True once the role bootstrap message was sent (never repeat it on resume).
    role_bootstrap_applied: bool = False
    #: `thread/fork`: the source thread's CLI session id. While `backend_session_id` is None
    #: the session opens as a fork of it (the source's own session untouched) and reports
    #: the new session's id through `TurnContext.set_backend_session_id`.
    fork_of: str | None = None

    @property
    def role_prompt(self) -> str | None:
        """The thread's effective role/system prompt (developer + base instructions)."""
        parts = [p for p in (self.base_instructions, self.developer_instructions) if p]
        return "\n\n".join(parts) or None


@dataclass
class TurnInput:
    turn_id: str
    input: list[UserInput]
    #: The text parts of `input`, joined by blank lines.
    text: str
    #: A role bootstrap message to deliver before the prompt on this turn, or None. The engine
    #: sets it on a thread's first turn only (when the role prompt is non-empty).
    bootstrap: str | None = None
    #: `turn/start.outputSchema`: a JSON Schema the final message must follow (this turn
    #: only; capability `output_schema`).
    output_schema: Any = None
    #: tui mode: a person already submitted `text` in the CLI's own interface (see
    #: `BackendSession.wait_outside_turn`); `run_turn` only reports the turn.
    outside: bool = False


@dataclass(frozen=True)
class TuiAttach:
    """tui mode: the tmux session a thread's CLI runs in, for a person to watch or type."""

    #: tmux's socket name (`tmux -L <socket>`).
    socket: str
    session: str

    @property
    def attach(self) -> str:
        return f"tmux -L {self.socket} attach -t {self.session}"


@dataclass
class ApprovalRequest:
    """Ask the client (through the approval router) whether a tool may run. The item must
    have been announced with `ItemStarted` first."""

    kind: Literal["command", "fileChange", "tool"]
    item_id: str
    command: str | None = None
    cwd: str | None = None
    command_actions: list[CommandAction] | None = None
    reason: str | None = None
    grant_root: str | None = None
    #: For kind "tool": the tool name and its arguments.
    tool: str | None = None
    arguments: Any = None


# -- normalized backend events -----------------------------------------------------------------


# The events that only name their kind are subclasses without fields of their own: the
# dataclass methods they inherit (init, eq, repr, frozen) are theirs as they are.


@dataclass(frozen=True)
class _ItemEvent:
    item: ThreadItem


class ItemStarted(_ItemEvent):
    """The item began (announce it before any delta or approval request of its own)."""


class ItemCompleted(_ItemEvent):
    """The item reached its final state."""


@dataclass(frozen=True)
class _ItemDelta:
    """Text streamed into the item `item_id` (appended to what came before)."""

    item_id: str
    delta: str


class AgentMessageDelta(_ItemDelta):
    """Text of an agent message."""


@dataclass(frozen=True)
class ReasoningSummaryPartAdded:
    item_id: str
    summary_index: int


@dataclass(frozen=True)
class ReasoningSummaryDelta(_ItemDelta):
    summary_index: int = 0


@dataclass(frozen=True)
class ReasoningTextDelta(_ItemDelta):
    content_index: int = 0


class CommandOutputDelta(_ItemDelta):
    """Output of a running command."""


class FileChangeOutputDelta(_ItemDelta):
    """Output of a file change being applied."""


class PlanDelta(_ItemDelta):
    """Text of a plan item."""


@dataclass(frozen=True)
class McpProgress:
    item_id: str
    message: str


@dataclass(frozen=True)
class PlanUpdated:
    plan: list[TurnPlanStep]
    explanation: str | None = None


@dataclass(frozen=True)
class DiffUpdated:
    diff: str


@dataclass(frozen=True)
class TokenUsageUpdated:
    usage: ThreadTokenUsage


@dataclass(frozen=True)
class RetryableError:
    """A transient failure the CLI is retrying (`error` notification, `willRetry: true`)."""

    error: TurnError


@dataclass(frozen=True)
class Warning:
    message: str


BackendEvent = (
    ItemStarted
    | ItemCompleted
    | AgentMessageDelta
    | ReasoningSummaryPartAdded
    | ReasoningSummaryDelta
    | ReasoningTextDelta
    | CommandOutputDelta
    | FileChangeOutputDelta
    | PlanDelta
    | McpProgress
    | PlanUpdated
    | DiffUpdated
    | TokenUsageUpdated
    | RetryableError
    | Warning
)


@dataclass(frozen=True)
class TurnOutcome:
    """How a turn ended, from the backend's point of view. Returning None means completed."""

    status: Literal["completed", "interrupted", "failed"]
    error: TurnError | None = None


class TurnContext(Protocol):
    """What the engine gives `BackendSession.run_turn`."""

    thread_id: str
    turn_id: str
    log: logging.Logger

    def new_item_id(self) -> str: ...

    async def emit(self, event: BackendEvent) -> None: ...

    async def request_approval(self, request: ApprovalRequest) -> ApprovalDecision:
        """Ask for a decision. Fail-closed: anything but a valid answer comes back as
        `decline`. `cancel` means: deny natively, and the engine interrupts the turn."""
        ...

    async def request_user_input(
        self, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        """Ask the client questions; None when unanswered/declined (fail closed)."""
        ...

    async def set_backend_session_id(self, session_id: str) -> None:
        """Record the CLI's own session id (persisted, used for resume)."""
        ...

    async def mark_role_bootstrap_applied(self) -> None: ...


class BackendSession(abc.ABC):
    """One thread's live connection to a CLI (a long-lived process, or per-turn spawns)."""

    #: False once the CLI died or got out of sync; the engine then closes this session and
    #: opens a fresh one (resuming the CLI session) for the next turn.
    healthy: bool = True
    #: True once the engine cut a turn off (cancelled it without the CLI ending it: server
    #: shutdown, a timeout, an interrupt the CLI did not answer): the CLI may still be working
    #: on it, so closing the session must not wait for the CLI to finish and exit by itself.
    cut_off: bool = False
    #: True once the idle policy stopped the session (no turn for its idle timeout): a
    #: process it shared with other threads stops with its last thread, without lingering.
    released: bool = False
    #: tui mode: where a person can attach to the CLI's interface; None in other modes.
    tui: TuiAttach | None = None

    @abc.abstractmethod
    async def run_turn(self, turn: TurnInput, ctx: TurnContext) -> TurnOutcome | None:
        """Run one turn to its end. Raise BackendError to fail it. Cancellation (the engine's
        hard stop) must leave no process behind."""

    async def interrupt(self) -> None:  # noqa: B027 - optional hook
        """Ask the CLI to stop the running turn natively (e.g. Claude's `interrupt` control
        request). `run_turn` should then return soon (status interrupted). Backends whose
        capabilities say `interrupt: False` are stopped by cancellation instead."""

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        """Settings named in `changed` (`OVERRIDE_FIELDS`) have new values in the settings
        this session was opened with; apply them to the live CLI before the next turn (a
        per-turn CLI reads them at its next spawn). Returns the fields it could not apply
        live: the engine then reopens the session, resuming the conversation. Only fields the
        mode declares `native` or `restart` are passed. By default everything but the
        approval policy (which the engine's router applies) needs a reopen."""
        return changed - {"approvalPolicy"}

    async def steer(self, turn: TurnInput) -> None:
        """Add input to the running turn `turn.turn_id` (capability `steer`); the engine shows
        it as a `userMessage` item once this returns. Raise BackendError when it cannot."""
        raise BackendError("this backend cannot add input to a running turn")

    async def compact(self, ctx: TurnContext) -> TurnOutcome | None:
        """Compact the CLI's conversation, as a turn of its own (capability `compact`): the
        engine has announced a `contextCompaction` item and completes it when this returns."""
        raise BackendError("this backend cannot compact its conversation")

    async def inject_items(self, items: list[Any]) -> bool:
        """Put raw Responses API items into the CLI's context natively (capability
        `inject_items: native`). False: the engine sends them as a transcript block with the
        next turn instead."""
        return False

    async def wait_outside_turn(self) -> str:
        """tui mode: wait until a person starts a turn in the CLI's own interface and return
        its prompt. The engine then reports it as a turn, calling `run_turn` with
        `TurnInput.outside`. The engine calls this only while no turn runs and cancels it
        when one starts. Other modes never return."""
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def stop_commands(self, since: float) -> None:  # noqa: B027 - optional hook
        """Kill the commands the CLI started since `since` (a `time.monotonic()` value), in
        process groups of their own: the engine calls this right after `interrupt`, so a
        cancelled command dies at once instead of whenever the CLI gets to it. Must not
        block; the CLI itself keeps running."""


class Backend(abc.ABC):
    """A CLI adapter. One instance per server; `session()` opens one per thread. What it is
    (id, modes, capabilities, its CLI) comes from its spec."""

    def __init__(self, spec: BackendSpec) -> None:
        self.spec = spec
        self.id: str = spec.id
        self.display_name: str = spec.display_name
        self.modes: Sequence[str] = spec.modes
        self.default_mode: str = spec.default_mode

    def capabilities(self, mode: str) -> BackendCapabilities:
        return self.spec.capabilities[mode]

    async def check(self, cli_path: str | None = None) -> BackendCheck:
        """Is the CLI installed and runnable? Never raises; quick (a `--version` run)."""
        return await check_cli(self.spec, cli_path)

    def cli_command(self, settings: SessionSettings) -> str | None:
        """The CLI a thread runs, as a name or a path (its `cliPath`, else the spec's
        command); None for an in-process backend. ConfigInvalid when the thread's config
        names none that can run."""
        return settings.cli_path or self.spec.cli

    def binary(self, settings: SessionSettings) -> str:
        """The CLI to run for a thread (`cli_command` on the thread's PATH); BackendError
        naming the install command when it is missing."""
        try:
            return resolve_cli(self.cli_command(settings) or "", settings.env)
        except (ProcessError, ConfigInvalid) as exc:
            raise BackendError(str(exc), codex_error_info="other") from None

    @abc.abstractmethod
    def session(self, settings: SessionSettings) -> AbstractAsyncContextManager[BackendSession]:
        """Open a session for a thread. Entering it may spawn the CLI (or defer to the first
        turn); leaving it must stop every process it started. Raise BackendError on failure."""

    def attach(self, nursery: trio.Nursery) -> None:  # noqa: B027 - optional hook
        """Called once by the server with its threads nursery: backends that share one CLI
        process between threads (ACP) run those processes there, so they outlive any one
        thread and die with the server."""

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str] | None:
        """The CLI's own files of session `session_id` (see `kit.session_files`); None when
        the backend does not know where its CLI keeps them."""
        return None

    def native_sessions(
        self, env: Mapping[str, str], cwd: str | None
    ) -> list[NativeSession] | None:
        """The sessions in the CLI's own store, whoever started them, newest first: those begun
        in `cwd`, or all (`thread/list` with `source: "native"`, adopting one with
        `thread/resume`). None when the backend cannot list them. Synchronous file work."""
        return None

    async def delete_session(self, env: Mapping[str, str], cwd: str, session_id: str) -> str | None:
        """`thread/delete` with `deleteBackendSession`: remove the CLI's own files of the
        session. A warning for the client when it cannot, None once they are gone."""
        paths = self.session_files(env, cwd, session_id)
        if paths is None:
            return f"the {self.id} backend cannot delete its CLI's session files; they are kept"
        problems = await remove_files(paths)
        if problems:
            return "could not delete the CLI's session files: " + "; ".join(problems)
        return None

    def foreign_model(self, model: str) -> bool:
        """True when `model` is another backend's model name and not this one's (see
        `BackendSpec.model_patterns`): the thread then runs the CLI's default model."""
        return foreign_model(self.spec, model, SPECS.values())

    async def list_models(self) -> list[Model]:
        """What `model/list` offers: the CLI's own list where it can give one, else the
        spec's (`models()`); the default model has `isDefault`."""
        return self.models()

    def models(self) -> list[Model]:
        """The spec's models; the first is the default."""
        efforts = [
            ReasoningEffortOption(reasoning_effort=e, description=d) for e, d in self.spec.efforts
        ]
        return [
            Model(
                id=f"{self.spec.id}/{model}",
                model=model,
                display_name=name,
                description=description,
                hidden=False,
                is_default=index == 0,
                default_reasoning_effort=self.spec.default_effort,
                supported_reasoning_efforts=efforts,
            )
            for index, (model, name, description) in enumerate(self.spec.models)
        ]

    #: Whether the CLI takes a turn limit (`BACKEND_MAX_TURNS`, `config.maxTurns`) and a
    #: tool allow-list (`ALLOWED_TOOLS`, `config.allowedTools`).
    honours_max_turns: bool = False
    honours_allowed_tools: bool = False
    #: Whether the backend runs its CLI with `BACKEND_CLI_ARGS`.
    honours_cli_args: bool = False
    #: Whether `config.env` is the backend's own to apply (with no operator allow-list);
    #: otherwise the engine applies it within `THREADLINE_THREAD_ENV`.
    config_env_is_own: bool = False

    def unsupported_options(self, settings: SessionSettings) -> list[str]:
        """Options set in `settings` (explicitly: by the thread's config or the environment)
        that this backend cannot honour: the client gets a warning, then they are ignored."""
        ignored = []
        if not self.honours_max_turns and (
            "maxTurns" in settings.config or settings.env.get("BACKEND_MAX_TURNS", "").strip()
        ):
            ignored.append("maxTurns (BACKEND_MAX_TURNS)")
        if not self.honours_allowed_tools and settings.allowed_tools:
            ignored.append("allowedTools (ALLOWED_TOOLS)")
        if not self.honours_cli_args and settings.cli_args:
            ignored.append("BACKEND_CLI_ARGS")
        return ignored
