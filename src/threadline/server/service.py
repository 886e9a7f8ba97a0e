"""Thread and turn requests: `thread/*`, `turn/*`, `model/list` — the engine's front door."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import msgspec
import trio

from ..agent_tools.calls import DEFAULT_TIMEOUT, ThreadTools, flatten, validate_specs
from ..agent_tools.host import ToolHosting
from ..agent_tools.servers import parse_servers, resolve
from ..backends.base import Backend, ConfigInvalid, SessionSettings
from ..backends.kit.cli_binary import resolve_cli
from ..backends.kit.images import image_problems
from ..backends.kit.native import NativeSession
from ..ids import InvalidId, new_id, validate_id
from ..procs.executables import ProcessError
from ..profiles import Profile, ProfileError, load_profiles, profiles_path, thread_env
from ..protocol import (
    ApprovalPolicy,
    AskForApproval,
    DangerFullAccessSandbox,
    DynamicToolSpec,
    EmptyResult,
    GranularApproval,
    ImageInput,
    LocalImageInput,
    Model,
    ModelListParams,
    ModelListResponse,
    ReadOnlySandbox,
    SandboxPolicy,
    Thread,
    ThreadArchivedNotification,
    ThreadArchiveParams,
    ThreadForkResponse,
    ThreadItem,
    ThreadListParams,
    ThreadListResponse,
    ThreadLoadedListParams,
    ThreadLoadedListResponse,
    ThreadNotLoaded,
    ThreadReadParams,
    ThreadReadResponse,
    ThreadResumeParams,
    ThreadResumeResponse,
    ThreadSettingsParams,
    ThreadStartedNotification,
    ThreadStartParams,
    ThreadStartResponse,
    Turn,
    TurnError,
    TurnInterruptParams,
    TurnStartParams,
    TurnStartResponse,
    UserInput,
    WarningNotification,
    WorkspaceWriteSandbox,
)
from ..rpc.connection import Reply
from ..rpc.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, RpcError
from ..rpc.peer import Peer
from ..store import StoreCorrupt, ThreadRecord, ThreadStore, TurnStartedEntry, turns_from_log
from .adoption import history, native_sessions, native_view, wanted_session
from .approvals import parse_rules
from .config import ServerConfig
from .overrides import apply_overrides, foreign_model_warning
from .threads import LoadedThread, thread_view

__all__ = ["ThreadService"]

log = logging.getLogger("threadline.service")

_ITEM_DECODER = msgspec.json.Decoder(ThreadItem)
_ERROR_DECODER = msgspec.json.Decoder(TurnError)

_Response = TypeVar("_Response", ThreadStartResponse, ThreadResumeResponse, ThreadForkResponse)


def _policy(value: AskForApproval | None) -> ApprovalPolicy | None:
    """The policy a request names, if any; Codex's granular policy counts as `on-request`."""
    if isinstance(value, GranularApproval):
        return "on-request"
    return value


def _stored_policy(stored: Mapping[str, Any], thread_id: str) -> ApprovalPolicy:
    """The policy saved with a thread; `on-request` when it is missing or not a policy."""
    raw = stored.get("approvalPolicy", "on-request")
    try:
        policy: ApprovalPolicy = msgspec.convert(raw, ApprovalPolicy)
    except msgspec.ValidationError:
        log.warning(
            "thread %s: stored approvalPolicy %r is not a policy: on-request", thread_id, raw
        )
        return "on-request"
    return policy


def _sandbox_policy(mode: str | None, cwd: str) -> SandboxPolicy:
    if mode == "read-only":
        return ReadOnlySandbox()
    if mode == "workspace-write":
        return WorkspaceWriteSandbox(writable_roots=[cwd])
    return DangerFullAccessSandbox()


def _seconds(config: Mapping[str, Any], key: str, default: float | None) -> float | None:
    raw = config.get(key)
    if raw is None:
        return default
    if not isinstance(raw, (int, float)) or isinstance(raw, bool) or raw <= 0:
        raise RpcError(INVALID_PARAMS, f"Invalid params: config.{key} must be a positive number")
    return float(raw) / 1000.0


def _offset(cursor: str | None) -> int:
    """The offset a `thread/loaded/list` or `model/list` cursor names (we hand out decimal
    offsets); anything else starts at 0. `str.isdigit()` alone let through '²' (a digit, not a
    decimal) and numbers over Python's 4300-digit limit: int() raised and the request was
    answered with -32603 Internal error."""
    if cursor and cursor.isdigit():
        try:
            return int(cursor)
        except ValueError:
            pass
    return 0


_Row = TypeVar("_Row", ThreadRecord, Thread)


def _sorted(rows: list[_Row], p: ThreadListParams) -> list[_Row]:
    key = "updated_at" if p.sort_key in ("updated_at", "recency_at") else "created_at"
    return sorted(rows, key=lambda r: (getattr(r, key), r.id), reverse=p.sort_direction != "asc")


def _page(rows: list[Thread], p: ThreadListParams) -> ThreadListResponse:
    """The page of `rows` that `p.cursor` (an offset) and `p.limit` name."""
    start = 0
    if p.cursor:
        try:
            start = max(0, int(p.cursor))
        except ValueError:
            raise RpcError(INVALID_PARAMS, f"Invalid params: bad cursor {p.cursor!r}") from None
    limit = max(1, min(p.limit or 100, 1000))
    nxt = str(start + limit) if start + limit < len(rows) else None
    return ThreadListResponse(data=rows[start : start + limit], next_cursor=nxt)


class ThreadService:
    def __init__(
        self,
        *,
        config: ServerConfig,
        store: ThreadStore,
        peer: Peer,
        backends: Mapping[str, Backend],
        nursery: trio.Nursery,
    ) -> None:
        self.config = config
        self.store = store
        self.peer = peer
        self.backends = dict(backends)
        self._nursery = nursery
        for backend in self.backends.values():
            backend.attach(nursery)
        self.loaded: dict[str, LoadedThread] = {}
        self._opening: set[str] = set()
        self._tools = ToolHosting(nursery)
        self.shutting_down = False

    # -- helpers -----------------------------------------------------------------------------

    def _backend(self, backend_id: str | None) -> Backend:
        name = backend_id or self.config.default_backend
        backend = self.backends.get(name)
        if backend is None:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: unknown modelProvider {name!r}; valid: "
                + ", ".join(self.backends),
            )
        return backend

    def backend_of(self, record: ThreadRecord) -> Backend:
        return self._backend(record.backend)

    @staticmethod
    def thread_id(value: str) -> str:
        try:
            return validate_id(value)
        except InvalidId as exc:
            raise RpcError(INVALID_REQUEST, str(exc)) from None

    def loaded_thread(self, thread_id: str) -> LoadedThread:
        tid = self.thread_id(thread_id)
        thread = self.loaded.get(tid)
        if thread is None:
            raise RpcError(INVALID_REQUEST, f"thread not loaded: {tid} (call thread/resume first)")
        return thread

    async def load_record(self, thread_id: str) -> ThreadRecord:
        try:
            record = await self.store.load(thread_id)
        except StoreCorrupt as exc:
            raise RpcError(INVALID_REQUEST, f"thread {thread_id} is unreadable: {exc}") from None
        if record is None:
            raise RpcError(INVALID_REQUEST, f"no rollout found for thread id {thread_id}")
        return record

    def _settings(
        self,
        *,
        thread_id: str,
        backend: Backend,
        cwd: str,
        model: str | None,
        approval_policy: ApprovalPolicy,
        sandbox: str | None,
        base_instructions: str | None,
        developer_instructions: str | None,
        config: dict[str, Any],
    ) -> SessionSettings:
        profile = self._profile(config, backend.id)
        mode = config.get("mode") or (profile.mode if profile else None) or backend.default_mode
        if mode not in backend.modes:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: config.mode {mode!r} is not a mode of {backend.id}; valid: "
                + ", ".join(backend.modes),
            )
        max_turns = config.get("maxTurns", self.config.max_turns)
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns <= 0:
            raise RpcError(
                INVALID_PARAMS, "Invalid params: config.maxTurns must be a positive integer"
            )
        tools = config.get("allowedTools", list(self.config.allowed_tools or ()) or None)
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)
        ):
            raise RpcError(
                INVALID_PARAMS, "Invalid params: config.allowedTools must be a list of strings"
            )
        # BACKEND_CLI_PATH/_ARGS are the default backend's command; config.cliPath is per thread.
        is_default = backend.id == self.config.default_backend
        env_path = self.config.cli_path if is_default else None
        cli_path = config.get("cliPath") or env_path
        own_env = self._own_env(profile, {} if backend.config_env_is_own else config)
        settings = SessionSettings(
            thread_id=thread_id,
            cwd=cwd,
            mode=mode,
            model=model or (profile.model if profile else None) or self.config.model,
            approval_policy=approval_policy,
            sandbox=sandbox,
            base_instructions=base_instructions,
            developer_instructions=developer_instructions,
            max_turns=max_turns,
            allowed_tools=tools,
            config=config,
            env={**os.environ, **own_env},
            own_env=own_env,
            cli_path=cli_path if isinstance(cli_path, str) else None,
            cli_args=list(self.config.cli_args) if is_default else [],
        )
        for option in backend.unsupported_options(settings):
            log.warning("the %s backend cannot honour %s; ignoring it", backend.id, option)
        return settings

    def _profile(self, config: dict[str, Any], backend_id: str | None) -> Profile | None:
        """The provider profile a thread runs with: `config.profile` (None: none), else the
        operator's `AGENT_PROFILE` when it is for the thread's backend (`backend_id`, or any
        when not chosen yet); its name is put in `config`, so a resume applies it again."""
        explicit = "profile" in config
        name = config["profile"] if explicit else self.config.profile
        if name is None:
            return None
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "Invalid params: config.profile must be a string")
        try:
            profiles = load_profiles(os.environ)
        except ProfileError as exc:
            raise RpcError(INVALID_REQUEST, str(exc)) from None
        profile = profiles.get(name)
        if profile is None:
            where = "config.profile" if explicit else "AGENT_PROFILE"
            raise RpcError(
                INVALID_PARAMS if explicit else INVALID_REQUEST,
                f"{where} names {name!r}, which {profiles_path(os.environ)} does not define"
                + (f"; defined: {', '.join(profiles)}" if profiles else ""),
            )
        if backend_id is not None and profile.backend != backend_id:
            if not explicit:
                return None  # the operator's default is for another backend
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params: profile {name!r} is for the {profile.backend} backend, "
                f"not {backend_id}",
            )
        config["profile"] = name
        return profile

    def _own_env(self, profile: Profile | None, config: dict[str, Any]) -> dict[str, str]:
        """The variables a thread sets itself: its profile's (references read now), then
        `config.env`."""
        own = {}
        if profile is not None:
            try:
                own.update(profile.resolve(os.environ))
            except ProfileError as exc:
                raise RpcError(INVALID_REQUEST, str(exc)) from None
        try:
            own.update(thread_env(config.get("env"), self.config.thread_env))
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        return own

    def started_reply(self, thread: LoadedThread, response: Any) -> Reply:
        """`response`, then `thread/started` and the thread's warnings."""

        async def started() -> None:
            await self.peer.notify(
                "thread/started", ThreadStartedNotification(thread=thread.view())
            )
            await self.warn_unsupported(thread)

        return Reply(response, started)

    async def warn_unsupported(self, thread: LoadedThread) -> None:
        messages = [
            f"the {thread.backend.id} backend cannot honour {option}; it is ignored"
            for option in thread.backend.unsupported_options(thread.settings)
        ]
        for message in messages + thread.warnings:
            await self.peer.notify(
                "warning", WarningNotification(message=message, thread_id=thread.id)
            )

    async def _serve_tools(self, thread: LoadedThread) -> None:
        """Serve the thread's client-defined tools to its CLI (an MCP server of its own)."""
        if not thread.dynamic_tools:
            return
        timeout = _seconds(thread.settings.config, "toolCallTimeoutMs", DEFAULT_TIMEOUT)
        tools = ThreadTools(
            self.peer,
            thread.id,
            flatten(thread.dynamic_tools),
            lambda: thread.running_turn,
            timeout=timeout,
        )
        try:
            host = await self._tools.host()
        except OSError as exc:
            raise RpcError(
                INTERNAL_ERROR, f"cannot serve the thread's dynamicTools here: {exc}"
            ) from None
        thread.settings.mcp_servers.append(host.register(tools))
        thread.on_close.append(lambda: host.unregister(tools))

    async def open_thread(
        self,
        record: ThreadRecord,
        backend: Backend,
        settings: SessionSettings,
        dynamic_tools: Sequence[DynamicToolSpec] = (),
    ) -> LoadedThread:
        config = settings.config
        try:
            rules = parse_rules(config.get("approvalRules"))
            servers = parse_servers(config)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        settings.mcp_servers, warnings = resolve(servers, settings.env)
        thread = LoadedThread(
            self.peer,
            self.store,
            record,
            backend,
            settings,
            rules=rules,
            approval_timeout=_seconds(config, "approvalTimeoutMs", self.config.approval_timeout),
            turn_timeout=_seconds(config, "turnTimeoutMs", self.config.turn_timeout),
            interrupt_grace=self.config.interrupt_grace,
            idle_timeout=_seconds(config, "idleTimeoutMs", self.config.idle_timeout),
            dynamic_tools=dynamic_tools,
        )
        thread.warnings = warnings
        await self._serve_tools(thread)
        await self._nursery.start(thread.main)
        self.loaded[record.id] = thread
        return thread

    def response(
        self, thread: LoadedThread, cls: type[_Response], turns: list[Turn] | None = None
    ) -> _Response:
        s = thread.settings
        view = thread.view()
        if turns:
            view.turns = turns
        return cls(
            thread=view,
            model=s.model or "default",
            model_provider=thread.backend.id,
            cwd=s.cwd,
            approval_policy=s.approval_policy,
            approvals_reviewer="user",
            sandbox=_sandbox_policy(s.sandbox, s.cwd),
        )

    @staticmethod
    def _require_cli(backend: Backend, settings: SessionSettings) -> None:
        """A new thread needs its CLI: refuse it, with the install hint, when the binary is
        missing or not executable (a thread that exists fails its turns instead)."""
        try:
            command = backend.cli_command(settings)
        except ConfigInvalid as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        if command is None:
            return
        try:
            resolve_cli(command, settings.env)
        except ProcessError as exc:
            raise RpcError(
                INVALID_REQUEST, f"the {backend.id} backend cannot be used here: {exc}"
            ) from None

    def _check_cwd(self, cwd: str | None) -> str:
        path = cwd or os.getcwd()
        if not os.path.isabs(path):
            raise RpcError(
                INVALID_PARAMS, f"Invalid params: cwd must be an absolute path: {path!r}"
            )
        if not os.path.isdir(path):
            raise RpcError(INVALID_PARAMS, f"Invalid params: cwd is not a directory: {path!r}")
        return os.path.normpath(path)

    # -- thread/* ----------------------------------------------------------------------------------

    async def thread_start(self, p: ThreadStartParams) -> Reply:
        self.refuse_when_shutting_down()
        config = dict(p.config or {})
        profile = self._profile(config, p.model_provider)
        if profile is None and "profile" not in config:
            config["profile"] = None  # (AGENT_PROFILE changing later leaves this thread be)
        backend = self._backend(p.model_provider or (profile.backend if profile else None))
        cwd = self._check_cwd(p.cwd)
        tid = new_id()
        model, foreign = p.model, None
        if model and backend.foreign_model(model):
            foreign = foreign_model_warning(backend, model, None)
            model = None
        settings = self._settings(
            thread_id=tid,
            backend=backend,
            cwd=cwd,
            model=model,
            approval_policy=_policy(p.approval_policy) or "on-request",
            sandbox=p.sandbox,
            base_instructions=p.base_instructions,
            developer_instructions=p.developer_instructions,
            config=config,
        )
        self._require_cli(backend, settings)
        tools = p.dynamic_tools or []
        try:
            validate_specs(tools)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc}") from None
        now = int(time.time())
        record = ThreadRecord(
            id=tid,
            backend=backend.id,
            cwd=cwd,
            model=settings.model,
            created_at=now,
            updated_at=now,
            ephemeral=bool(p.ephemeral),
        )
        thread = await self.open_thread(record, backend, settings, tools)
        if foreign:
            thread.warnings.append(foreign)
        if not record.ephemeral:
            # Written now, not lazily: a second client can resume a thread with no turns.
            await self.store.create(record)
        await thread.prewarm()
        return self.started_reply(thread, self.response(thread, ThreadStartResponse))

    async def thread_resume(self, p: ThreadResumeParams) -> ThreadResumeResponse | Reply:
        self.refuse_when_shutting_down()
        adopting = p.backend_session_id is not None or p.latest or bool(p.path)
        if p.thread_id is None or (p.path and p.thread_id not in self.loaded):
            # Codex's precedence: a path names the thread unless threadId is a running one.
            if not adopting:
                raise RpcError(
                    INVALID_PARAMS,
                    "Invalid params: thread/resume needs threadId, or a CLI session to adopt "
                    "(backendSessionId, latest or path)",
                )
            return await self._adopt(p)
        if adopting and not p.path:
            raise RpcError(
                INVALID_PARAMS,
                "Invalid params: give threadId or a CLI session to adopt "
                "(backendSessionId, latest), not both",
            )
        tid = self.thread_id(p.thread_id)
        thread = self.loaded.get(tid)
        if thread is None:
            if tid in self._opening:
                raise RpcError(INVALID_REQUEST, f"thread {tid} is being resumed already")
            self._opening.add(tid)
            try:
                thread = await self._resume(tid, p)
            finally:
                self._opening.discard(tid)
        elif (policy := _policy(p.approval_policy)) is not None:
            thread.set_approval_policy(policy)
            await thread.save_record()
        turns = None if p.exclude_turns else await self.turns(thread.record)
        return self.response(thread, ThreadResumeResponse, turns)

    async def _adopt(self, p: ThreadResumeParams) -> ThreadResumeResponse | Reply:
        """Bind a thread to a session of the CLI's own (or resume the one bound to it)."""
        if p.backend_session_id is not None and p.latest:
            raise RpcError(
                INVALID_PARAMS, "Invalid params: give backendSessionId or latest, not both"
            )
        backend = self._backend(p.model_provider)
        cwd = self._check_cwd(p.cwd)
        backend, native = await wanted_session(
            p, backend, list(self.backends.values()), os.environ, cwd
        )
        for record in await self.store.list():
            bound = record.backend == backend.id and record.backend_session_id == native.id
            if bound and not record.archived:
                return await self.thread_resume(
                    msgspec.structs.replace(
                        p, thread_id=record.id, backend_session_id=None, latest=False, path=None
                    )
                )
        record, settings = self._adopted(p, backend, native)
        self._require_cli(backend, settings)
        entries = await history(native)
        record.turn_count = sum(isinstance(e, TurnStartedEntry) for e in entries)
        thread = await self.open_thread(record, backend, settings, [])
        await self.store.create(record)
        if entries:
            await self.store.append(record.id, entries, sync=True)
        await thread.prewarm()
        turns = None if p.exclude_turns else await self.turns(record)
        return self.started_reply(thread, self.response(thread, ThreadResumeResponse, turns))

    def _adopted(
        self, p: ThreadResumeParams, backend: Backend, native: NativeSession
    ) -> tuple[ThreadRecord, SessionSettings]:
        """A new thread's record and settings, bound to the CLI session `native`."""
        tid = new_id()
        model = p.model if p.model and not backend.foreign_model(p.model) else native.model
        if model and backend.foreign_model(model):
            model = None
        settings = self._settings(
            thread_id=tid,
            backend=backend,
            cwd=self._check_cwd(native.cwd),
            model=model,
            approval_policy=_policy(p.approval_policy) or "on-request",
            sandbox=p.sandbox,
            base_instructions=p.base_instructions,
            developer_instructions=p.developer_instructions,
            config=dict(p.config or {}),
        )
        settings.backend_session_id = native.id
        settings.resumed = True
        settings.role_bootstrap_applied = not p.inject_role
        now = int(time.time())
        record = ThreadRecord(
            id=tid,
            backend=backend.id,
            cwd=settings.cwd,
            model=settings.model,
            created_at=native.created_at or now,
            updated_at=now,
            preview=native.preview,
            backend_session_id=native.id,
            role_bootstrap_applied=settings.role_bootstrap_applied,
        )
        return record, settings

    async def _resume(self, tid: str, p: ThreadResumeParams) -> LoadedThread:
        record = await self.load_record(tid)
        if record.archived:
            raise RpcError(INVALID_REQUEST, f"thread {tid} is archived")
        if p.cwd is not None and os.path.normpath(p.cwd) != record.cwd:
            raise RpcError(
                INVALID_REQUEST,
                f"thread {tid} belongs to cwd {record.cwd}; it cannot be resumed from {p.cwd} "
                "(agent CLIs resume sessions only from their original directory)",
            )
        if p.model_provider is not None and p.model_provider != record.backend:
            raise RpcError(
                INVALID_REQUEST,
                f"thread {tid} runs on backend {record.backend!r}, not {p.model_provider!r}",
            )
        backend = self._backend(record.backend)
        settings = self.stored_settings(record, tid, p)
        settings.backend_session_id = record.backend_session_id
        settings.fork_of = None if record.backend_session_id else record.fork_of
        record.model = settings.model
        tools = msgspec.convert(record.settings.get("dynamicTools") or [], list[DynamicToolSpec])
        thread = await self.open_thread(record, backend, settings, tools)
        await thread.save_record()
        await thread.prewarm()
        await self.warn_unsupported(thread)
        return thread

    def stored_settings(
        self, record: ThreadRecord, thread_id: str, p: ThreadSettingsParams
    ) -> SessionSettings:
        """The settings `record` was stored with, for thread `thread_id` (the record's own, or
        a fork of it), with what `p` gives overriding them; a resumed session."""
        backend = self._backend(record.backend)
        stored = record.settings
        config = dict(stored.get("config") or {})
        config.setdefault("profile", None)  # (a thread older than profiles had none)
        config.update(p.config or {})
        model = p.model or record.model
        if p.model and backend.foreign_model(p.model):
            model = record.model
        settings = self._settings(
            thread_id=thread_id,
            backend=backend,
            cwd=record.cwd,
            model=model,
            approval_policy=_policy(p.approval_policy) or _stored_policy(stored, record.id),
            sandbox=p.sandbox or stored.get("sandbox"),
            base_instructions=p.base_instructions or stored.get("baseInstructions"),
            developer_instructions=p.developer_instructions or stored.get("developerInstructions"),
            config=config,
        )
        settings.effort = stored.get("effort")
        settings.summary = stored.get("summary")
        if stored.get("sandboxPolicy"):
            try:
                settings.sandbox_policy = msgspec.convert(stored["sandboxPolicy"], SandboxPolicy)
            except msgspec.ValidationError:
                log.warning("thread %s: unreadable stored sandboxPolicy", record.id)
        settings.resumed = True
        settings.role_bootstrap_applied = record.role_bootstrap_applied
        return settings

    async def open_forked(
        self,
        record: ThreadRecord,
        backend: Backend,
        settings: SessionSettings,
        source: ThreadRecord,
    ) -> LoadedThread:
        """Open a fork of `source`: its client-defined tools, and its history up to now copied
        into the fork's log."""
        tools = msgspec.convert(source.settings.get("dynamicTools") or [], list[DynamicToolSpec])
        thread = await self.open_thread(record, backend, settings, tools)
        if not record.ephemeral:
            await self.store.create(record)
            if not source.ephemeral:
                entries = await self.store.read_log(source.id)
                if entries:
                    await self.store.append(record.id, entries, sync=True)
        await thread.prewarm()
        return thread

    async def turns(self, record: ThreadRecord) -> list[Turn]:
        if record.ephemeral:
            return []
        entries = await self.store.read_log(record.id)
        # The turn this server is running has no completion entry yet: it is in progress, not
        # interrupted (as a turn cut off by a crash is).
        loaded = self.loaded.get(record.id)
        running = loaded.running_turn if loaded is not None else None
        active_id = running.id if running is not None else None
        turns = []
        for view in turns_from_log(entries, active_turn_id=active_id):
            items = []
            for raw in view.items:
                try:
                    items.append(_ITEM_DECODER.decode(raw))
                except (msgspec.DecodeError, msgspec.ValidationError):
                    log.warning("thread %s: skipping an unreadable item", record.id)
            error = None
            if view.error:
                try:
                    error = _ERROR_DECODER.decode(view.error)
                except (msgspec.DecodeError, msgspec.ValidationError):
                    error = TurnError(message="(unreadable error record)")
            turns.append(
                Turn(
                    id=view.turn_id,
                    status=view.status,
                    items=items,
                    items_view="full",
                    error=error,
                    started_at=view.started_at,
                    completed_at=view.completed_at,
                    duration_ms=view.duration_ms,
                )
            )
        return turns

    async def thread_list(self, p: ThreadListParams) -> ThreadListResponse:
        if p.source == "native":
            return await self._native_list(p)
        records = {r.id: r for r in await self.store.list()}
        for tid, thread in self.loaded.items():
            records[tid] = thread.record
        want_archived = bool(p.archived)
        cwds = [p.cwd] if isinstance(p.cwd, str) else p.cwd
        rows = []
        for record in records.values():
            if record.archived != want_archived:
                continue
            if p.model_providers and record.backend not in p.model_providers:
                continue
            if cwds and record.cwd not in cwds:
                continue
            if p.search_term:
                term = p.search_term.lower()
                if term not in record.preview.lower() and term not in (record.name or "").lower():
                    continue
            rows.append(record)
        data = []
        for record in _sorted(rows, p):
            loaded = self.loaded.get(record.id)
            data.append(loaded.view() if loaded else thread_view(record, ThreadNotLoaded()))
        return _page(data, p)

    async def _native_list(self, p: ThreadListParams) -> ThreadListResponse:
        """The sessions in the CLIs' own stores (`source: "native"`); none are archived."""
        if p.archived:
            return ThreadListResponse(data=[])
        backends = [self._backend(b) for b in p.model_providers or self.backends]
        cwds = [p.cwd] if isinstance(p.cwd, str) else p.cwd
        views = [
            native_view(backend, session)
            for backend, session in await native_sessions(backends, os.environ, cwds)
        ]
        if p.search_term:
            term = p.search_term.lower()
            views = [v for v in views if term in v.preview.lower()]
        return _page(_sorted(views, p), p)

    async def thread_read(self, p: ThreadReadParams) -> ThreadReadResponse:
        tid = self.thread_id(p.thread_id)
        loaded = self.loaded.get(tid)
        record = loaded.record if loaded else await self.load_record(tid)
        view = loaded.view() if loaded else thread_view(record, ThreadNotLoaded())
        if p.include_turns:
            view.turns = await self.turns(record)
        return ThreadReadResponse(thread=view)

    async def thread_archive(self, p: ThreadArchiveParams) -> EmptyResult:
        tid = self.thread_id(p.thread_id)
        loaded = self.loaded.pop(tid, None)
        record = loaded.record if loaded else await self.load_record(tid)
        if loaded is not None:
            await loaded.close()
            await loaded.set_status_not_loaded()
        record.archived = True
        if not record.ephemeral:
            await self.store.save(record)
        await self.peer.notify("thread/archived", ThreadArchivedNotification(thread_id=tid))
        return EmptyResult()

    async def thread_loaded_list(self, p: ThreadLoadedListParams) -> ThreadLoadedListResponse:
        ids = sorted(self.loaded)
        start = _offset(p.cursor)
        limit = max(1, min(p.limit or 1000, 1000))
        nxt = str(start + limit) if start + limit < len(ids) else None
        return ThreadLoadedListResponse(data=ids[start : start + limit], next_cursor=nxt)

    # -- turn/* -----------------------------------------------------------------------------------

    async def turn_start(self, p: TurnStartParams) -> Reply:
        self.refuse_when_shutting_down()
        thread = self.loaded_thread(p.thread_id)
        if not p.input:
            raise RpcError(INVALID_PARAMS, "Invalid params for turn/start: input must not be empty")
        thread.refuse_when_busy()
        self.check_input(thread, p.input, "turn/start")
        warnings = apply_overrides(thread, p, _policy(p.approval_policy))
        if p.output_schema is not None and not thread.capabilities.output_schema:
            warnings.append(
                f"turn/start.outputSchema cannot be applied on the {thread.backend.id} backend"
                f" ({thread.settings.mode} mode); the final message is not constrained"
            )
        run = thread.start_turn(list(p.input), output_schema=p.output_schema)
        # The record (overrides, preview) is written beside the turn, not before it: its
        # fsyncs would otherwise delay the prompt reaching the CLI.
        thread.nursery.start_soon(thread.save_record)

        async def sent() -> None:
            for message in warnings:
                await self.peer.notify(
                    "warning", WarningNotification(message=message, thread_id=thread.id)
                )
            await run.response_sent()

        return Reply(TurnStartResponse(turn=run.initial_turn()), sent)

    @staticmethod
    def check_input(thread: LoadedThread, items: Sequence[UserInput], method: str) -> None:
        """-32602 for input items the thread's backend cannot take, before a turn starts."""
        images = [i for i in items if isinstance(i, (ImageInput, LocalImageInput))]
        if images and not thread.capabilities.images:
            kind = "localImage" if isinstance(images[0], LocalImageInput) else "image"
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params for {method}: input item type {kind!r} is not supported by the"
                f" {thread.backend.id} backend ({thread.settings.mode} mode)",
            )
        remote = [
            i for i in images if isinstance(i, ImageInput) and (i.url or "").startswith("http")
        ]
        if remote and not thread.capabilities.image_urls:
            raise RpcError(
                INVALID_PARAMS,
                f"Invalid params for {method}: the {thread.backend.id} backend"
                f" ({thread.settings.mode} mode) takes no image by http(s) URL; send a"
                " localImage or a data: URL",
            )
        problems = image_problems(list(items), thread.settings.cwd)
        if problems:
            raise RpcError(INVALID_PARAMS, f"Invalid params for {method}: " + "; ".join(problems))

    async def turn_interrupt(self, p: TurnInterruptParams) -> EmptyResult:
        self.loaded_thread(p.thread_id).interrupt_turn(p.turn_id)
        return EmptyResult()

    # -- models -----------------------------------------------------------------------------------

    async def model_list(self, p: ModelListParams) -> ModelListResponse:
        models: list[Model] = []
        for backend_id, backend in self.backends.items():
            if p.model_provider and backend_id != p.model_provider:
                continue
            models.extend(await backend.list_models())
        start = _offset(p.cursor)
        limit = max(1, min(p.limit or 1000, 1000))
        nxt = str(start + limit) if start + limit < len(models) else None
        return ModelListResponse(data=models[start : start + limit], next_cursor=nxt)

    # -- shutdown ---------------------------------------------------------------------------------

    def refuse_when_shutting_down(self) -> None:
        if self.shutting_down:
            raise RpcError(INVALID_REQUEST, "server is shutting down")

    async def shutdown(self, grace: float = 10.0) -> None:
        """End every running turn (interrupted), stop every session (and so every CLI process
        group), flush state. Bounded by `grace`; the caller cancels whatever is left."""
        self.shutting_down = True
        with trio.move_on_after(grace):
            async with trio.open_nursery() as nursery:
                for thread in list(self.loaded.values()):
                    nursery.start_soon(thread.close)
        self.loaded.clear()
