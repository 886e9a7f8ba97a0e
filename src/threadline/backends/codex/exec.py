"""Codex's exec mode: `codex exec --json` spawned per turn, `codex exec resume` from the second."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Literal

import msgspec
import trio

from ... import protocol as p
from .. import base as b
from ..kit.api_errors import ConnectionWatch, is_connection_failure
from ..kit.mcp import is_dynamic
from ..kit.per_turn import PerTurnCliSession
from ..kit.usage import UsageFields, read_usage
from .api import STATUS_TEXT, api_failure, provider_url, retry_status
from .inputs import exec_images, exec_prompt
from .invocation import _COMMON_FLAGS, CodexCommand, _config_flags, _exit_error
from .mcp import mcp_config, start_failures, with_error
from .overrides import exec_setting_flags

_EXEC_STATUS: dict[str, Literal["inProgress", "completed", "failed", "declined"]] = {
    "in_progress": "inProgress",
    "completed": "completed",
    "failed": "failed",
    "declined": "declined",
}


def _exec_item(
    raw: dict[str, Any], prefix: str, cwd: str
) -> p.ThreadItem | list[p.TurnPlanStep] | str | None:
    """A `codex exec --json` item → our item (or plan steps for todo_list, or a warning)."""
    kind = raw.get("type")
    item_id = f"{prefix}{raw.get('id', '')}"
    status = _EXEC_STATUS.get(str(raw.get("status")), "inProgress")
    if kind == "agent_message":
        return p.AgentMessageItem(id=item_id, text=str(raw.get("text", "")))
    if kind == "reasoning":
        text = str(raw.get("text", ""))
        return p.ReasoningItem(id=item_id, summary=[text] if text else [])
    if kind == "command_execution":
        command = str(raw.get("command", ""))
        code = raw.get("exit_code")
        return p.CommandExecutionItem(
            id=item_id,
            command=command,
            cwd=cwd,
            status=status,
            command_actions=[p.UnknownAction(command=command)],
            aggregated_output=raw.get("aggregated_output"),
            exit_code=code if isinstance(code, int) else None,
        )
    if kind == "file_change":
        kinds: dict[str, p.PatchKindAdd | p.PatchKindDelete] = {
            "add": p.PatchKindAdd(),
            "delete": p.PatchKindDelete(),
        }
        changes = [
            p.FileUpdateChange(
                path=str(c.get("path", "")),
                kind=kinds.get(str(c.get("kind")), p.PatchKindUpdate()),
                diff="",
            )
            for c in raw.get("changes") or []
            if isinstance(c, dict)
        ]
        return p.FileChangeItem(
            id=item_id, changes=changes, status="inProgress" if status == "inProgress" else status
        )
    if kind == "mcp_tool_call":
        result = raw.get("result") if isinstance(raw.get("result"), dict) else None
        error = raw.get("error") if isinstance(raw.get("error"), dict) else None
        mcp_status: Literal["inProgress", "completed", "failed"] = (
            "inProgress"
            if status == "inProgress"
            else ("failed" if status in ("failed", "declined") else "completed")
        )
        mcp_item = p.McpToolCallItem(
            id=item_id,
            server=str(raw.get("server", "")),
            tool=str(raw.get("tool", "")),
            arguments=raw.get("arguments"),
            status=mcp_status,
            result=p.McpToolCallResult(content=list(result.get("content") or []))
            if result
            else None,
            error=p.McpToolCallError(message=str(error.get("message", ""))) if error else None,
        )
        return _mcp_exec_item(mcp_item)
    if kind == "web_search":
        query = str(raw.get("query", ""))
        return p.WebSearchItem(id=item_id, query=query, action=p.WebSearchActionSearch(query=query))
    if kind == "todo_list":
        return [
            p.TurnPlanStep(
                step=str(t.get("text", "")), status="completed" if t.get("completed") else "pending"
            )
            for t in raw.get("items") or []
            if isinstance(t, dict)
        ]
    if kind == "error":
        return str(raw.get("message", ""))
    return None


#: Codex exec's error for an MCP call that needs an approval (exec never asks).
_NEEDS_APPROVAL = "MCP tool call requires approval"
#: Fail closed: exec cannot ask, so under any policy but `never` the thread's MCP tools
#: (other than the client's own) are refused by Codex itself (`prompt`, see .mcp); the error
#: the client's item then shows (the model gets Codex's own words).
EXEC_REFUSED = (
    "refused: codex exec cannot ask for approval, so MCP tools run only under approvalPolicy "
    "never (the app-server mode asks)"
)


def _mcp_exec_item(item: p.McpToolCallItem) -> p.McpToolCallItem | None:
    """The MCP item as shown: none for a tool of the client's own (threadline's tool host
    reports it); exec's approval refusal explained."""
    if is_dynamic(item.server):
        return None
    if item.error is not None and item.error.message.startswith(_NEEDS_APPROVAL):
        return msgspec.structs.replace(item, error=p.McpToolCallError(message=EXEC_REFUSED))
    return with_error(item)


_USAGE = UsageFields(
    input="input_tokens",
    output="output_tokens",
    cached="cached_input_tokens",
    reasoning="reasoning_output_tokens",
    cache_write="cache_write_input_tokens",
)


def _usage(raw: Any) -> p.TokenUsageBreakdown | None:
    return read_usage(raw, _USAGE)


class CodexExecSession(PerTurnCliSession):
    process_name = "codex exec"

    def __init__(self, settings: b.SessionSettings, codex: CodexCommand) -> None:
        self.settings = settings
        self.codex = codex
        self._previous_total: p.TokenUsageBreakdown | None = None
        #: The last `error` event's message (the reason given if the turn fails without one).
        self.last_error: str | None = None
        self._watch = ConnectionWatch()
        # `required`: exec waits for the servers to start (else it gives the model only those
        # that started within about 1 s); one that fails stops it, and the turn runs again
        # without it (`_run`).
        self.mcp = mcp_config(settings, required=True)
        self._failed_servers: frozenset[str] = frozenset()
        #: The running turn's image files and output schema file (`argv`).
        self._images: list[str] = []
        self._schema_file: str | None = None
        #: The reasoning summary changed since the session was made (`argv` forks it).
        self._summary_changed = False

    def argv(self) -> list[str]:
        s = self.settings
        argv = [
            self.codex.binary,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--cd",
            s.cwd,
            *_COMMON_FLAGS,
            *_config_flags(s),
            *self.mcp.flags(),
        ]
        if s.developer_instructions:
            argv += ["-c", f"developer_instructions={json.dumps(s.developer_instructions)}"]
        if s.base_instructions:
            argv += ["-c", f"instructions={json.dumps(s.base_instructions)}"]
        argv += exec_setting_flags(s)
        # This turn's images and output schema (`--image=FILE`: `-i` takes several values).
        argv += [f"--image={path}" for path in self._images]
        if self._schema_file is not None:
            argv += ["--output-schema", self._schema_file]
        if s.backend_session_id and self._summary_changed:
            # `exec resume` keeps the session's reasoning summary whatever `-c` says (0.169.0);
            # a fork of the session takes the new one, with the whole history.
            argv += ["fork", s.backend_session_id]
        elif s.backend_session_id:
            argv += ["resume", s.backend_session_id]
        elif s.fork_of:
            # A forked thread's first turn: a new session with the source's history (the
            # source's own session untouched); `thread.started` reports its id.
            argv += ["fork", s.fork_of]
        argv.append("-")  # the prompt comes from stdin (never argv: it may start with "-")
        return argv

    def process_env(self) -> dict[str, str]:
        return {**self.codex.env(self.settings), **self.mcp.env}

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()  # role goes in as developer_instructions
        prefix = f"{turn.turn_id[-12:]}-"
        with tempfile.TemporaryDirectory(prefix="threadline-codex-") as scratch:
            self._images = await exec_images(turn.input, self.settings.cwd, scratch)
            if turn.output_schema is not None:
                self._schema_file = os.path.join(scratch, "output-schema.json")
                await trio.Path(self._schema_file).write_bytes(
                    msgspec.json.encode(turn.output_schema)
                )
            try:
                while True:
                    outcome = await self._run(turn, prefix, ctx)
                    if outcome is not None:
                        return outcome
            finally:
                self._images, self._schema_file = [], None

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        """Every spawn reads the thread's settings; a new reasoning summary needs the
        session forked (see `argv`)."""
        self._summary_changed |= "summary" in changed
        return frozenset()

    async def _run(
        self, turn: b.TurnInput, prefix: str, ctx: b.TurnContext
    ) -> b.TurnOutcome | None:
        """One `codex exec` run of the turn; None when it stopped because one of the thread's
        MCP servers did not start (left out from then on, with a warning: run it again)."""
        self.last_error = None
        self._watch = ConnectionWatch()
        events = 0
        async with self.turn_process(exec_prompt(turn)) as proc:
            while (event := await proc.read_json_object()) is not None:
                events += 1
                outcome = await self.handle_event(event, prefix, ctx)
                if outcome is not None:
                    return outcome
            await proc.wait()
            failed = start_failures(self.mcp, proc.stderr_tail()) if events == 0 else {}
            if failed:
                for name, reason in sorted(failed.items()):
                    await ctx.emit(b.Warning(f"MCP server {name!r} failed to start: {reason}"))
                self._failed_servers |= failed.keys()
                self.mcp = mcp_config(self.settings, required=True, leave_out=self._failed_servers)
                return None
            raise _exit_error(
                proc,
                "exited without finishing the turn"
                + (f" ({self.last_error})" if self.last_error else ""),
            )

    async def handle_event(
        self, event: dict[str, Any], prefix: str, ctx: b.TurnContext
    ) -> b.TurnOutcome | None:
        """One `codex exec --json` event → normalized events; the outcome once the turn ends.
        (Separate from the process loop so recorded transcripts can be replayed through it.)"""
        etype = event.get("type")
        if etype == "thread.started" and isinstance(event.get("thread_id"), str):
            if event["thread_id"] != self.settings.backend_session_id:
                self._summary_changed = False  # a new session: it has the thread's summary
            self.settings.backend_session_id = event["thread_id"]
            await ctx.set_backend_session_id(event["thread_id"])
        elif etype in ("item.started", "item.updated", "item.completed"):
            self._watch.progress()
            await self._item(event.get("item") or {}, etype, prefix, ctx)
        elif etype == "turn.completed":
            total = _usage(event.get("usage"))
            if total is not None:
                await ctx.emit(b.TokenUsageUpdated(self._usage(total)))
            return b.TurnOutcome("completed")
        elif etype == "turn.failed":
            err = event.get("error") or {}
            message = str(err.get("message") or self.last_error or "codex exec failed")
            error = p.TurnError(message=message, codex_error_info=_error_info(message))
            return b.TurnOutcome("failed", self._api_failure(error) or error)
        elif etype == "error":
            self.last_error = str(event.get("message", ""))
            if self.last_error.startswith("Reconnecting"):
                info = _error_info(self.last_error)
                notice = p.TurnError(message=self.last_error, codex_error_info=info)
                await ctx.emit(b.RetryableError(notice))
                return self._check_retry(notice)
        return None

    def _api_failure(self, error: p.TurnError, after: float | None = None) -> p.TurnError | None:
        url = provider_url(self.settings.env, self.settings.config.get("codexConfig"))
        return api_failure(error.message, retry_status(error), url, after=after)

    def _check_retry(self, notice: p.TurnError) -> b.TurnOutcome | None:
        """A retry notice: the turn fails (and the CLI is stopped) once retrying cannot help:
        a 401 again, or no connection for the budget."""
        status = retry_status(notice)
        if status == 401 and self._watch.refused():
            error = self._api_failure(notice)
        elif status is None and is_connection_failure(notice.message) and self._watch.failed():
            error = self._api_failure(notice, self._watch.elapsed())
        else:
            return None
        return None if error is None else b.TurnOutcome("failed", error)

    def _usage(self, total: p.TokenUsageBreakdown) -> p.ThreadTokenUsage:
        # exec reports the thread's cumulative usage; `last` is the difference. (A session
        # opened on an existing thread does not know the earlier total: its first `last` is
        # the cumulative figure.)
        prev = self._previous_total
        self._previous_total = total
        if prev is None:
            return p.ThreadTokenUsage(total=total, last=total)

        def diff(now: int | None, before: int | None) -> int:
            return max(0, (now or 0) - (before or 0))

        last = p.TokenUsageBreakdown(
            total_tokens=diff(total.total_tokens, prev.total_tokens),
            input_tokens=diff(total.input_tokens, prev.input_tokens),
            cached_input_tokens=diff(total.cached_input_tokens, prev.cached_input_tokens),
            output_tokens=diff(total.output_tokens, prev.output_tokens),
            reasoning_output_tokens=diff(
                total.reasoning_output_tokens, prev.reasoning_output_tokens
            ),
            # (was left out: `last` then claimed no cache writes at all)
            cache_write_input_tokens=diff(
                total.cache_write_input_tokens, prev.cache_write_input_tokens
            ),
        )
        return p.ThreadTokenUsage(total=total, last=last)

    async def _item(self, raw: dict[str, Any], etype: str, prefix: str, ctx: b.TurnContext) -> None:
        mapped = _exec_item(raw, prefix, self.settings.cwd)
        if mapped is None:
            return
        if isinstance(mapped, list):
            await ctx.emit(b.PlanUpdated(mapped))
        elif isinstance(mapped, str):
            await ctx.emit(b.Warning(mapped))
        elif etype == "item.started":
            await ctx.emit(b.ItemStarted(mapped))
        elif etype == "item.completed":
            await ctx.emit(b.ItemCompleted(mapped))


def _error_info(message: str) -> str | dict[str, Any]:
    """`codexErrorInfo` for an exec error text: what `codex app-server` reports for the same
    failure (measured with 0.169.0), so a client sees the same value in both modes."""
    if "high demand" in message:  # Codex's text for an HTTP 5xx it will not show
        return "internalServerError"
    if "Missing environment variable" in message:  # the provider's env_key is unset
        return "unauthorized"
    match = STATUS_TEXT.search(message)
    if match:
        status = int(match.group(1))
        if message.startswith("exceeded retry limit"):
            return {"responseTooManyFailedAttempts": {"httpStatusCode": status}}
        return {"httpConnectionFailed": {"httpStatusCode": status}}
    return "other"
