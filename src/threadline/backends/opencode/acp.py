"""OpenCode over ACP (`opencode acp`): the kit's session with OpenCode's quirks."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
import weakref
from dataclasses import dataclass
from typing import Any

import trio

from ... import protocol as p
from .. import base as b
from ..kit.acp import (
    AcpError,
    AcpHost,
    AcpSession,
    AcpTurnMapper,
    McpCall,
    error_info_for_code,
)
from ..kit.acp.session import PROMPT_DONE
from ..kit.api_errors import ConnectionWatch
from .api import (
    StreamFailure,
    api_error,
    give_up_error,
    no_model,
    stream_failure,
    unreachable_error,
)
from .invocation import _env
from .mcp import split_tool, unavailable_server

log = logging.getLogger("threadline.backend.opencode")

_TERMINAL = ("completed", "failed")

#: MCP servers an `opencode acp` reported as not started: name → its words. OpenCode starts a
#: session's servers for the whole directory, before it answers `session/new`, and its log
#: line names no session: each session of the agent with a server of that name reports it.
_UNAVAILABLE: weakref.WeakKeyDictionary[AcpHost, dict[str, str]] = weakref.WeakKeyDictionary()


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


def _read_json_rows(db: str, query: str, args: tuple[Any, ...]) -> list[Any]:
    """The JSON `data` column of `query`'s rows in OpenCode's database, read-only and best
    effort (a missing or unreadable database, or a row that is no JSON, gives nothing)."""
    if not os.path.isfile(db):
        return []
    try:
        with contextlib.closing(
            sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)
        ) as conn:
            rows = conn.execute(query, args).fetchall()
    except sqlite3.Error as exc:
        log.debug("reading opencode's database %s failed: %s", db, exc)
        return []
    out = []
    for (raw,) in rows:
        try:
            out.append(json.loads(raw))
        except (TypeError, ValueError):
            continue
    return out


def _stored_error(
    db: str, session_id: str, since_ms: int
) -> tuple[str, int | None, str | None] | None:
    """(message, HTTP status, URL) of the session's latest failed assistant message created
    since `since_ms`, from OpenCode's database (schema of 1.18: `message(session_id,
    time_created, data)`, `data.error = {name, data: {message, statusCode, metadata: {url}}}`);
    None if not found."""
    rows = _read_json_rows(
        db,
        "SELECT data FROM message WHERE session_id = ? AND time_created >= ?"
        " ORDER BY time_created DESC, id DESC LIMIT 5",
        (session_id, since_ms),
    )
    for info in rows:
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


def _stored_input(db: str, session_id: str, call_id: str) -> dict[str, Any] | None:
    """The input of the session's tool call `call_id` from OpenCode's database (schema of
    1.18: `part(session_id, time_created, data)`, `data = {type: "tool", callID, state:
    {input}}`); None if not found (best effort, read-only)."""
    rows = _read_json_rows(
        db,
        "SELECT data FROM part WHERE session_id = ? ORDER BY time_created DESC LIMIT 20",
        (session_id,),
    )
    for part in rows:
        if isinstance(part, dict) and part.get("callID") == call_id:
            state = part.get("state")
            found = state.get("input") if isinstance(state, dict) else None
            return found if isinstance(found, dict) and found else None
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
    - "Always allow" grants more than the user approved, and beyond the thread: the request's
      `always` patterns (`echo *` for a command, `*` for an MCP tool: every call of it) for
      the whole `opencode acp` process, which other threads share. acceptForSession answers
      "once" and the approval router remembers the exact grant for the thread.
    """

    permission_kinds = {**AcpSession.permission_kinds, "acceptForSession": "allow_once"}
    # The thread's permissions are its agent's environment (OPENCODE_PERMISSION).
    live_approval = False
    # `/compact` is built into OpenCode's ACP prompt (a summary of the session), unlisted.
    compact_command = "compact"
    compact_builtin = True

    def __init__(self, host: AcpHost, settings: b.SessionSettings) -> None:
        super().__init__(host, settings, "opencode")
        self._held: dict[str, dict[str, Any]] = {}  # call id → merged updates not yet shown
        self._shown: set[str] = set()  # call ids passed on to the mapper
        self._kinds: dict[str, str] = {}  # call id → ACP tool kind (later updates omit it)
        self._files: dict[str, _FileInfo] = {}
        self._prompt_error: AcpError | None = None
        self._watch = ConnectionWatch()
        self._failure: StreamFailure | None = None  # the turn's last failed connection attempt
        #: Why OpenCode has no model to use (it listed none: no provider has credentials).
        self._no_model: str | None = None
        self._reported: set[str] = set()  # MCP servers whose failure to start was reported

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
        self._failure = failure
        error = give_up_error(failure, self._watch, _env(self.settings), self.settings.cwd)
        if error is not None:
            self.give_up(error)

    async def watch_model_api(self, mapper: AcpTurnMapper) -> None:
        await self._watch.expired()
        if self._failure is not None:
            env = _env(self.settings)
            self.give_up(unreachable_error(self._failure, self._watch, env, self.settings.cwd))

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if self._no_model is not None:
            return b.TurnOutcome("failed", no_model(self._no_model))
        await self._report_unavailable(ctx)
        # An interrupted turn may have ended before OpenCode answered its prompt: wait for
        # that answer before clearing what its updates left here.
        await self._await_previous_prompt()
        self._held.clear()  # (a session/load replay may have left some)
        self._shown.clear()
        self._kinds.clear()
        self._files.clear()
        self._prompt_error = None
        self._watch = ConnectionWatch()
        self._failure = None
        started_ms = int(time.time() * 1000) - 1000  # (clock granularity slack)
        outcome = await super().run_turn(turn, ctx)
        if self.gave_up is not None:
            return outcome
        if outcome is not None and outcome.status == "failed" and self._prompt_error is not None:
            return b.TurnOutcome("failed", await self._provider_error(started_ms))
        return outcome

    def mcp_call(self, call: dict[str, Any]) -> McpCall | None:
        """OpenCode's MCP tool calls: kind `other`, the tool's name `<server>_<tool>` as
        title."""
        title = call.get("title")
        if call.get("kind") not in (None, "other") or not isinstance(title, str):
            return None
        found = split_tool(title, self.settings.mcp_servers)
        return McpCall(*found) if found is not None else None

    async def _with_stored_input(self, call: dict[str, Any]) -> dict[str, Any]:
        """OpenCode asks for an MCP tool call with no arguments (`rawInput: {}`); its tool part,
        already `running`, has them in its database: the client is shown what it approves."""
        if not self.session_id:
            return call
        db = _database_path(_env(self.settings))
        call_id = str(call.get("toolCallId") or "")
        found = await trio.to_thread.run_sync(_stored_input, db, self.session_id, call_id)
        return {**call, "rawInput": found} if found else call

    async def _report_unavailable(self, ctx: b.TurnContext) -> None:
        """A warning for each of the thread's MCP servers OpenCode could not start."""
        failed = _UNAVAILABLE.get(self.host, {})
        for server in self.settings.mcp_servers:
            why = failed.get(server.name)
            if why is not None and server.name not in self._reported:
                self._reported.add(server.name)
                await ctx.emit(b.Warning(f"MCP server '{server.name}' did not start: {why}"))

    def turn_error(self, error: AcpError) -> p.TurnError:
        self._prompt_error = error  # made readable by run_turn (`_provider_error`)
        return super().turn_error(error)

    async def _provider_error(self, since_ms: int) -> p.TurnError:
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
        return api_error(message, status, url) or p.TurnError(
            message=message,
            codex_error_info=error_info_for_code(status or 0, message),
            additional_details=f"HTTP {status}" if status else None,
        )

    def on_update(self, update: dict[str, Any]) -> None:
        self._watch.progress()
        if update is PROMPT_DONE:
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
            if not call.get("rawInput") and self.mcp_call(call) is not None:
                call = await self._with_stored_input(call)
                params = {**params, "toolCall": call}
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

    def _fix_file_change(self, item: p.FileChangeItem) -> None:
        info = self._files.get(item.id)
        if info is None:
            return
        first = item.changes[0] if item.changes else None
        kind: p.PatchChangeKind = first.kind if first else p.PatchKindUpdate()
        if info.exists is not None:
            kind = p.PatchKindUpdate() if info.exists else p.PatchKindAdd()
        path = info.path or (first.path if first else "")
        if info.patch is not None:
            item.changes = [p.FileUpdateChange(path=path, kind=kind, diff=info.patch)]
        elif first is not None:
            item.changes = [p.FileUpdateChange(path=path, kind=kind, diff=first.diff)]

    async def _emit(self, ctx: b.TurnContext, mapper: AcpTurnMapper) -> None:
        # AcpSession._emit, plus the file-change fix-up (see the class docstring), under the
        # same lock so the order of events is kept.
        async with self._emit_lock:
            for event in mapper.take():
                if isinstance(event, (b.ItemStarted, b.ItemCompleted)) and isinstance(
                    event.item, p.FileChangeItem
                ):
                    self._fix_file_change(event.item)
                await ctx.emit(event)


def _acp_stderr_line(host: AcpHost, line: str) -> None:
    """An `opencode acp` log line: a failed connection attempt goes to its session; an MCP
    server that did not start is noted for the agent's sessions."""
    unavailable = unavailable_server(line)
    if unavailable is not None:
        name, why = unavailable
        _UNAVAILABLE.setdefault(host, {})[name] = f"opencode: {why}"
    failure = stream_failure(line)
    session = host.sessions.get(failure.session_id) if failure is not None else None
    if failure is not None and isinstance(session, OpenCodeAcpSession):
        session.connection_failed(failure)
