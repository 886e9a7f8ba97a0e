"""Gemini CLI backend.

ACP mode (default): a long-lived `gemini --acp` per cwd, threads multiplexed as ACP sessions
(`backends/kit/acp.py`): streamed text and thoughts, real approvals (`session/request_permission`),
`session/cancel`, `session/load` for resume.

Headless mode (`config.mode: "headless"`): `gemini -p … -o stream-json` per turn with
`--session-id` on the first turn and `--resume` after; approvals by policy only
(`--approval-mode`); cancel kills the CLI's process group and every descendant (the shell tool
runs in its own process group, so a group signal alone leaves it behind).

Facts (gemini 0.61.0, reference/gemini-cli.md): a relaunched child ignores signals to the parent
(`GEMINI_CLI_NO_RELAUNCH=1` keeps one process); exit codes 41 auth, 42 input, 55 untrusted
folder, HTTP status & 0xFF for API errors; an ACP `session/load` within the same wall-clock
minute as the session file's name wipes the session — we wait for the next minute.
"""

from __future__ import annotations

import datetime as dt
import difflib
import glob
import json
import logging
import os
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
    PatchKindAdd,
    PatchKindUpdate,
    ReasoningEffortOption,
    ThreadItem,
    ThreadTokenUsage,
    TokenUsageBreakdown,
    ToolOutputText,
    TurnError,
    UnknownAction,
    WebSearchActionSearch,
    WebSearchItem,
)
from .. import base as b
from ..kit.acp import AcpError, AcpPool, AcpSession, AcpTurnMapper
from ..kit.api_errors import (
    ConnectionWatch,
    is_connection_failure,
    no_credentials,
    refused,
    unreachable,
)
from ..kit.api_probe import probe_target, watch_api
from ..kit.spawn import open_cli_process
from .spec import SPEC

__all__ = ["GeminiBackend"]

log = logging.getLogger("threadline.backend.gemini")

#: What to check when the API cannot be reached.
_CHECK = "GOOGLE_GEMINI_BASE_URL"
#: Seconds of failed connections (probed, or the CLI's own attempts) before a turn is failed.
PROBE_BUDGET = 5.0
#: headless: "Attempt 1 failed. Retrying with backoff... Error: <why>" on stderr.
_ATTEMPT_FAILED = re.compile(r"^Attempt \d+ failed")

_EXIT_MEANING = {
    41: ("authentication is not configured for gemini", "unauthorized"),
    42: ("gemini rejected its input (bad --resume or --session-id)", "badRequest"),
    55: (
        "gemini refuses to run in an untrusted folder (set GEMINI_CLI_TRUST_WORKSPACE=true)",
        "other",
    ),
    145: ("the Gemini API answered 401 Unauthorized", "unauthorized"),
    173: ("the Gemini API answered 429 Too Many Requests", "rateLimitExceeded"),
    244: ("the Gemini API answered 500 Internal Server Error", "internalServerError"),
    144: ("the Gemini API answered 400 Bad Request", "badRequest"),
}


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env["PWD"] = settings.cwd
    # One process instead of a relaunched child: faster start, signals reach the worker.
    env.setdefault("GEMINI_CLI_NO_RELAUNCH", "1")
    return env


def api_url(env: dict[str, str]) -> str:
    """The Gemini API the CLI calls (GOOGLE_GEMINI_BASE_URL, else Google's)."""
    return env.get("GOOGLE_GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com"


def _api_failure(message: str, status: int | None, env: dict[str, str]) -> TurnError | None:
    """The error that says what to do for a refused or unreachable API, else None."""
    if status == 401:
        return refused(SPEC, api_url(env), message)
    if is_connection_failure(message):
        return unreachable(SPEC, api_url(env), _CHECK, message)
    return None


def _model_flags(settings: b.SessionSettings) -> list[str]:
    # An explicit model also skips Gemini's router call (one request per model round).
    if settings.model and settings.model != "default":
        return ["-m", settings.model]
    return []


async def _wait_out_session_minute(session_id: str, env: dict[str, str]) -> None:
    """Gemini wipes a session loaded in the same minute as its file's name: wait it out."""
    home = env.get("HOME") or os.path.expanduser("~")
    pattern = os.path.join(
        home, ".gemini", "tmp", "*", "chats", f"session-*-{session_id[:8]}*.jsonl"
    )
    names = [os.path.basename(p) for p in glob.glob(pattern)]
    stamps = {n[len("session-") : len("session-") + 16] for n in names}
    now = [
        dt.datetime.now().strftime("%Y-%m-%dT%H-%M"),
        dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M"),
    ]
    if stamps & set(now):
        wait = 61 - dt.datetime.now().second
        log.info("waiting %ss before session/load of %s (same-minute bug)", wait, session_id)
        await trio.sleep(wait)


class GeminiAcpSession(AcpSession):
    _last_update = 0.0  # trio.current_time() of the session's last update
    # Gemini's "Allow for this session" (proceed_always) grants more than the user approved: for
    # a shell command, every later command with the same root (`touch x` → any `touch`); for an
    # edit, it switches the whole session to autoEdit. Answer "Allow" (once) instead: the
    # approval router remembers the exact acceptForSession grant and auto-approves repeats.
    permission_kinds = {**AcpSession.permission_kinds, "acceptForSession": "allow_once"}
    # A prompt that failed (API error) or was cancelled while the model streamed is dropped
    # from the conversation (observed with 0.61.0: the next API request does not carry it; a
    # turn cancelled after a tool call is kept). Until a turn got that far there is nothing to
    # session/load, and the role must go again with the next prompt.
    keeps_unfinished_prompts = False

    def turn_error(self, error: AcpError) -> TurnError:
        # An API failure answers session/prompt with code = HTTP status and the API's JSON
        # error body as the message (reference §7.5): show its text, not the JSON.
        api = _api_error(error.message)
        if api is None:
            status = error.code if 400 <= error.code < 600 else None
            failure = _api_failure(error.message, status, self.settings.env)
            return failure or super().turn_error(error)
        text, code = api
        failure = _api_failure(text, code or error.code, self.settings.env)
        return failure or TurnError(
            message=text, codex_error_info=_info_for_status(code or error.code, text)
        )

    def on_update(self, update: dict[str, Any]) -> None:
        self._last_update = trio.current_time()
        super().on_update(update)

    async def watch_model_api(self, mapper: AcpTurnMapper) -> None:
        # gemini --acp retries an unreachable API for minutes without a word: probe it (see
        # api_probe) while the turn waits on the model.
        url = api_url(self.settings.env)
        target = probe_target(url, self.settings.env)
        if target is None:
            return
        self._last_update = trio.current_time()

        def quiet_since() -> float | None:
            busy = mapper.tools or self._permissions_active
            return None if busy else self._last_update

        watch = ConnectionWatch(budget=PROBE_BUDGET)
        error = await watch_api(target, watch, quiet_since)
        self.give_up(unreachable(SPEC, url, _CHECK, error, after=watch.elapsed()))

    async def configure(self) -> None:
        if self.settings.approval_policy == "never":
            # No approvals wanted: let Gemini run tools without asking.
            await self.host.request(
                "session/set_mode", {"sessionId": self.session_id, "modeId": "yolo"}, timeout=30
            )


# -- headless --------------------------------------------------------------------------------------


class GeminiHeadlessSession(b.BackendSession):
    def __init__(self, settings: b.SessionSettings, binary: str) -> None:
        self.settings = settings
        self.binary = binary
        #: True once Gemini has stored a conversation we can `--resume`: a turn succeeded.
        #: (A first turn that failed or was killed leaves no resumable session: `--resume`
        #: then exits 42 "No previous sessions found for this project".)
        self._started = bool(settings.backend_session_id)
        self.session_id = settings.backend_session_id or str(uuid.uuid4())
        self._tried = False
        self._total: TokenUsageBreakdown | None = None

    def argv(self) -> list[str]:
        s = self.settings
        mode = {"never": "yolo"}.get(s.approval_policy, "default")
        if s.config.get("approvalMode"):
            mode = str(s.config["approvalMode"])
        argv = [self.binary, "-o", "stream-json", "--approval-mode", mode, *_model_flags(s)]
        argv += (
            ["--resume", self.session_id] if self._started else ["--session-id", self.session_id]
        )
        # The prompt is read from stdin (prepended to -p's text): never in argv.
        argv += ["-p", ""]
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if not self._started and self._tried:
            # The last try left no resumable session (and its id may be taken: --session-id
            # of an existing id exits 42): start over under a new id.
            self.session_id = str(uuid.uuid4())
        self._tried = True
        prompt = f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text
        run = _HeadlessTurn(self.settings.env)
        try:
            async with open_cli_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=_env(self.settings),
                stdin="pipe",
                name="gemini -p",
            ) as proc:
                proc.on_stderr_line = run.stderr_line
                await proc.write(prompt.encode())
                await proc.close_stdin()
                with run.scope:
                    while (event := await proc.read_json_object()) is not None:
                        await self._event(event, run, turn, ctx)
                await run.close_message(ctx)
                if run.gave_up is not None:
                    return b.TurnOutcome("failed", run.gave_up)  # (stops the CLI)
                code = await proc.wait()
                if run.result is None:
                    raise _no_result(code, proc.stderr_tail(1500))
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
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
            item = _headless_tool(event, self.settings.cwd)
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
            await ctx.emit(b.TokenUsageUpdated(self._add(usage)))
        if result.get("status") == "success":
            return b.TurnOutcome("completed")
        error = result.get("error") if isinstance(result.get("error"), dict) else {}
        assert isinstance(error, dict)
        if error.get("type") == "FatalCancellationError":
            return b.TurnOutcome("interrupted")
        # (a cut-off model stream: the result has no message, the `error` event says why)
        msg = str(error.get("message") or last_error or "gemini reported an error")
        return b.TurnOutcome("failed", _result_error(msg, code, self.settings))

    def _add(self, last: TokenUsageBreakdown) -> ThreadTokenUsage:
        t = self._total
        self._total = (
            last
            if t is None
            else TokenUsageBreakdown(
                total_tokens=t.total_tokens + last.total_tokens,
                input_tokens=t.input_tokens + last.input_tokens,
                cached_input_tokens=t.cached_input_tokens + last.cached_input_tokens,
                output_tokens=t.output_tokens + last.output_tokens,
                reasoning_output_tokens=0,
            )
        )
        return ThreadTokenUsage(total=self._total, last=last)


class _HeadlessTurn:
    """One `gemini -p` turn: the message being streamed, the tools running, the `result`, and
    what stderr says: its failed attempts to connect (`gave_up` ends the turn)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.message: AgentMessageItem | None = None
        self.text: list[str] = []
        self.tools: dict[str, ThreadItem] = {}
        self.result: dict[str, Any] | None = None
        self.last_error: str | None = None  # the last `error` event: why a result failed
        self.watch = ConnectionWatch(budget=PROBE_BUDGET)
        self.scope = trio.CancelScope()
        self.gave_up: TurnError | None = None

    async def delta(self, chunk: str, ctx: b.TurnContext) -> None:
        if self.message is None:
            self.message = AgentMessageItem(id=ctx.new_item_id(), text="")
            await ctx.emit(b.ItemStarted(AgentMessageItem(id=self.message.id, text="")))
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


def _result_error(msg: str, code: int, settings: b.SessionSettings) -> TurnError:
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
        return _api_failure(text, status, settings.env) or TurnError(
            message=text, codex_error_info=info
        )
    return _api_failure(msg, status, settings.env) or TurnError(message=msg, codex_error_info=info)


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


def _headless_usage(stats: Any) -> TokenUsageBreakdown | None:
    if not isinstance(stats, dict):
        return None
    inp, out = int(stats.get("input_tokens") or 0), int(stats.get("output_tokens") or 0)
    return TokenUsageBreakdown(
        total_tokens=int(stats.get("total_tokens") or inp + out),
        input_tokens=inp,
        cached_input_tokens=int(stats.get("cached") or 0),
        output_tokens=out,
        reasoning_output_tokens=0,
    )


def _headless_tool(event: dict[str, Any], cwd: str) -> ThreadItem:
    name = str(event.get("tool_name") or "tool")
    tool_id = str(event.get("tool_id") or uuid.uuid4())
    params = event.get("parameters") if isinstance(event.get("parameters"), dict) else {}
    assert isinstance(params, dict)
    if name == "run_shell_command":
        command = str(params.get("command", ""))
        return CommandExecutionItem(
            id=tool_id,
            command=command,
            cwd=str(params.get("dir_path") or cwd),
            status="inProgress",
            command_actions=[UnknownAction(command=command)],
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
        diff = "".join(
            difflib.unified_diff(
                (old or "").splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile="/dev/null" if old is None else f"a/{path.lstrip('/')}",
                tofile=f"b/{path.lstrip('/')}",
            )
        )
        return FileChangeItem(
            id=tool_id,
            status="inProgress",
            changes=[
                FileUpdateChange(
                    path=path, kind=PatchKindAdd() if old is None else PatchKindUpdate(), diff=diff
                )
            ],
        )
    if name == "google_web_search":
        query = str(params.get("query", ""))
        return WebSearchItem(id=tool_id, query=query, action=WebSearchActionSearch(query=query))
    return DynamicToolCallItem(
        id=tool_id, tool=name, arguments=params, status="inProgress", namespace="gemini"
    )


def _finish_tool(item: ThreadItem, event: dict[str, Any]) -> ThreadItem:
    ok = event.get("status") == "success"
    error = event.get("error") if isinstance(event.get("error"), dict) else {}
    assert isinstance(error, dict)
    output = event.get("output")
    # Refused by the approval mode / policy (headless cannot ask): it never ran.
    refused = error.get("type") in ("policy_violation", "tool_not_registered")
    if isinstance(item, CommandExecutionItem):
        item.status = "completed" if ok else ("declined" if refused else "failed")
        item.aggregated_output = str(output) if output is not None else error.get("message")
    elif isinstance(item, FileChangeItem):
        item.status = "completed" if ok else ("declined" if refused else "failed")
    elif isinstance(item, DynamicToolCallItem):
        item.status = "completed" if ok else "failed"
        item.success = ok
        text = str(output) if output is not None else str(error.get("message", ""))
        item.content_items = [ToolOutputText(text=text)] if text else []
    return item


# -- backend ---------------------------------------------------------------------------------------


class GeminiBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)
        self._pool = AcpPool("gemini --acp")

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == "headless":
            yield GeminiHeadlessSession(settings, binary)
            return
        env = _env(settings)
        argv = [binary, "--acp", *_model_flags(settings)]
        async with self._pool.host(
            argv, settings.cwd, env, session_id=settings.backend_session_id
        ) as host:
            session = GeminiAcpSession(host, settings, "gemini")

            async def before_load(sid: str) -> None:
                await _wait_out_session_minute(sid, env)

            session.before_load = before_load
            await session.open()
            try:
                yield session
            finally:
                session.close()

    def models(self) -> list[Model]:
        efforts = [ReasoningEffortOption(reasoning_effort="medium", description="default")]
        return [
            Model(
                id=f"gemini/{m}",
                model=m,
                display_name=m,
                description=d,
                hidden=False,
                is_default=m == "default",
                default_reasoning_effort="medium",
                supported_reasoning_efforts=efforts,
            )
            for m, d in (
                ("default", "Gemini CLI's automatic model routing"),
                ("gemini-2.5-pro", "passed to gemini -m"),
                ("gemini-2.5-flash", "passed to gemini -m"),
            )
        ]


def create() -> GeminiBackend:
    return GeminiBackend()
