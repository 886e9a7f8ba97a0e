"""Gemini CLI headless: `gemini -p -o stream-json` spawned per turn, `--resume` from the second."""

from __future__ import annotations

import json
import os
import re
import uuid
from typing import Any

import trio

from ... import protocol as p
from ...procs.group import exit_status
from .. import base as b
from ..kit.api_errors import ConnectionWatch, is_connection_failure, no_credentials, unreachable
from ..kit.diff import file_diff
from ..kit.mcp import is_dynamic, mcp_item
from ..kit.per_turn import PerTurnCliSession, prompt_with_bootstrap
from ..kit.usage import UsageFields, UsageTotals, read_usage
from .attach import attachments
from .invocation import (
    _ATTEMPT_FAILED,
    _CHECK,
    _EXIT_MEANING,
    PROBE_BUDGET,
    _api_failure,
    _env,
    _model_flags,
    api_url,
)
from .mcp import DEBUG_LOG, StartFailures, headless_settings, split_tool_name
from .spec import SPEC


class GeminiHeadlessSession(PerTurnCliSession):
    process_name = "gemini -p"

    def __init__(self, settings: b.SessionSettings, binary: str) -> None:
        self.settings = settings
        self.binary = binary
        #: True once Gemini has stored a conversation we can `--resume`: a turn succeeded.
        #: (A first turn that failed or was killed leaves no resumable session: `--resume`
        #: then exits 42 "No previous sessions found for this project".)
        self._started = bool(settings.backend_session_id)
        self.session_id = settings.backend_session_id or str(uuid.uuid4())
        self._tried = False
        self._usage = UsageTotals()
        self._directories: list[str] = []  # this turn's `--include-directories`

    def argv(self) -> list[str]:
        s = self.settings
        mode = {"never": "yolo"}.get(s.approval_policy, "default")
        if s.config.get("approvalMode"):
            mode = str(s.config["approvalMode"])
        argv = [self.binary, "-o", "stream-json", "--approval-mode", mode, *_model_flags(s)]
        argv += (
            ["--resume", self.session_id] if self._started else ["--session-id", self.session_id]
        )
        for directory in self._directories:
            argv += ["--include-directories", directory]  # (the turn's files outside the cwd)
        # The prompt is read from stdin (prepended to -p's text): never in argv.
        argv += ["-p", ""]
        return argv

    def process_env(self) -> dict[str, str]:
        return _env(self.settings)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        async with attachments(turn.input, self.settings.cwd) as attached:
            for warning in attached.warnings:
                await ctx.emit(b.Warning(warning))
            text = attached.prompt(turn.text)
            self._directories = attached.directories
            try:
                return await self._run(
                    b.TurnInput(turn.turn_id, turn.input, text, turn.bootstrap), ctx
                )
            finally:
                self._directories = []

    async def _run(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if not self._started and self._tried:
            # The last try left no resumable session (and its id may be taken: --session-id
            # of an existing id exits 42): start over under a new id.
            self.session_id = str(uuid.uuid4())
        self._tried = True
        run = _HeadlessTurn(self.settings.env)
        prompt = prompt_with_bootstrap(turn)
        with headless_settings(self.settings.mcp_servers, self.settings.env) as (mcp_env, warn):
            if warn is not None:
                await ctx.emit(b.Warning(warn))
            env = {**self.process_env(), **mcp_env}
            names = [s.name for s in self.settings.mcp_servers]
            failures = StartFailures(mcp_env.get(DEBUG_LOG), names)
            async with self.turn_process(prompt, env=env, on_stderr_line=run.stderr_line) as proc:
                with run.scope:
                    while (event := await proc.read_json_object()) is not None:
                        await self._event(event, run, turn, ctx)
                await run.close_message(ctx)
                for text in failures.warnings():
                    await ctx.emit(b.Warning(text))
                if run.gave_up is not None:
                    return b.TurnOutcome("failed", run.gave_up)  # (stops the CLI)
                code = await proc.wait()
                if run.result is None:
                    raise _no_result(code, proc.stderr_tail(1500))
        return await self._outcome(run.result, run.last_error, code, ctx)

    async def _event(
        self, event: dict[str, Any], run: _HeadlessTurn, turn: b.TurnInput, ctx: b.TurnContext
    ) -> None:
        """One `gemini -p -o stream-json` event → normalized events (or noted in `run`)."""
        etype = event.get("type")
        if etype == "init":
            sid = event.get("session_id")
            if isinstance(sid, str):
                self.session_id = sid
        elif etype == "message" and event.get("role") == "assistant":
            run.watch.progress()
            await run.delta(str(event.get("content", "")), ctx)
        elif etype == "tool_use":
            await run.close_message(ctx)
            servers = [s.name for s in self.settings.mcp_servers]
            item = _headless_tool(event, self.settings.cwd, servers)
            if item is None:
                return  # one of threadline's own tools: its host shows the call
            run.tools[item.id] = item
            await ctx.emit(b.ItemStarted(item))
        elif etype == "tool_result":
            done = run.tools.pop(str(event.get("tool_id")), None)
            if done is not None:
                await ctx.emit(b.ItemCompleted(_finish_tool(done, event)))
        elif etype == "error":
            run.last_error = str(event.get("message", "")) or run.last_error
            await ctx.emit(b.Warning(str(event.get("message", ""))))
        elif etype == "result":
            run.result = event
            if event.get("status") == "success" and not self._started:
                # Recorded only now: only a session with a finished turn resumes.
                self._started = True
                self.settings.backend_session_id = self.session_id
                await ctx.set_backend_session_id(self.session_id)
            if event.get("status") == "success" and turn.bootstrap:
                # The role is in the stored conversation now (a failed first turn's session
                # is dropped: the next turn sends the role again).
                await ctx.mark_role_bootstrap_applied()

    async def _outcome(
        self, result: dict[str, Any], last_error: str | None, code: int, ctx: b.TurnContext
    ) -> b.TurnOutcome:
        usage = _headless_usage(result.get("stats"))
        if usage is not None:
            await ctx.emit(b.TokenUsageUpdated(self._usage.add(usage)))
        if result.get("status") == "success":
            return b.TurnOutcome("completed")
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        assert isinstance(error, dict)
        if error.get("type") == "FatalCancellationError":
            return b.TurnOutcome("interrupted")
        # (a cut-off model stream: the result has no message, the `error` event says why)
        msg = str(error.get("message") or last_error or "gemini reported an error")
        return b.TurnOutcome("failed", _result_error(msg, code, self.settings))


class _HeadlessTurn:
    """One `gemini -p` turn: the message being streamed, the tools running, the `result`, and
    what stderr says: its failed attempts to connect (`gave_up` ends the turn)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.message: p.AgentMessageItem | None = None
        self.text: list[str] = []
        self.tools: dict[str, p.ThreadItem] = {}
        self.result: dict[str, Any] | None = None
        self.last_error: str | None = None  # the last `error` event: why a result failed
        self.watch = ConnectionWatch(budget=PROBE_BUDGET)
        self.scope = trio.CancelScope()
        self.gave_up: p.TurnError | None = None

    async def delta(self, chunk: str, ctx: b.TurnContext) -> None:
        if self.message is None:
            self.message = p.AgentMessageItem(id=ctx.new_item_id(), text="")
            await ctx.emit(b.ItemStarted(p.AgentMessageItem(id=self.message.id, text="")))
        self.text.append(chunk)
        await ctx.emit(b.AgentMessageDelta(self.message.id, chunk))

    async def close_message(self, ctx: b.TurnContext) -> None:
        if self.message is not None:
            self.message.text = "".join(self.text)
            await ctx.emit(b.ItemCompleted(self.message))
            self.message, self.text = None, []

    def stderr_line(self, line: str) -> None:
        failed = _ATTEMPT_FAILED.match(line) and is_connection_failure(line)
        if not failed or self.gave_up is not None or not self.watch.failed():
            return
        url = api_url(self.env)
        detail = line.partition("Error: ")[2] or line
        self.gave_up = unreachable(SPEC, url, _CHECK, detail, after=self.watch.elapsed())
        self.scope.cancel()


def _no_result(code: int, detail: str) -> b.BackendError:
    """Why headless gemini exited without a result (exit 41: no credentials)."""
    if code == 41:
        return b.BackendError.of(no_credentials(SPEC, detail))
    meaning = _EXIT_MEANING.get(code)
    text = meaning[0] if meaning else f"gemini exited ({exit_status(code)}) without a result"
    return b.BackendError(
        text + (f": {detail}" if detail else ""),
        codex_error_info=meaning[1] if meaning else "other",
        additional_details=detail or None,
    )


def api_result_error(msg: str, settings: b.SessionSettings) -> p.TurnError:
    """The error of an API failure gemini showed (`[API Error: {json body}]`, or its words)."""
    return _result_error(msg, 0, settings)


def _result_error(msg: str, code: int, settings: b.SessionSettings) -> p.TurnError:
    """The error of a headless `result` with status error (`code`: gemini's exit status)."""
    meaning = _EXIT_MEANING.get(code)
    info = meaning[1] if meaning else _info_from_text(msg)
    api = _api_error(msg)
    status = 401 if code == 145 else None
    if api is not None:
        # "[API Error: {json body}]" → "Gemini API error (401 UNAUTHENTICATED): ...".
        text, http_status = api
        status = http_status or status
        info = _info_for_status(http_status, text) if http_status is not None else info
        return _api_failure(text, status, settings.env) or p.TurnError(
            message=text, codex_error_info=info
        )
    return _api_failure(msg, status, settings.env) or p.TurnError(
        message=msg, codex_error_info=info
    )


_GOOGLE_ERROR = re.compile(r"\{.*\}", re.DOTALL)


_INFO_FOR_STATUS = {
    400: "badRequest",
    401: "unauthorized",
    403: "unauthorized",
    429: "rateLimitExceeded",
}


def _api_error(raw: str) -> tuple[str, int | None] | None:
    """A readable text (and the HTTP status) for an error that carries the Gemini API's JSON
    error body: the ACP prompt error's message is that body itself, headless's result says
    ``[API Error: {body}]``. None when `raw` holds no such body."""
    found = _GOOGLE_ERROR.search(raw)
    if found is None:
        return None
    try:
        body = json.loads(found.group(0))
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") if isinstance(error.get("code"), int) else None
    text = str(error.get("message") or "").strip() or "no message"
    label = " ".join(str(x) for x in (code, error.get("status")) if x)
    return f"Gemini API error{f' ({label})' if label else ''}: {text}", code


def _info_for_status(code: int | None, text: str) -> str:
    if code is not None and code in _INFO_FOR_STATUS:
        return _INFO_FOR_STATUS[code]
    if code is not None and 500 <= code < 600:
        return "internalServerError"
    return _info_from_text(text)


def _info_from_text(message: str) -> str:
    if '"code":401' in message or "401" in message:
        return "unauthorized"
    if "429" in message or "exhausted" in message:
        return "rateLimitExceeded"
    if '"code":500' in message or "500" in message:
        return "internalServerError"
    return "other"


_USAGE = UsageFields(
    input="input_tokens", output="output_tokens", total="total_tokens", cached="cached"
)


def _headless_usage(stats: Any) -> p.TokenUsageBreakdown | None:
    return read_usage(stats, _USAGE)


def _headless_tool(event: dict[str, Any], cwd: str, servers: list[str]) -> p.ThreadItem | None:
    """The item of a `tool_use` event (None: a call of threadline's own tools, no item)."""
    name = str(event.get("tool_name") or "tool")
    tool_id = str(event.get("tool_id") or uuid.uuid4())
    params = event.get("parameters") if isinstance(event.get("parameters"), dict) else {}
    assert isinstance(params, dict)
    mcp = split_tool_name(name, servers)
    if mcp is not None:
        return None if is_dynamic(mcp[0]) else mcp_item(tool_id, mcp[0], mcp[1], params)
    if name == "run_shell_command":
        command = str(params.get("command", ""))
        return p.CommandExecutionItem(
            id=tool_id,
            command=command,
            cwd=str(params.get("dir_path") or cwd),
            status="inProgress",
            command_actions=[p.UnknownAction(command=command)],
        )
    if name in ("write_file", "replace"):
        path = str(params.get("file_path", ""))
        if path and not os.path.isabs(path):
            path = os.path.join(cwd, path)
        old = None
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                old = fh.read()
        except OSError:
            pass
        if name == "write_file":
            new = str(params.get("content", ""))
        else:
            new = (old or "").replace(
                str(params.get("old_string", "")),
                str(params.get("new_string", "")),
                -1 if params.get("allow_multiple") else 1,
            )
        diff = file_diff(path.lstrip("/"), old, new)
        return p.FileChangeItem(
            id=tool_id,
            status="inProgress",
            changes=[
                p.FileUpdateChange(
                    path=path,
                    kind=p.PatchKindAdd() if old is None else p.PatchKindUpdate(),
                    diff=diff,
                )
            ],
        )
    if name == "google_web_search":
        query = str(params.get("query", ""))
        return p.WebSearchItem(id=tool_id, query=query, action=p.WebSearchActionSearch(query=query))
    return p.DynamicToolCallItem(
        id=tool_id, tool=name, arguments=params, status="inProgress", namespace="gemini"
    )


def _finish_tool(item: p.ThreadItem, event: dict[str, Any]) -> p.ThreadItem:
    ok = event.get("status") == "success"
    error = event.get("error") if isinstance(event.get("error"), dict) else {}
    assert isinstance(error, dict)
    output = event.get("output")
    # Refused by the approval mode / policy (headless cannot ask): it never ran.
    refused = error.get("type") in ("policy_violation", "tool_not_registered")
    if isinstance(item, p.CommandExecutionItem):
        item.status = "completed" if ok else ("declined" if refused else "failed")
        item.aggregated_output = str(output) if output is not None else error.get("message")
    elif isinstance(item, p.FileChangeItem):
        item.status = "completed" if ok else ("declined" if refused else "failed")
    elif isinstance(item, p.DynamicToolCallItem):
        item.status = "completed" if ok else "failed"
        item.success = ok
        text = str(output) if output is not None else str(error.get("message", ""))
        item.content_items = [p.ToolOutputText(text=text)] if text else []
    elif isinstance(item, p.McpToolCallItem):
        _finish_mcp(item, ok, output, error, refused)
    return item


def _finish_mcp(
    item: p.McpToolCallItem, ok: bool, output: Any, error: dict[str, Any], refused: bool
) -> None:
    """A headless MCP call's end. Refused: the approval mode or a policy kept it from
    running (headless cannot ask: outside `never` Gemini denies MCP tools)."""
    if ok:
        item.status = "completed"
        text = str(output) if output is not None else ""
        item.result = p.McpToolCallResult(content=[{"type": "text", "text": text}] if text else [])
        return
    message = str(error.get("message") or "the MCP tool call failed")
    if refused:
        message = f"declined: {message}"
    item.status, item.error = "failed", p.McpToolCallError(message=message)
