"""Claude Code backend.

Stream mode (default): one long-lived `claude` per thread speaking stream-json both ways, with
approvals over the control channel (`--permission-prompt-tool stdio`): each `turn/start` writes
one user message; `can_use_tool` control requests become our approval requests; interrupt is
the `interrupt` control request, and the same process serves the next turn.

Print mode (`config.mode: "print"`): `claude -p` per turn (prompt on stdin), `--resume` for
later turns, approvals by policy only, cancel kills the process group.

Facts (claude 2.1.197, reference/claude-code.md): the CLI exits 1 after an interrupted or
failed last turn, so turn status comes from `result` lines, never from exit codes; a session
resumes only from its original cwd; `--dangerously-skip-permissions` is refused as root.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from ...channels import receive_ready, send_ready
from ...procs.group import GroupProcess, LineTooLong, ProcessError
from ...protocol import (
    Model,
    ReasoningEffortOption,
    ThreadTokenUsage,
    TokenUsageBreakdown,
    ToolRequestUserInputOption,
    ToolRequestUserInputQuestion,
)
from .. import base as b
from ..kit.spawn import open_cli_process
from .mapping import EDIT_TOOLS, ClaudeTurnMapper, TurnResult, api_url
from .spec import SPEC

__all__ = ["ClaudeBackend"]

log = logging.getLogger("threadline.backend.claude")

_DECLINE_MESSAGE = "The user declined this tool use."


def _base_argv(settings: b.SessionSettings, binary: str) -> list[str]:
    argv = [binary, "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    if settings.model and settings.model != "default":
        argv += ["--model", settings.model]
    argv += ["--max-turns", str(settings.max_turns)]
    if settings.allowed_tools:
        argv += ["--allowedTools", ",".join(settings.allowed_tools)]
    mode = settings.config.get("permissionMode")
    if isinstance(mode, str) and mode:
        argv += ["--permission-mode", mode]
    if settings.role_prompt:
        argv += ["--append-system-prompt", settings.role_prompt]
    return argv


def _session_flag(
    settings: b.SessionSettings, unsaved: set[str] | None = None
) -> tuple[list[str], str | None]:
    """`--resume=<id>` for a session that already has a transcript, else a fresh
    `--session-id=<uuid>` (equals form: an id can never be taken for a flag). A session id in
    `unsaved` was recorded, but the CLI never saved its transcript: it starts afresh under
    the same id."""
    sid = settings.backend_session_id
    if sid and sid in (unsaved or ()):
        return [f"--session-id={sid}"], None
    if sid:
        return [f"--resume={sid}"], sid
    fresh = str(uuid.uuid4())
    return [f"--session-id={fresh}"], None


_NO_CONVERSATION = "No conversation found with session ID"


def _missing_session(message: dict[str, Any]) -> str | None:
    """The session id of a `--resume` the CLI refused because it has no transcript for it
    (it was killed before it wrote one: recorded at `system/init`, the id outlives the
    process that never saved the conversation), else None."""
    if message.get("type") != "result" or not message.get("is_error"):
        return None
    errors = message.get("errors")
    if not isinstance(errors, list) or not any(_NO_CONVERSATION in str(e) for e in errors):
        return None
    sid = message.get("session_id")
    return sid if isinstance(sid, str) else None


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env.pop("CLAUDECODE", None)  # set inside a Claude Code session; makes the CLI refuse to nest
    env["PWD"] = settings.cwd
    return env


def _user_message(turn: b.TurnInput) -> bytes:
    blocks: list[dict[str, Any]] = []
    if turn.bootstrap:
        blocks.append({"type": "text", "text": turn.bootstrap})
    blocks.append({"type": "text", "text": turn.text})
    message = {
        "type": "user",
        "message": {"role": "user", "content": blocks},
        "parent_tool_use_id": None,
    }
    return json.dumps(message).encode() + b"\n"


def _failure_from_exit(proc: GroupProcess, what: str) -> b.BackendError:
    code = proc.returncode
    tail = proc.stderr_tail(2000)
    if code is not None and code < 0:
        # A negative status is a signal (kill -9, the OOM killer): say which, in words a user
        # understands, instead of a bare "exit code -9".
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        detail = f" (killed by {name})"
    else:
        detail = f" (exit code {code})" if code is not None else ""
    message = f"claude {what}{detail}"
    if tail:
        message += f": {tail}"
    return b.BackendError(message, codex_error_info="other", additional_details=tail or None)


class _UsageTotals:
    def __init__(self) -> None:
        self.total: TokenUsageBreakdown | None = None

    def add(self, last: TokenUsageBreakdown) -> ThreadTokenUsage:
        t = self.total
        if t is None:
            self.total = last
        else:
            self.total = TokenUsageBreakdown(
                total_tokens=t.total_tokens + last.total_tokens,
                input_tokens=t.input_tokens + last.input_tokens,
                cached_input_tokens=t.cached_input_tokens + last.cached_input_tokens,
                output_tokens=t.output_tokens + last.output_tokens,
                reasoning_output_tokens=0,
                cache_write_input_tokens=(t.cache_write_input_tokens or 0)
                + (last.cache_write_input_tokens or 0),
            )
        return ThreadTokenUsage(total=self.total, last=last)


async def _finish_turn(
    result: TurnResult,
    ctx: b.TurnContext,
    usage: _UsageTotals,
) -> b.TurnOutcome:
    if result.session_id:
        await ctx.set_backend_session_id(result.session_id)
    if result.usage is not None:
        await ctx.emit(b.TokenUsageUpdated(usage.add(result.usage)))
    return b.TurnOutcome(result.status, result.error)


# -- stream mode -----------------------------------------------------------------------------------


class ClaudeStreamSession(b.BackendSession):
    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        self.settings = settings
        self.binary = binary
        #: session ids whose transcript the CLI never wrote (shared by the backend's sessions)
        self.unsaved = unsaved if unsaved is not None else set()
        self.proc: GroupProcess | None = None
        self._messages_send, self._messages = trio.open_memory_channel[dict[str, Any] | None](
            10_000
        )
        self._write_lock = trio.Lock()
        self._request_seq = 0
        self._usage = _UsageTotals()
        self._in_turn = False
        self._exited = trio.Event()
        self._close_stdin = trio.Event()

    # -- process ---------------------------------------------------------------------------------

    def argv(self) -> list[str]:
        flags, _ = _session_flag(self.settings, self.unsaved)
        return [
            *_base_argv(self.settings, self.binary),
            "--input-format",
            "stream-json",
            "--permission-prompt-tool",
            "stdio",
            *flags,
        ]

    async def run_process(
        self,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with open_cli_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=_env(self.settings),
                stdin="pipe",
                name="claude",
                grace=3.0,
            ) as proc:
                self.proc = proc
                task_status.started()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_stdout, proc, nursery.cancel_scope)
                    await self._write_control({"subtype": "initialize", "hooks": None})
                    await self._close_stdin.wait()
                    await proc.close_stdin()
                    # The CLI flushes its transcript after stdin EOF; give it a moment.
                    with trio.move_on_after(5):
                        await proc.wait()
                    nursery.cancel_scope.cancel()
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
        finally:
            self.healthy = False
            self._exited.set()
            self._messages_send.close()

    async def _read_stdout(self, proc: GroupProcess, scope: trio.CancelScope) -> None:
        decoder = msgspec.json.Decoder()
        while True:
            try:
                line = await proc.read_line()
            except LineTooLong as exc:
                log.warning("claude printed an oversized line: %s", exc)
                continue
            if line is None:
                break
            if not line.startswith(b"{"):
                log.debug("claude (non-JSON stdout): %s", line[:200])
                continue
            try:
                message = decoder.decode(line)
            except msgspec.DecodeError:
                log.warning("claude printed invalid JSON: %s", line[:200])
                continue
            if isinstance(message, dict):
                await send_ready(self._messages_send, message)
        await proc.wait()
        await self._messages_send.send(None)  # EOF marker: the CLI is gone
        scope.cancel()

    async def _write(self, message: dict[str, Any] | bytes) -> None:
        proc = self.proc
        if proc is None:
            raise b.BackendError("claude is not running")
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        async with self._write_lock:
            try:
                await proc.write(data)
            except ProcessError as exc:
                self.healthy = False
                raise _failure_from_exit(proc, f"stopped accepting input ({exc})") from None

    async def _write_control(self, request: dict[str, Any]) -> str:
        self._request_seq += 1
        request_id = f"req_{self._request_seq}_threadline"
        await self._write({"type": "control_request", "request_id": request_id, "request": request})
        return request_id

    async def close(self) -> None:
        self._close_stdin.set()

    # -- turns -----------------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self._in_turn and not self._exited.is_set():
            await self._write_control({"subtype": "interrupt"})

    def stop_commands(self, since: float) -> None:
        """Kill the commands the CLI started since `since` (the engine calls this right after
        `interrupt`): its Bash tool runs each in a process group of its own."""
        if self.proc is not None and self._in_turn:
            self.proc.kill_escaped(since)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        proc = self.proc
        # Whatever arrived between turns belongs to no turn (but tells whether the CLI
        # refused to resume a conversation it never saved).
        exited = False
        while True:
            try:
                leftover = self._messages.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            if leftover is None:
                exited = True
                break
            self._check_resumable(leftover)
        if proc is None or self._exited.is_set() or proc.returncode is not None:
            self.healthy = False
            raise b.SessionLost("claude is not running")
        if exited:
            self.healthy = False
            lost = _failure_from_exit(proc, "exited between turns")
            raise b.SessionLost(lost.message, additional_details=lost.additional_details)
        mapper = ClaudeTurnMapper(cwd=self.settings.cwd, url=api_url(self.settings.env))
        self._in_turn = True
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        try:
            try:
                await self._write(_user_message(turn))
            except b.BackendError as exc:
                raise b.SessionLost(
                    exc.message, additional_details=exc.additional_details
                ) from None
            try:
                async with trio.open_nursery() as nursery:
                    pending: dict[str, trio.CancelScope] = {}
                    try:
                        return await self._consume(ctx, mapper, nursery, pending)
                    finally:
                        for scope in pending.values():
                            scope.cancel()
            except* b.SessionLost as lost:
                # (unwrapped from the nursery's group: the engine retries a lost session)
                raise lost.exceptions[0] from None
        finally:
            self._in_turn = False

    async def _consume(
        self,
        ctx: b.TurnContext,
        mapper: ClaudeTurnMapper,
        nursery: trio.Nursery,
        pending: dict[str, trio.CancelScope],
    ) -> b.TurnOutcome:
        assert self.proc is not None
        pending_tools: dict[str, str] = {}  # control request id -> tool_use_id
        interrupted = False
        while True:
            try:
                message = await receive_ready(self._messages)
            except trio.EndOfChannel:
                message = None
            if message is None:
                self.healthy = False
                raise _failure_from_exit(self.proc, "exited in the middle of a turn")
            mtype = message.get("type")
            if mtype == "result":
                self._check_resumable(message)
                result = mapper.result(message)
                return await _finish_turn(result, ctx, self._usage)
            if mtype == "control_request":
                request = message.get("request") or {}
                request_id = str(message.get("request_id"))
                if request.get("subtype") == "can_use_tool":
                    scope = trio.CancelScope()
                    pending[request_id] = scope
                    pending_tools[request_id] = str(request.get("tool_use_id") or request_id)
                    nursery.start_soon(
                        self._permission, ctx, mapper, request_id, request, scope, pending
                    )
                else:
                    await self._write(
                        {
                            "type": "control_response",
                            "response": {
                                "subtype": "error",
                                "request_id": request_id,
                                "error": f"threadline does not handle {request.get('subtype')}",
                            },
                        }
                    )
                continue
            if mtype == "control_cancel_request":
                withdrawn = str(message.get("request_id"))
                scope_to_cancel = pending.pop(withdrawn, None)
                if scope_to_cancel is not None:
                    scope_to_cancel.cancel()
                    # The CLI withdrew an unanswered approval (interrupt): the tool never ran.
                    # Record that now, synchronously: the synthetic is_error tool_result that
                    # follows must complete the item as `declined`, not `failed`, and the
                    # permission task may only notice its cancellation after that.
                    tool_id = pending_tools.get(withdrawn)
                    if tool_id is not None:
                        mapper.decisions.setdefault(tool_id, "cancel")
                continue
            if mtype == "control_response":
                continue
            if mtype == "system" and message.get("subtype") == "init":
                sid = message.get("session_id")
                if isinstance(sid, str):
                    # The transcript exists from now on: later spawns resume it.
                    await ctx.set_backend_session_id(sid)
                    self.settings.backend_session_id = sid
                    self.unsaved.discard(sid)
            for event in mapper.feed(message):
                await ctx.emit(event)
            if mapper.give_up is not None and not interrupted:
                # Its retries cannot help (see ClaudeTurnMapper.give_up): stop them; the
                # `result` that follows ends the turn with the mapper's error.
                interrupted = True
                await self._write_control({"subtype": "interrupt"})

    def _check_resumable(self, message: dict[str, Any]) -> None:
        """A `--resume` of a conversation the CLI never saved fails every time: remember the
        id (the next spawn starts it afresh) and end this session; the engine reopens it and
        runs the turn again, since nothing of it happened yet."""
        sid = _missing_session(message)
        if sid is not None:
            self.unsaved.add(sid)
            self.healthy = False
            raise b.SessionLost(f"claude has no saved conversation {sid}; starting it afresh")

    async def _permission(
        self,
        ctx: b.TurnContext,
        mapper: ClaudeTurnMapper,
        request_id: str,
        request: dict[str, Any],
        scope: trio.CancelScope,
        pending: dict[str, trio.CancelScope],
    ) -> None:
        tool = str(request.get("tool_name") or "tool")
        args = request.get("input") if isinstance(request.get("input"), dict) else {}
        assert isinstance(args, dict)
        tool_id = str(request.get("tool_use_id") or request_id)
        response: dict[str, Any] | None = None
        with scope:
            if tool == "AskUserQuestion":
                response = await self._ask_user(ctx, mapper, tool_id, args)
            else:
                response = await self._approve(ctx, mapper, tool, tool_id, args, request)
        pending.pop(request_id, None)
        if scope.cancelled_caught or response is None:
            return  # withdrawn by the CLI (control_cancel_request) or the turn ended
        await self._write(
            {
                "type": "control_response",
                "response": {"subtype": "success", "request_id": request_id, "response": response},
            }
        )

    async def _approve(
        self,
        ctx: b.TurnContext,
        mapper: ClaudeTurnMapper,
        tool: str,
        tool_id: str,
        args: dict[str, Any],
        request: dict[str, Any],
    ) -> dict[str, Any]:
        if tool_id not in mapper.tools:
            item = mapper.item_for_tool(tool_id, tool, args)
            mapper.tools[tool_id] = item
            await ctx.emit(b.ItemStarted(item))
        reason = (
            request.get("decision_reason") or request.get("title") or request.get("description")
        )
        if tool == "Bash":
            approval = b.ApprovalRequest(
                kind="command",
                item_id=tool_id,
                command=str(args.get("command", "")),
                cwd=self.settings.cwd,
                reason=str(reason) if reason else None,
            )
        elif tool in EDIT_TOOLS:
            approval = b.ApprovalRequest(
                kind="fileChange", item_id=tool_id, reason=str(reason) if reason else None
            )
        else:
            approval = b.ApprovalRequest(
                kind="tool",
                item_id=tool_id,
                tool=tool,
                arguments=args,
                reason=str(reason) if reason else None,
            )
        decision = await ctx.request_approval(approval)
        mapper.decisions[tool_id] = decision
        if decision == "accept":
            return {"behavior": "allow", "updatedInput": args}
        if decision == "acceptForSession":
            if tool == "Bash":
                update: dict[str, Any] = {
                    "type": "addRules",
                    "behavior": "allow",
                    "destination": "session",
                    "rules": [{"toolName": "Bash", "ruleContent": str(args.get("command", ""))}],
                }
            elif tool in EDIT_TOOLS:
                update = {"type": "setMode", "mode": "acceptEdits", "destination": "session"}
            else:
                update = {
                    "type": "addRules",
                    "behavior": "allow",
                    "destination": "session",
                    "rules": [{"toolName": tool}],
                }
            # destination "session" only: never write .claude/settings.local.json into the repo.
            return {"behavior": "allow", "updatedInput": args, "updatedPermissions": [update]}
        if decision == "cancel":
            return {"behavior": "deny", "message": _DECLINE_MESSAGE, "interrupt": True}
        return {"behavior": "deny", "message": _DECLINE_MESSAGE}

    async def _ask_user(
        self, ctx: b.TurnContext, mapper: ClaudeTurnMapper, tool_id: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        if tool_id not in mapper.tools:
            item = mapper.item_for_tool(tool_id, "AskUserQuestion", args)
            mapper.tools[tool_id] = item
            await ctx.emit(b.ItemStarted(item))
        raw_questions = [q for q in args.get("questions") or [] if isinstance(q, dict)]
        questions = []
        for i, q in enumerate(raw_questions):
            options = [
                ToolRequestUserInputOption(
                    label=str(o.get("label", "")), description=str(o.get("description", ""))
                )
                for o in q.get("options") or []
                if isinstance(o, dict)
            ]
            questions.append(
                ToolRequestUserInputQuestion(
                    id=f"q{i}",
                    header=str(q.get("header") or "Question"),
                    question=str(q.get("question", "")),
                    options=options or None,
                )
            )
        answers = await ctx.request_user_input(tool_id, questions)
        if answers is None:
            mapper.decisions[tool_id] = "decline"
            return {"behavior": "deny", "message": "The user did not answer."}
        mapped = {
            str(q.get("question", "")): ", ".join(answers.get(f"q{i}") or [])
            for i, q in enumerate(raw_questions)
        }
        return {"behavior": "allow", "updatedInput": {**args, "answers": mapped}}


# -- print mode ----------------------------------------------------------------------------------


class ClaudePrintSession(b.BackendSession):
    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        self.settings = settings
        self.binary = binary
        self._usage = _UsageTotals()
        self.unsaved = unsaved if unsaved is not None else set()

    def argv(self) -> list[str]:
        flags, _ = _session_flag(self.settings, self.unsaved)
        argv = [*_base_argv(self.settings, self.binary), "-p", *flags]
        if self.settings.approval_policy == "never":
            argv += _unattended_flags()
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper = ClaudeTurnMapper(cwd=self.settings.cwd, url=api_url(self.settings.env))
        prompt = f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        decoder = msgspec.json.Decoder()
        try:
            async with open_cli_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=_env(self.settings),
                stdin="pipe",
                name="claude -p",
            ) as proc:
                await proc.write(prompt.encode())
                await proc.close_stdin()
                while True:
                    try:
                        line = await proc.read_line()
                    except LineTooLong:
                        continue
                    if line is None:
                        break
                    try:
                        message = decoder.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if not isinstance(message, dict):
                        continue
                    if message.get("type") == "system" and message.get("subtype") == "init":
                        sid = message.get("session_id")
                        if isinstance(sid, str):
                            await ctx.set_backend_session_id(sid)
                            self.settings.backend_session_id = sid
                            self.unsaved.discard(sid)
                    if message.get("type") == "result":
                        missing = _missing_session(message)
                        if missing is not None:
                            # Never saved (an earlier turn was killed first): the engine runs
                            # the turn again, which starts the conversation afresh.
                            self.unsaved.add(missing)
                            raise b.SessionLost(
                                f"claude has no saved conversation {missing}; starting it afresh"
                            )
                        return await _finish_turn(mapper.result(message), ctx, self._usage)
                    for event in mapper.feed(message):
                        await ctx.emit(event)
                    if mapper.give_up is not None:
                        return b.TurnOutcome("failed", mapper.give_up)  # (stops the CLI)
                await proc.wait()
                raise _failure_from_exit(proc, "exited without a result")
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None


def _unattended_flags() -> list[str]:
    # The CLI refuses --dangerously-skip-permissions as root; there, pre-approve the tools.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return [
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Bash,Edit,Write,MultiEdit,NotebookEdit,WebFetch,WebSearch",
        ]
    return ["--dangerously-skip-permissions"]


# -- backend ---------------------------------------------------------------------------------------


class ClaudeBackend(b.Backend):
    honours_max_turns = True
    honours_allowed_tools = True

    def __init__(self) -> None:
        super().__init__(SPEC)
        #: Session ids recorded for a thread whose transcript the CLI never wrote (it was
        #: killed first): `--resume` of them fails, so they restart under the same id.
        self._unsaved: set[str] = set()

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == "print":
            yield ClaudePrintSession(settings, binary, self._unsaved)
            return
        session = ClaudeStreamSession(settings, binary, self._unsaved)
        async with trio.open_nursery() as nursery:
            await nursery.start(session.run_process)
            try:
                yield session
            finally:
                await session.close()

    def models(self) -> list[Model]:
        efforts = [
            ReasoningEffortOption(reasoning_effort=e, description=f"{e} effort")
            for e in ("low", "medium", "high")
        ]
        return [
            Model(
                id=f"claude/{m}",
                model=m,
                display_name=name,
                description=desc,
                hidden=False,
                is_default=m == "default",
                default_reasoning_effort="high",
                supported_reasoning_efforts=efforts,
            )
            for m, name, desc in (
                ("default", "Claude Code default", "The CLI's configured default model"),
                ("opus", "Claude Opus", "Alias resolved by the claude CLI"),
                ("sonnet", "Claude Sonnet", "Alias resolved by the claude CLI"),
                ("haiku", "Claude Haiku", "Alias resolved by the claude CLI"),
            )
        ]


def create() -> ClaudeBackend:
    return ClaudeBackend()
