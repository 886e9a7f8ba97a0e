"""OpenCode's run mode: `opencode run --format json` per turn, `--session` from the second."""

from __future__ import annotations

from typing import Any

import trio

from ... import protocol as p
from ...procs.group import exit_status
from .. import base as b
from ..kit.acp import error_info_for_code
from ..kit.api_errors import ConnectionWatch
from ..kit.mcp import is_dynamic, mcp_item
from ..kit.per_turn import PerTurnCliSession, prompt_with_bootstrap
from ..kit.plan import todo_steps
from ..kit.usage import UsageFields, UsageTotals, add_usage, read_usage
from .api import (
    LOG_FLAGS,
    StreamFailure,
    api_error,
    give_up_error,
    model_not_found,
    no_model,
    stream_failure,
    unreachable_error,
)
from .attach import attachments
from .invocation import _env
from .mcp import split_tool, unavailable_server

__all__ = ["OpenCodeRunSession"]


class OpenCodeRunSession(PerTurnCliSession):
    process_name = "opencode run"

    def __init__(self, settings: b.SessionSettings, binary: str) -> None:
        self.settings = settings
        self.binary = binary
        self._usage = UsageTotals()
        self._files: list[str] = []  # this turn's `-f` attachments

    def argv(self) -> list[str]:
        s = self.settings
        argv = [self.binary, "run", "--format", "json", "--dir", s.cwd, "--thinking", *LOG_FLAGS]
        if s.model and s.model != "default":
            argv += ["--model", s.model]
        if s.effort:
            # (OpenCode's variants; one the model does not have is ignored.)
            argv += ["--variant", s.effort]
        if s.backend_session_id:
            argv += ["--session", s.backend_session_id]
        elif s.fork_of:
            # `thread/fork`: a copy of the source's session, continued (the new id comes
            # with the events).
            argv += ["--session", s.fork_of, "--fork"]
        else:
            argv += ["--title", "threadline"]  # also skips the title-generation model call
        if s.approval_policy == "never":
            argv.append("--auto")
        for path in self._files:
            argv += ["--file", path]
        return argv

    def process_env(self) -> dict[str, str]:
        return _env(self.settings, with_mcp=True)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        async with attachments(turn.input, self.settings.cwd) as attached:
            for warning in attached.warnings:
                await ctx.emit(b.Warning(warning))
            if attached.notes:
                text = "\n\n".join([turn.text, *attached.notes])
                turn = b.TurnInput(turn.turn_id, turn.input, text, turn.bootstrap)
            self._files = attached.files
            try:
                return await self._run_retried(turn, ctx)
            finally:
                self._files = []

    async def _run_retried(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
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
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        run = _RunState(self.process_env(), self.settings.cwd)
        prompt = prompt_with_bootstrap(turn)
        async with self.turn_process(prompt, env=run.env, on_stderr_line=run.stderr_line) as proc:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run.expire)
                with run.scope:
                    while (event := await proc.read_json_object()) is not None:
                        run.watch.progress()
                        await run.emit_warnings(ctx)
                        await self._event(event, run, ctx)
                nursery.cancel_scope.cancel()
            await run.emit_warnings(ctx)
            if run.gave_up is not None:
                return b.TurnOutcome("failed", run.gave_up)  # (stops the CLI)
            code = await proc.wait()
            stderr = proc.stderr_tail(1500)
        if run.usage is not None:
            await ctx.emit(b.TokenUsageUpdated(self._usage.add(run.usage)))
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
            item = p.AgentMessageItem(
                id=str(part.get("id") or ctx.new_item_id()), text=str(part.get("text", ""))
            )
            await ctx.emit(b.ItemCompleted(item))
        elif etype == "reasoning":
            text = str(part.get("text", ""))
            item_id = str(part.get("id") or ctx.new_item_id())
            reasoning = p.ReasoningItem(id=item_id, summary=[text] if text else [])
            await ctx.emit(b.ItemCompleted(reasoning))
        elif etype == "tool_use":
            mapped = _run_tool(part, self.settings)
            if isinstance(mapped, list):
                await ctx.emit(b.PlanUpdated(mapped))
            elif mapped is not None:
                if isinstance(mapped, p.McpToolCallItem):
                    # (Reported once done: a client still sees the call start, then end.)
                    start = mcp_item(mapped.id, mapped.server, mapped.tool, mapped.arguments)
                    await ctx.emit(b.ItemStarted(start))
                await ctx.emit(b.ItemCompleted(mapped))
        elif etype == "step_finish":
            step = _step_usage(part.get("tokens"))
            if step is not None:
                run.usage = step if run.usage is None else add_usage(run.usage, step)
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
        self.usage: p.TokenUsageBreakdown | None = None
        self.watch = ConnectionWatch()
        self.scope = trio.CancelScope()
        self.gave_up: p.TurnError | None = None
        self.failure: StreamFailure | None = None
        self.missing_model: str | None = None
        self.warnings: list[str] = []  # not yet emitted

    def stderr_line(self, line: str) -> None:
        self.missing_model = model_not_found(line) or self.missing_model
        unavailable = unavailable_server(line)
        if unavailable is not None:
            name, why = unavailable
            self.warnings.append(f"MCP server '{name}' did not start: opencode: {why}")
        failure = stream_failure(line)
        if failure is None or self.gave_up is not None:
            return
        self.failure = failure
        self.gave_up = give_up_error(failure, self.watch, self.env, self.cwd)
        if self.gave_up is not None:
            self.scope.cancel()

    async def emit_warnings(self, ctx: b.TurnContext) -> None:
        while self.warnings:
            await ctx.emit(b.Warning(self.warnings.pop(0)))

    async def expire(self) -> None:
        """Ends the turn at the watch's budget when the CLI's next attempt comes late."""
        await self.watch.expired()
        if self.failure is not None and self.gave_up is None:
            self.gave_up = unreachable_error(self.failure, self.watch, self.env, self.cwd)
            self.scope.cancel()


def _run_error(err: dict[str, Any], missing_model: str | None) -> p.TurnError:
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
    return api_error(message, status, url) or p.TurnError(
        message=message,
        codex_error_info=error_info_for_code(status or 0, message),
        additional_details=f"HTTP {status}" if status else None,
    )


class _DatabaseLocked(Exception):
    """`opencode run` lost a race for its database before it did anything."""

    def __init__(self, error: b.BackendError) -> None:
        super().__init__(error.message)
        self.error = error


_STEP_USAGE = UsageFields("input", "output", "total", "cache.read", "reasoning", "cache.write")


def _step_usage(tokens: Any) -> p.TokenUsageBreakdown | None:
    return read_usage(tokens, _STEP_USAGE)


def _run_tool(
    part: dict[str, Any], settings: b.SessionSettings
) -> p.ThreadItem | list[p.TurnPlanStep] | None:
    """A finished `tool_use` part → a completed item (run mode reports tools only at the end);
    None for a client-defined tool (threadline's tool host reports those)."""
    tool = str(part.get("tool") or "tool")
    cwd = settings.cwd
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
        return p.CommandExecutionItem(
            id=call_id,
            command=command,
            cwd=str(args.get("workdir") or cwd),
            status="declined" if rejected else ("completed" if ok else "failed"),
            command_actions=[p.UnknownAction(command=command)],
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
        kind = p.PatchKindUpdate() if meta.get("exists") or tool == "edit" else p.PatchKindAdd()
        return p.FileChangeItem(
            id=call_id,
            changes=[p.FileUpdateChange(path=path, kind=kind, diff=diff)],
            status="declined" if rejected else ("completed" if ok else "failed"),
        )
    if tool == "todowrite":
        return todo_steps(args.get("todos"))
    output = state.get("output")
    text = str(output) if output is not None else error
    mcp = split_tool(tool, settings.mcp_servers)
    if mcp is not None:
        if is_dynamic(mcp[0]):
            return None
        if ok:
            blocks = [{"type": "text", "text": text}] if text else []
            return mcp_item(call_id, *mcp, args, status="completed", content=blocks)
        return mcp_item(call_id, *mcp, args, error=_mcp_error(error, rejected))
    return p.DynamicToolCallItem(
        id=call_id,
        tool=tool,
        arguments=args,
        namespace="opencode",
        status="completed" if ok else "failed",
        success=ok,
        content_items=[p.ToolOutputText(text=text)] if text else [],
    )


def _mcp_error(error: str, rejected: bool) -> str:
    if rejected:
        return f"declined: {error}"
    return error or "the MCP tool failed"
