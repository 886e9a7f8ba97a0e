"""Claude Code's stream mode: one live `claude -p --input-format stream-json` per thread, approvals
over its control protocol; settings changed live by control requests (`controls`), steering by
user messages written while a turn runs."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec
import trio

from ...channels import drain, receive_ready_or_none, send_ready
from ...procs.early import Eligible
from ...procs.group import GroupProcess, LineTooLong, ProcessError
from ...protocol import Model
from .. import base as b
from ..kit.spawn import LiveCliSession
from .approve import approve, ask_user
from .content import COMPACT, new_uuid, user_line, user_message
from .controls import INTERRUPT, Replies, Reply, live_request, taken_inputs
from .invocation import (
    ClaudeSession,
    _env,
    _failure_from_exit,
    _finish_turn,
)
from .mapping import ClaudeTurnMapper
from .mcp import failure_message, server_errors
from .models import claude_models
from .spec import SPEC

__all__ = ["ClaudeStreamSession"]

log = logging.getLogger("threadline.backend.claude")


class ClaudeStreamSession(ClaudeSession, LiveCliSession):
    process_name = "claude"
    # The CLI flushes its transcript after stdin EOF; give it a moment.
    exit_grace = 5.0
    # A fresh session's id is the CLI's to report (`system/init`, see `note_init`), so a
    # claude started early under another fresh id serves as well.
    early = Eligible(free=("--session-id=",), env_keys=("CLAUDECODE",))

    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        super().__init__(settings, binary, unsaved)
        self.proc: GroupProcess | None = None
        self._messages_send, self._messages = trio.open_memory_channel[dict[str, Any] | None](
            10_000
        )
        self._write_lock = trio.Lock()
        self._request_seq = 0
        self._in_turn = False
        self._replies = Replies()
        #: The models claude's `initialize` answer listed ([] until it came).
        self.models: list[Model] = []
        #: The running turn's user messages (its own, steers) claude has not taken in yet.
        self._queued: set[str] = set()
        self._main: str | None = None
        #: Set once claude reports what it does with a user message (`command_lifecycle`,
        #: which claude 2.1.197 did not have).
        self._lifecycle = trio.Event()
        #: threadline asked claude to stop the running turn.
        self._stopping = False
        self.exited = trio.Event()
        self.closing = trio.Event()

    # -- process ---------------------------------------------------------------------------------

    def argv(self) -> list[str]:
        return self.claude_argv(
            "--input-format", "stream-json", "--permission-prompt-tool", "stdio"
        )

    def process_env(self) -> dict[str, str]:
        return _env(self.settings)

    async def opened(self, proc: GroupProcess, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._read_stdout, proc, nursery.cancel_scope)
        request_id, reply = await self._send({"subtype": "initialize", "hooks": None})
        nursery.start_soon(self._initialized, request_id, reply)

    async def _initialized(self, request_id: str, reply: Reply) -> None:
        """Keep the models claude's `initialize` answer lists (`model/list`)."""
        with trio.move_on_after(60):
            await reply.arrived.wait()
        self._replies.forget(request_id)
        response = reply.response or {}
        if response.get("subtype") == "success":
            self.models = claude_models((response.get("response") or {}).get("models"))

    def ended(self) -> None:
        self._replies.close()
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
            if isinstance(message, dict) and not self._replies.deliver(message):
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

    def _request_id(self) -> str:
        self._request_seq += 1
        return f"req_{self._request_seq}_threadline"

    async def _write_control(self, request: dict[str, Any], request_id: str | None = None) -> str:
        request_id = request_id or self._request_id()
        await self._write({"type": "control_request", "request_id": request_id, "request": request})
        return request_id

    async def _send(self, request: dict[str, Any]) -> tuple[str, Reply]:
        """Send a control request whose answer is to come to the returned `Reply`."""
        request_id = self._request_id()
        reply = self._replies.expect(request_id)
        try:
            await self._write_control(request, request_id)
        except BaseException:
            self._replies.forget(request_id)
            raise
        return request_id, reply

    async def _ask(self, request: dict[str, Any], timeout: float = 10.0) -> dict[str, Any] | None:
        """Send a control request and wait for its answer; None when none came in time (or
        the CLI is gone)."""
        request_id, reply = await self._send(request)
        try:
            with trio.move_on_after(timeout):
                await reply.arrived.wait()
        finally:
            self._replies.forget(request_id)
        return reply.response

    # -- settings and input between and during turns ---------------------------------------------

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        left = set()
        for name in sorted(changed):
            if name == "approvalPolicy":
                continue  # the approval router applies the policy to each `can_use_tool`
            request = live_request(name, self.settings)
            response = None
            if request is not None and not self.exited.is_set():
                try:
                    response = await self._ask(request)
                except b.BackendError:
                    response = None
            if response is None or response.get("subtype") != "success":
                if response is not None:
                    log.warning("claude refused %s: %s", request, response.get("error"))
                left.add(name)
        return frozenset(left)

    async def steer(self, turn: b.TurnInput) -> None:
        """Write the input as a user message while the turn runs: claude takes it into the
        turn's next model request, or (when the model was giving its last answer) runs it
        right after as a turn of its own, which `_consume` makes part of this one."""
        content = await user_message(turn, self.settings.cwd)
        with trio.move_on_after(5):  # (the turn's own message may still be on its way)
            await self._lifecycle.wait()
        if not self._lifecycle.is_set():
            raise b.BackendError(
                "this claude does not report what it does with added input; update it"
                f" (`{SPEC.install_command}`)"
            )
        if not self._in_turn or self._stopping or self.exited.is_set():
            raise b.BackendError("the turn has ended; start a new turn instead")
        message_uuid = new_uuid()
        self._queued.add(message_uuid)  # (before any checkpoint: the turn waits for it)
        await self._write(user_line(content, message_uuid))

    async def compact(self, ctx: b.TurnContext) -> b.TurnOutcome | None:
        return await self._run(COMPACT, self.mapper(compacting=True), ctx)

    # -- turns -----------------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self._in_turn and not self.exited.is_set():
            self._stopping = True
            await self._write_control(INTERRUPT)

    def stop_commands(self, since: float) -> None:
        """Kill the commands the CLI started since `since` (the engine calls this right after
        `interrupt`): its Bash tool runs each in a process group of its own."""
        if self.proc is not None and self._in_turn:
            self.proc.kill_escaped(since)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        content = await user_message(turn, self.settings.cwd)
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        return await self._run(content, self.mapper(), ctx)

    async def _run(
        self, content: str | list[dict[str, Any]], mapper: ClaudeTurnMapper, ctx: b.TurnContext
    ) -> b.TurnOutcome | None:
        """Write one user message (a turn's, or `/compact`) and map what claude does until
        the turn's end."""
        proc = self.proc
        # Whatever arrived between turns belongs to no turn (but tells whether the CLI
        # refused to resume a conversation it never saved).
        leftovers, exited = drain(self._messages)
        for leftover in leftovers:
            self._check_resumable(leftover)
        if proc is None or self.exited.is_set() or proc.returncode is not None:
            self.healthy = False
            raise b.SessionLost("claude is not running")
        if exited:
            self.healthy = False
            lost = _failure_from_exit(proc, "exited between turns")
            raise b.SessionLost(lost.message, additional_details=lost.additional_details)
        self._in_turn, self._stopping = True, False
        self._main = new_uuid()
        self._queued = {self._main}
        try:
            try:
                await self._write(user_line(content, self._main))
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
            self._queued.clear()

    async def _consume(
        self,
        ctx: b.TurnContext,
        mapper: ClaudeTurnMapper,
        nursery: trio.Nursery,
        pending: dict[str, trio.CancelScope],
    ) -> b.TurnOutcome:
        assert self.proc is not None
        pending_tools: dict[str, str] = {}  # control request id -> tool_use_id
        failed: dict[str, list[str]] = {}  # our mcp_status request id -> failed servers
        first_failure: b.TurnOutcome | None = None
        while True:
            message = await receive_ready_or_none(self._messages)
            if message is None:
                self.healthy = False
                raise _failure_from_exit(self.proc, "exited in the middle of a turn")
            mtype = message.get("type")
            if mtype == "stream_event":
                # The hot path (P3): a part of the answer; it reports no input, no session,
                # no failure and no reason to give up.
                for event in mapper.feed(message):
                    await ctx.emit(event)
                continue
            if (dropped := await self._note_taken(message, ctx)) is not None:
                # claude dropped the turn's message before it ran (an interrupt while it
                # was queued): no `result` follows.
                if self._stopping:
                    return first_failure or b.TurnOutcome("interrupted")
                raise b.BackendError(f"claude did not run the turn's message ({dropped})")
            if mtype == "result":
                self._check_resumable(message)
                for names in failed.values():  # (no mcp_status answer in time: no reason)
                    await _warn_failed(ctx, names, {})
                failed.clear()
                outcome = await _finish_turn(mapper.result(message), ctx, self._usage)
                if self._lifecycle.is_set() and self._queued and not self._stopping:
                    # Input of this turn claude queued (a steer that came too late for the
                    # model's last call) runs next as a turn of its own: this turn's too.
                    if outcome.status == "failed":
                        first_failure = first_failure or outcome
                    continue
                return first_failure or outcome
            if mtype in ("control_request", "control_cancel_request"):
                await self._control(message, ctx, mapper, nursery, pending, pending_tools)
                continue
            if mtype == "control_response":
                response = message.get("response") or {}
                asked = failed.pop(str(response.get("request_id")), None)
                if asked is not None:
                    await _warn_failed(ctx, asked, server_errors(response.get("response")))
                continue
            await self.note_init(message, ctx)
            if new := self.new_failures(message):
                # The reason of each is only in claude's answer to `mcp_status`.
                failed[await self._write_control({"subtype": "mcp_status"})] = new
            for event in mapper.feed(message):
                await ctx.emit(event)
            if mapper.give_up is not None and not self._stopping:
                # Its retries cannot help (see ClaudeTurnMapper.give_up): stop them; the
                # `result` that follows ends the turn with the mapper's error.
                self._stopping = True
                await self._write_control(INTERRUPT)

    async def _control(
        self,
        message: dict[str, Any],
        ctx: b.TurnContext,
        mapper: ClaudeTurnMapper,
        nursery: trio.Nursery,
        pending: dict[str, trio.CancelScope],
        pending_tools: dict[str, str],
    ) -> None:
        """A control request of claude's (a tool's permission: asked in `nursery`), or its
        withdrawal."""
        request_id = str(message.get("request_id"))
        if message.get("type") == "control_request":
            request = message.get("request") or {}
            if request.get("subtype") == "can_use_tool":
                scope = trio.CancelScope()
                pending[request_id] = scope
                pending_tools[request_id] = str(request.get("tool_use_id") or request_id)
                nursery.start_soon(
                    self._permission, ctx, mapper, request_id, request, scope, pending
                )
            else:
                await self._refuse(request_id, request)
            return
        scope_to_cancel = pending.pop(request_id, None)
        if scope_to_cancel is not None:
            scope_to_cancel.cancel()
            # The CLI withdrew an unanswered approval (interrupt): the tool never ran. Record
            # that now, synchronously: the synthetic is_error tool_result that follows must
            # complete the item as `declined`, not `failed`, and the permission task may only
            # notice its cancellation after that.
            tool_id = pending_tools.get(request_id)
            if tool_id is not None:
                mapper.decisions.setdefault(tool_id, "cancel")

    async def _refuse(self, request_id: str, request: dict[str, Any]) -> None:
        """Answer a control request of claude's that threadline does not handle."""
        error = f"threadline does not handle {request.get('subtype')}"
        response = {"subtype": "error", "request_id": request_id, "error": error}
        await self._write({"type": "control_response", "response": response})

    async def _note_taken(self, message: dict[str, Any], ctx: b.TurnContext) -> str | None:
        """Forget the input `message` says claude took in, or dropped (a warning says so of a
        steer); the state, when it dropped the turn's own message before running it."""
        if message.get("type") == "command_lifecycle":
            self._lifecycle.set()
        if not self._queued:
            return None
        done, dropped = taken_inputs(message)
        self._queued -= done
        state = str(message.get("state"))
        for message_uuid in dropped & self._queued:
            self._queued.discard(message_uuid)
            if message_uuid == self._main:
                return state
            if not self._stopping:
                await ctx.emit(b.Warning(f"claude did not take the added input ({state})"))
        return None

    def _check_resumable(self, message: dict[str, Any]) -> None:
        try:
            super()._check_resumable(message)
        except b.SessionLost:
            self.healthy = False  # the live process cannot start the conversation afresh
            raise

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
        reason = (
            request.get("decision_reason") or request.get("title") or request.get("description")
        )
        return await approve(ctx, mapper, tool, tool_id, args, reason, self.settings.cwd)

    async def _ask_user(
        self, ctx: b.TurnContext, mapper: ClaudeTurnMapper, tool_id: str, args: dict[str, Any]
    ) -> dict[str, Any]:
        return await ask_user(ctx, mapper, tool_id, args)


async def _warn_failed(ctx: b.TurnContext, names: list[str], errors: dict[str, str]) -> None:
    for name in names:
        await ctx.emit(b.Warning(failure_message(name, errors.get(name))))
