"""OpenCode backend.

ACP mode (default): a long-lived `opencode acp` per cwd (its start-up costs seconds, so never
per turn), threads multiplexed as ACP sessions (`backends/kit/acp.py`).

Run mode (`config.mode: "run"`): `opencode run --format json` per turn, prompt on stdin then
EOF (run reads all of stdin; an open pipe hangs it), `PWD` = the thread's cwd (run prefers
`$PWD` over its real cwd), `--session <id>` for later turns (never `--continue`, which picks the
project's latest session). No interactive approvals: `approvalPolicy: never` → `--auto`;
otherwise OpenCode's own rules. Cancel kills the group and every descendant — the bash tool
runs its commands in their own session, outside the CLI's process group.

OpenCode allows every tool by default, so the thread's approval policy is passed down as
`OPENCODE_PERMISSION` (merged over the user's config): ask for bash/edit/webfetch unless the
policy is `never`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from ...procs.group import (
    ProcessError,
    exit_status,
)
from ...protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    DynamicToolCallItem,
    FileChangeItem,
    FileUpdateChange,
    Model,
    PatchChangeKind,
    PatchKindAdd,
    PatchKindUpdate,
    ReasoningEffortOption,
    ReasoningItem,
    ThreadItem,
    ThreadTokenUsage,
    TokenUsageBreakdown,
    ToolOutputText,
    TurnError,
    TurnPlanStep,
    UnknownAction,
)
from .. import base as b
from ..kit.acp import (
    _PROMPT_DONE,
    AcpError,
    AcpHost,
    AcpPool,
    AcpSession,
    AcpTurnMapper,
    error_info_for_code,
)
from ..kit.api_errors import ConnectionWatch
from ..kit.spawn import open_cli_process
from .api import (
    LOG_FLAGS,
    StreamFailure,
    api_error,
    give_up_error,
    model_not_found,
    no_model,
    stream_failure,
)
from .spec import SPEC

__all__ = ["OpenCodeBackend"]

log = logging.getLogger("threadline.backend.opencode")

_ASK = {"bash": "ask", "edit": "ask", "webfetch": "ask"}
_ALLOW = {
    "bash": "allow",
    "edit": "allow",
    "webfetch": "allow",
    "external_directory": "allow",
    "doom_loop": "allow",
}


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env["PWD"] = settings.cwd  # OpenCode resolves its directory from $PWD first
    env.setdefault("OPENCODE_DISABLE_AUTOUPDATE", "1")
    permission: dict[str, Any] = {}
    raw = env.get("OPENCODE_PERMISSION")
    if raw:
        try:
            parsed = json.loads(raw)
            if isinstance(parsed, dict):
                permission.update(parsed)
        except json.JSONDecodeError:
            log.warning("ignoring an invalid OPENCODE_PERMISSION")
    permission.update(_ALLOW if settings.approval_policy == "never" else _ASK)
    env["OPENCODE_PERMISSION"] = json.dumps(permission, sort_keys=True)
    if settings.model and settings.model != "default":
        content: dict[str, Any] = {}
        if env.get("OPENCODE_CONFIG_CONTENT"):
            try:
                loaded = json.loads(env["OPENCODE_CONFIG_CONTENT"])
                content = loaded if isinstance(loaded, dict) else {}
            except json.JSONDecodeError:
                content = {}
        content["model"] = settings.model
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(content)
    return env


# -- run mode -------------------------------------------------------------------------------


class OpenCodeRunSession(b.BackendSession):
    def __init__(self, settings: b.SessionSettings, binary: str) -> None:
        self.settings = settings
        self.binary = binary
        self._total: TokenUsageBreakdown | None = None

    def argv(self) -> list[str]:
        s = self.settings
        argv = [self.binary, "run", "--format", "json", "--dir", s.cwd, "--thinking", *LOG_FLAGS]
        if s.model and s.model != "default":
            argv += ["--model", s.model]
        if s.backend_session_id:
            argv += ["--session", s.backend_session_id]
        else:
            argv += ["--title", "threadline"]  # also skips the title-generation model call
        if s.approval_policy == "never":
            argv.append("--auto")
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        try:
            return await self._run_once(turn, ctx)
        except _DatabaseLocked:
            # Two `opencode run` starting at once on a fresh data dir race on its SQLite
            # database; the loser exits before doing anything ("database is locked"). Found
            # by the fault matrix: a second thread's turn failed. Once more, a moment later.
            await trio.sleep(0.5)
        try:
            return await self._run_once(turn, ctx)
        except _DatabaseLocked as exc:
            raise exc.error from None

    async def _run_once(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        prompt = f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        run = _RunState(_env(self.settings), self.settings.cwd)
        try:
            async with open_cli_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=run.env,
                stdin="pipe",
                name="opencode run",
            ) as proc:
                proc.on_stderr_line = run.stderr_line
                await proc.write(prompt.encode())
                await proc.close_stdin()
                with run.scope:
                    while (event := await proc.read_json_object()) is not None:
                        run.watch.progress()
                        await self._event(event, run, ctx)
                if run.gave_up is not None:
                    return b.TurnOutcome("failed", run.gave_up)  # (stops the CLI)
                code = await proc.wait()
                stderr = proc.stderr_tail(1500)
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
        if run.usage is not None:
            self._total = run.usage if self._total is None else _sum(self._total, run.usage)
            await ctx.emit(b.TokenUsageUpdated(ThreadTokenUsage(total=self._total, last=run.usage)))
        if run.errors:
            return b.TurnOutcome("failed", _run_error(run.errors[-1], run.missing_model))
        if code != 0:
            error = b.BackendError(
                f"opencode run exited ({exit_status(code)})" + (f": {stderr}" if stderr else ""),
                codex_error_info="other",
                additional_details=stderr or None,
            )
            if run.events == 0 and "database is locked" in stderr:
                raise _DatabaseLocked(error)
            raise error
        return b.TurnOutcome("completed")

    async def _event(self, event: dict[str, Any], run: _RunState, ctx: b.TurnContext) -> None:
        """One `opencode run --format json` event → normalized events (or noted in `run`)."""
        run.events += 1
        sid = event.get("sessionID")
        if isinstance(sid, str) and sid != self.settings.backend_session_id:
            self.settings.backend_session_id = sid
            await ctx.set_backend_session_id(sid)
        etype = event.get("type")
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        assert isinstance(part, dict)
        if etype == "text":
            item = AgentMessageItem(
                id=str(part.get("id") or ctx.new_item_id()), text=str(part.get("text", ""))
            )
            await ctx.emit(b.ItemCompleted(item))
        elif etype == "reasoning":
            text = str(part.get("text", ""))
            item_id = str(part.get("id") or ctx.new_item_id())
            reasoning = ReasoningItem(id=item_id, summary=[text] if text else [])
            await ctx.emit(b.ItemCompleted(reasoning))
        elif etype == "tool_use":
            mapped = _run_tool(part, self.settings.cwd)
            if isinstance(mapped, list):
                await ctx.emit(b.PlanUpdated(mapped))
            else:
                await ctx.emit(b.ItemCompleted(mapped))
        elif etype == "step_finish":
            step = _step_usage(part.get("tokens"))
            if step is not None:
                run.usage = step if run.usage is None else _sum(run.usage, step)
        elif etype == "error":
            run.errors.append(event.get("error") or {})


class _RunState:
    """One `opencode run` turn: what its events left (usage, errors) and what its stderr
    says (failed connection attempts: `gave_up` ends the turn; a model it does not know)."""

    def __init__(self, env: dict[str, str], cwd: str) -> None:
        self.env = env
        self.cwd = cwd
        self.events = 0
        self.errors: list[dict[str, Any]] = []
        self.usage: TokenUsageBreakdown | None = None
        self.watch = ConnectionWatch()
        self.scope = trio.CancelScope()
        self.gave_up: TurnError | None = None
        self.missing_model: str | None = None

    def stderr_line(self, line: str) -> None:
        self.missing_model = model_not_found(line) or self.missing_model
        failure = stream_failure(line)
        if failure is None or self.gave_up is not None:
            return
        self.gave_up = give_up_error(failure, self.watch, self.env, self.cwd)
        if self.gave_up is not None:
            self.scope.cancel()


def _run_error(err: dict[str, Any], missing_model: str | None) -> TurnError:
    """The turn's error for the last `error` event of `opencode run`."""
    data = err.get("data") if isinstance(err.get("data"), dict) else {}
    assert isinstance(data, dict)
    message = str(data.get("message") or err.get("name") or "opencode failed")
    status = data.get("statusCode") if isinstance(data.get("statusCode"), int) else None
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    url = meta.get("url") if isinstance(meta.get("url"), str) else None
    if missing_model is not None and err.get("name") == "UnknownError":
        return no_model(missing_model)
    return api_error(message, status, url) or TurnError(
        message=message,
        codex_error_info=error_info_for_code(status or 0, message),
        additional_details=f"HTTP {status}" if status else None,
    )


class _DatabaseLocked(Exception):
    """`opencode run` lost a race for its database before it did anything."""

    def __init__(self, error: b.BackendError) -> None:
        super().__init__(error.message)
        self.error = error


def _step_usage(tokens: Any) -> TokenUsageBreakdown | None:
    if not isinstance(tokens, dict):
        return None
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    assert isinstance(cache, dict)
    inp, out = int(tokens.get("input") or 0), int(tokens.get("output") or 0)
    return TokenUsageBreakdown(
        total_tokens=int(tokens.get("total") or inp + out),
        input_tokens=inp,
        cached_input_tokens=int(cache.get("read") or 0),
        output_tokens=out,
        reasoning_output_tokens=int(tokens.get("reasoning") or 0),
        cache_write_input_tokens=int(cache.get("write") or 0),
    )


def _sum(a: TokenUsageBreakdown, c: TokenUsageBreakdown) -> TokenUsageBreakdown:
    return TokenUsageBreakdown(
        total_tokens=a.total_tokens + c.total_tokens,
        input_tokens=a.input_tokens + c.input_tokens,
        cached_input_tokens=a.cached_input_tokens + c.cached_input_tokens,
        output_tokens=a.output_tokens + c.output_tokens,
        reasoning_output_tokens=a.reasoning_output_tokens + c.reasoning_output_tokens,
        cache_write_input_tokens=(a.cache_write_input_tokens or 0)
        + (c.cache_write_input_tokens or 0),
    )


def _run_tool(part: dict[str, Any], cwd: str) -> ThreadItem | list[TurnPlanStep]:
    """A finished `tool_use` part → a completed item (run mode reports tools only at the end)."""
    tool = str(part.get("tool") or "tool")
    call_id = str(part.get("callID") or part.get("id") or tool)
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    assert isinstance(state, dict)
    args = state.get("input") if isinstance(state.get("input"), dict) else {}
    assert isinstance(args, dict)
    meta = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    ok = state.get("status") == "completed"
    error = str(state.get("error") or "")
    rejected = "rejected permission" in error
    if tool == "bash":
        command = str(args.get("command", ""))
        code = meta.get("exit")
        output = meta.get("output") if isinstance(meta.get("output"), str) else state.get("output")
        return CommandExecutionItem(
            id=call_id,
            command=command,
            cwd=str(args.get("workdir") or cwd),
            status="declined" if rejected else ("completed" if ok else "failed"),
            command_actions=[UnknownAction(command=command)],
            aggregated_output=str(output) if output is not None else (error or None),
            exit_code=code if isinstance(code, int) else None,
        )
    if tool in ("edit", "write", "patch"):
        path = str(args.get("filePath") or meta.get("filepath") or "")
        filediff = meta.get("filediff") if isinstance(meta.get("filediff"), dict) else {}
        assert isinstance(filediff, dict)
        diff = str(filediff.get("patch") or meta.get("diff") or "")
        if not diff and tool == "write":
            content = str(args.get("content", ""))
            diff = "".join(f"+{line}\n" for line in content.splitlines())
        kind = PatchKindUpdate() if meta.get("exists") or tool == "edit" else PatchKindAdd()
        return FileChangeItem(
            id=call_id,
            changes=[FileUpdateChange(path=path, kind=kind, diff=diff)],
            status="declined" if rejected else ("completed" if ok else "failed"),
        )
    if tool == "todowrite":
        steps = []
        for todo in args.get("todos") or []:
            if isinstance(todo, dict):
                status = {"in_progress": "inProgress", "completed": "completed"}.get(
                    str(todo.get("status")), "pending"
                )
                steps.append(TurnPlanStep(step=str(todo.get("content", "")), status=status))  # type: ignore[arg-type]
        return steps
    output = state.get("output")
    text = str(output) if output is not None else error
    return DynamicToolCallItem(
        id=call_id,
        tool=tool,
        arguments=args,
        namespace="opencode",
        status="completed" if ok else "failed",
        success=ok,
        content_items=[ToolOutputText(text=text)] if text else [],
    )


# -- ACP mode --------------------------------------------------------------------------------------

_TERMINAL = ("completed", "failed")


def _merged(held: dict[str, Any] | None, update: dict[str, Any]) -> dict[str, Any]:
    """`update` laid over what was held for the same tool call (rawInput merged key by key:
    OpenCode's first `tool_call` has only `{cwd}`, later updates the real arguments)."""
    out = dict(held or {})
    for key, value in update.items():
        if key == "rawInput" and isinstance(value, dict):
            raw = out.get("rawInput")
            out["rawInput"] = {**(raw if isinstance(raw, dict) else {}), **value}
        elif value is not None:
            out[key] = value
    return out


def _clean_patch(patch: str) -> str:
    """OpenCode's patches start with `Index: <path>` and a `====` rule: keep the unified diff."""
    lines = patch.splitlines(keepends=True)
    while lines and not lines[0].startswith("--- "):
        if not (lines[0].startswith("Index: ") or set(lines[0].strip()) <= {"="}):
            return patch  # not the shape we know: leave it alone
        lines.pop(0)
    return "".join(lines)


@dataclass
class _FileInfo:
    """What OpenCode told us about one edit/write call, from whichever message had it."""

    path: str | None = None
    patch: str | None = None
    exists: bool | None = None


def _database_path(env: dict[str, str]) -> str:
    """OpenCode's SQLite store: OPENCODE_DB, else `$XDG_DATA_HOME/opencode/opencode.db`."""
    data = env.get("XDG_DATA_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "share"
    )
    db = env.get("OPENCODE_DB")
    if db:
        return db if os.path.isabs(db) else os.path.join(data, "opencode", db)
    return os.path.join(data, "opencode", "opencode.db")


def _stored_error(
    db: str, session_id: str, since_ms: int
) -> tuple[str, int | None, str | None] | None:
    """(message, HTTP status, URL) of the session's latest failed assistant message created
    since `since_ms`, from OpenCode's database (schema of 1.18: `message(session_id,
    time_created, data)`, `data.error = {name, data: {message, statusCode, metadata: {url}}}`);
    None if not found."""
    if not os.path.isfile(db):
        return None
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        ) as conn:
            rows = conn.execute(
                "SELECT data FROM message WHERE session_id = ? AND time_created >= ?"
                " ORDER BY time_created DESC, id DESC LIMIT 5",
                (session_id, since_ms),
            ).fetchall()
    except sqlite3.Error as exc:
        log.debug("reading opencode's database %s failed: %s", db, exc)
        return None
    for (raw,) in rows:
        try:
            info = json.loads(raw)
        except (TypeError, ValueError):
            continue
        error = info.get("error") if isinstance(info, dict) else None
        if not isinstance(error, dict):
            continue
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        assert isinstance(data, dict)
        status = data.get("statusCode")
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        url = meta.get("url") if isinstance(meta.get("url"), str) else None
        return str(data.get("message") or ""), status if isinstance(status, int) else None, url
    return None


class OpenCodeAcpSession(AcpSession):
    """An ACP session with OpenCode's tool-call updates normalized before the shared mapper
    sees them (measured on opencode 1.18.33):

    - The first `tool_call` is `pending` with only `{cwd}` as input and the tool's *name* as
      title; the real arguments come with the `in_progress` update. Announcing the item on
      the first sight showed clients a command `bash` and a file `<cwd>/write` with no diff, so
      the first sight is held and merged with what follows: a command is announced once its
      command is known, an edit/write once the permission request (which carries the full
      diff) or its result arrives, anything else at `in_progress`.
    - An edit's completion carries a diff *snippet* with a relative path (oldString →
      newString), which would replace the item's real diff. OpenCode's own unified patch
      (permission `rawInput.diff`, result `metadata.filediff.patch` / `metadata.diff`) is used
      for the file change instead, with the absolute path, and add vs update from
      `metadata.exists`.
    - After a rejected permission OpenCode still sends the tool's `failed` update; the shared
      mapper already completed the item as declined and would start it a second time.
    """

    def __init__(self, host: AcpHost, settings: b.SessionSettings) -> None:
        super().__init__(host, settings, "opencode")
        self._held: dict[str, dict[str, Any]] = {}  # call id → merged updates not yet shown
        self._shown: set[str] = set()  # call ids passed on to the mapper
        self._kinds: dict[str, str] = {}  # call id → ACP tool kind (later updates omit it)
        self._files: dict[str, _FileInfo] = {}
        self._prompt_error: AcpError | None = None
        self._watch = ConnectionWatch()
        #: Why OpenCode has no model to use (it listed none: no provider has credentials).
        self._no_model: str | None = None

    def created(self, result: dict[str, Any]) -> None:
        options = result.get("configOptions")
        for option in options if isinstance(options, list) else ():
            model = isinstance(option, dict) and option.get("id") == "model"
            if model and option.get("options") == []:
                self._no_model = f"opencode lists no model ({option.get('currentValue')})"

    def connection_failed(self, failure: StreamFailure) -> None:
        """A failed attempt of this session's prompt to connect to the model API."""
        if self._turn_ctx is None or self.gave_up is not None:
            return
        env = _env(self.settings)
        error = give_up_error(failure, self._watch, env, self.settings.cwd)
        if error is not None:
            self.give_up(error)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if self._no_model is not None:
            return b.TurnOutcome("failed", no_model(self._no_model))
        # An interrupted turn may have ended before OpenCode answered its prompt: wait for
        # that answer before clearing what its updates left here.
        await self._await_previous_prompt()
        self._held.clear()  # (a session/load replay may have left some)
        self._shown.clear()
        self._kinds.clear()
        self._files.clear()
        self._prompt_error = None
        self._watch = ConnectionWatch()
        started_ms = int(time.time() * 1000) - 1000  # (clock granularity slack)
        outcome = await super().run_turn(turn, ctx)
        if self.gave_up is not None:
            return outcome
        if outcome is not None and outcome.status == "failed" and self._prompt_error is not None:
            return b.TurnOutcome("failed", await self._provider_error(started_ms))
        return outcome

    def turn_error(self, error: AcpError) -> TurnError:
        self._prompt_error = error  # made readable by run_turn (`_provider_error`)
        return super().turn_error(error)

    async def _provider_error(self, since_ms: int) -> TurnError:
        """The failed prompt's error. OpenCode's ACP answer to a provider failure is only
        `-32603 "Internal error: <provider message>"` (data `{errorName: "APIError"}`): the
        HTTP status is dropped, so a 401 and a 500 looked alike ("other"). OpenCode stores the
        full error (statusCode, isRetryable) on the session's assistant message in its SQLite
        database; it is read from there, best effort (read-only, on a worker thread; any
        problem falls back to the ACP message)."""
        error = self._prompt_error
        assert error is not None
        message = error.message.removeprefix("Internal error: ")
        data = error.data if isinstance(error.data, dict) else {}
        status: int | None = None
        url: str | None = None
        if data.get("errorName") == "APIError" and self.session_id:
            db = _database_path(_env(self.settings))
            found = await trio.to_thread.run_sync(_stored_error, db, self.session_id, since_ms)
            if found is not None:
                text, status, url = found
                message = text or message
        return api_error(message, status, url) or TurnError(
            message=message,
            codex_error_info=error_info_for_code(status or 0, message),
            additional_details=f"HTTP {status}" if status else None,
        )

    def on_update(self, update: dict[str, Any]) -> None:
        self._watch.progress()
        if update is _PROMPT_DONE:
            # Whatever is still held never got further (e.g. cancelled before it ran): show it,
            # so the engine closes it with the turn.
            for held in self._held.values():
                super().on_update(held)
            self._held.clear()
            super().on_update(update)
            return
        if update.get("sessionUpdate") not in ("tool_call", "tool_call_update"):
            super().on_update(update)
            return
        call_id = str(update.get("toolCallId") or "")
        if isinstance(update.get("kind"), str):
            self._kinds.setdefault(call_id, update["kind"])
        kind = self._kinds.get(call_id)
        if kind == "edit":
            self._note_file(call_id, update)
        status = update.get("status")
        mapper = self._mapper
        if mapper is not None and call_id in mapper.declined:
            return  # completed as declined already (see the class docstring)
        if call_id in self._shown:
            super().on_update(update)
            return
        merged = _merged(self._held.pop(call_id, None), update)
        raw = merged.get("rawInput") if isinstance(merged.get("rawInput"), dict) else {}
        assert isinstance(raw, dict)
        ready = status in _TERMINAL or (
            raw.get("command") if kind == "execute" else kind != "edit" and status == "in_progress"
        )
        if ready:
            self._show(call_id, merged)
        else:
            self._held[call_id] = merged

    def holds_tool_calls(self) -> bool:
        return bool(self._held)

    def _show(self, call_id: str, merged: dict[str, Any]) -> None:
        self._shown.add(call_id)
        super().on_update({**merged, "sessionUpdate": "tool_call"})

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
            assert isinstance(call, dict)
            call_id = str(call.get("toolCallId") or "")
            if isinstance(call.get("kind"), str):
                self._kinds.setdefault(call_id, call["kind"])
            if self._kinds.get(call_id) == "edit":
                self._note_file(call_id, call)
            if call_id in self._held:
                # The request has the full picture (an edit's diff): announce the item now,
                # ahead of the request (AcpSession drains the updates before asking).
                self._show(call_id, _merged(self._held.pop(call_id), call))
            mapper = self._mapper
            result = await super().on_request(method, params)
            outcome = (result or {}).get("outcome") or {}
            if mapper is not None and outcome.get("outcome") == "cancelled":
                # Withdrawn by an interrupt: the tool never ran. OpenCode then fails it
                # ("Tool execution aborted"), which must not turn it into a failed run.
                mapper.declined.add(call_id)
            return result
        return await super().on_request(method, params)

    def _note_file(self, call_id: str, data: dict[str, Any]) -> None:
        info = self._files.setdefault(call_id, _FileInfo())
        raw = data.get("rawInput") if isinstance(data.get("rawInput"), dict) else {}
        out = data.get("rawOutput") if isinstance(data.get("rawOutput"), dict) else {}
        assert isinstance(raw, dict) and isinstance(out, dict)
        meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        filediff = meta.get("filediff") if isinstance(meta.get("filediff"), dict) else {}
        assert isinstance(filediff, dict)
        for path in (raw.get("filepath"), meta.get("filepath"), filediff.get("file")):
            if isinstance(path, str) and os.path.isabs(path):
                info.path = path
        if info.path is None and isinstance(raw.get("filePath"), str) and raw["filePath"]:
            info.path = os.path.join(self.settings.cwd, raw["filePath"])
        for patch in (filediff.get("patch"), meta.get("diff"), raw.get("diff")):
            if isinstance(patch, str) and patch.strip():
                info.patch = _clean_patch(patch)
                break
        if isinstance(meta.get("exists"), bool):
            info.exists = meta["exists"]

    def _fix_file_change(self, item: FileChangeItem) -> None:
        info = self._files.get(item.id)
        if info is None:
            return
        first = item.changes[0] if item.changes else None
        kind: PatchChangeKind = first.kind if first else PatchKindUpdate()
        if info.exists is not None:
            kind = PatchKindUpdate() if info.exists else PatchKindAdd()
        path = info.path or (first.path if first else "")
        if info.patch is not None:
            item.changes = [FileUpdateChange(path=path, kind=kind, diff=info.patch)]
        elif first is not None:
            item.changes = [FileUpdateChange(path=path, kind=kind, diff=first.diff)]

    async def _emit(self, ctx: b.TurnContext, mapper: AcpTurnMapper) -> None:
        # AcpSession._emit, plus the file-change fix-up (see the class docstring), under the
        # same lock so the order of events is kept.
        async with self._emit_lock:
            for event in mapper.take():
                if isinstance(event, (b.ItemStarted, b.ItemCompleted)) and isinstance(
                    event.item, FileChangeItem
                ):
                    self._fix_file_change(event.item)
                await ctx.emit(event)


def _acp_stderr_line(host: AcpHost, line: str) -> None:
    """An `opencode acp` log line: a failed connection attempt goes to its session."""
    failure = stream_failure(line)
    session = host.sessions.get(failure.session_id) if failure is not None else None
    if failure is not None and isinstance(session, OpenCodeAcpSession):
        session.connection_failed(failure)


# -- backend ---------------------------------------------------------------------------------------


class OpenCodeBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)
        self._pool = AcpPool("opencode acp", _acp_stderr_line)

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == "run":
            yield OpenCodeRunSession(settings, binary)
            return
        env = _env(settings)
        key = env["OPENCODE_PERMISSION"] + env.get("OPENCODE_CONFIG_CONTENT", "")
        async with self._pool.host(
            [binary, "acp", "--cwd", settings.cwd, *LOG_FLAGS],
            settings.cwd,
            env,
            key_extra=key,
            session_id=settings.backend_session_id,
        ) as host:
            session = OpenCodeAcpSession(host, settings)
            await session.open()
            try:
                yield session
            finally:
                session.close()

    def models(self) -> list[Model]:
        efforts = [ReasoningEffortOption(reasoning_effort="medium", description="default")]
        return [
            Model(
                id="opencode/default",
                model="default",
                display_name="OpenCode default",
                description="The model configured for opencode (provider/model)",
                hidden=False,
                is_default=True,
                default_reasoning_effort="medium",
                supported_reasoning_efforts=efforts,
            )
        ]


def create() -> OpenCodeBackend:
    return OpenCodeBackend()
