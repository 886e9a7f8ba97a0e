"""One thread on one ACP session: prompts, updates, permissions, interrupts, the fs server."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import trio

from ....channels import receive_ready_or_none
from ....procs.group import processes_gone
from ....protocol import CommandExecutionItem, FileChangeItem, McpToolCallItem, TurnError
from ... import base as b
from ...registry import SPECS
from ..api_errors import no_credentials
from ..mcp import acp_servers, approval_name
from ..usage import UsageTotals
from .control import APPLIED_LIVE, SessionControl
from .host import AUTH_REQUIRED, AcpError, AcpHost, Prompt, error_info_for_code
from .inputs import input_blocks
from .mapper import AcpTurnMapper, McpCall, usage_from_prompt_result
from .offer import SessionOffer, agent_offers

__all__ = ["PROMPT_DONE", "AcpSession"]


log = logging.getLogger("threadline.backend.acp")

#: After `session/load`: the history replay is over once no update came for this long...
REPLAY_QUIET = 0.25
#: ... or after this long in all.
REPLAY_MAX = 10.0
#: How long a compaction waits for the agent to list its commands (after session/load).
COMMANDS_WAIT = 5.0
#: How long an interrupted prompt may stay unanswered when the turn context does not say
#: (the server's interrupt grace, `ServerConfig.interrupt_grace`).
DEFAULT_INTERRUPT_GRACE = 5.0
_POLL_FIRST = 0.001  # first poll period after an interrupt (doubles up to _POLL_MAX)
_POLL_MAX = 0.02


# -- the agent process ----------------------------------------------------------------------------


# -- mapping ACP session/update → events -----------------------------------------------------------


# -- one thread = one ACP session ---------------------------------------------------------------


#: Marks the end of a turn's updates in a session's update channel.
PROMPT_DONE: dict[str, Any] = {"sessionUpdate": "__threadline_prompt_done__"}
#: Marks the end of an interrupted turn that ends before the agent answered its prompt.
_EARLY_END: dict[str, Any] = {"sessionUpdate": "__threadline_early_end__"}


_PERMISSION_KIND = {
    "accept": "allow_once",
    "acceptForSession": "allow_always",
    "decline": "reject_once",
    "cancel": "reject_once",
}


#: Session updates about what the agent offers (`SessionOffer.update`), never a turn's.
_OFFER_UPDATES = ("available_commands_update", "config_option_update", "current_mode_update")
#: What the agent says while it compacts the conversation (its progress text): not shown.
_CHATTER = ("agent_message_chunk", "agent_thought_chunk")


class AcpSession(SessionControl, b.BackendSession):
    """A thread's ACP session on a (possibly shared) agent process."""

    #: Our approval decision → the ACP permission option kind answered. A backend whose agent
    #: grants more for `allow_always` than the user approved maps acceptForSession to
    #: `allow_once` instead (the approval router then remembers the exact grant itself).
    permission_kinds: dict[str, str] = _PERMISSION_KIND
    #: Whether the agent keeps the prompt of a failed or cancelled turn in its conversation.
    #: If not (Gemini), the session id is recorded for resume, and the role bootstrap counted
    #: as delivered, only once a turn finished (the next prompt carries the role again).
    keeps_unfinished_prompts: bool = True
    #: The slash command that compacts the conversation (`compact`), if the agent has one,
    #: and whether it is built in (else it must be in the agent's `available_commands`).
    compact_command: str | None = None
    compact_builtin: bool = False

    def __init__(self, host: AcpHost, settings: b.SessionSettings, backend_id: str) -> None:
        self.host = host
        self.settings = settings
        self.backend_id = backend_id
        self.session_id: str | None = None
        self._updates_send, self._updates = trio.open_memory_channel[dict[str, Any] | None](10_000)
        self._turn_ctx: b.TurnContext | None = None
        self._mapper: AcpTurnMapper | None = None
        self._permission_scopes: set[trio.CancelScope] = set()
        self._emit_lock = trio.Lock()
        self._usage = UsageTotals()
        #: The last prompt sent on this session (possibly still unanswered).
        self._prompt: Prompt | None = None
        # The running turn's interrupt: set once session/cancel went out, and when.
        self._interrupted = trio.Event()
        self._interrupted_at = 0.0
        self._grace = DEFAULT_INTERRUPT_GRACE
        self._permissions_active = 0  # permission requests being decided
        self._stopped: dict[int, int] = {}  # commands `stop_commands` killed (pid -> start)
        #: Set by the backend: called before `session/load` (Gemini's same-minute bug).
        self.before_load: Callable[[str], Any] | None = None
        #: The running turn's error once the agent's retries cannot help (`give_up`).
        self.gave_up: TurnError | None = None
        self.offer = SessionOffer()
        self.notes: list[str] = []
        self._blocks: list[dict[str, Any]] = []  # the turn's images, mentions, skills
        self._compacting = False
        self._commands_listed = trio.Event()  # the agent listed its slash commands

    @property
    def ignores_updates(self) -> bool:
        """True from the moment a turn ended without its prompt's answer until the next
        prompt: whatever the agent still sends for the session belongs to no turn."""
        return self._prompt is not None and self._prompt.detached

    @property
    def in_turn(self) -> bool:
        return self._turn_ctx is not None

    # host callbacks (run in the host's reader task: never block)

    def on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind in _OFFER_UPDATES:
            self.offer.update(update)
            if kind == "available_commands_update":
                self._commands_listed.set()
            return
        if self._compacting and kind in _CHATTER:
            return
        try:
            self._updates_send.send_nowait(update)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.warning("dropping an ACP update for session %s", self.session_id)

    def host_died(self) -> None:
        self.healthy = False
        with suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self._updates_send.send_nowait(None)

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            return await self._permission(params)
        if method == "fs/read_text_file":
            path = self._confined(params.get("path"))
            try:
                content = await trio.Path(path).read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                raise AcpError(-32002, f"Resource not found: {path}") from None
            except OSError as exc:
                raise AcpError(-32603, f"cannot read {path}: {exc}") from None
            line, limit = params.get("line"), params.get("limit")
            if isinstance(line, int) or isinstance(limit, int):
                lines = content.splitlines(keepends=True)
                start = max(0, (line or 1) - 1)
                content = "".join(lines[start : start + limit if isinstance(limit, int) else None])
            return {"content": content}
        if method == "fs/write_text_file":
            if self._turn_ctx is None:
                # Writes belong to a prompt turn the user started; none runs now.
                raise AcpError(-32603, "no turn is running: threadline refuses the write")
            path = self._confined(params.get("path"))
            try:
                await trio.Path(path).write_text(str(params.get("content", "")), encoding="utf-8")
            except OSError as exc:
                raise AcpError(-32603, f"cannot write {path}: {exc}") from None
            return None
        raise AcpError(-32601, f"threadline does not implement {method}")

    def _confined(self, raw: Any) -> str:
        if not isinstance(raw, str) or not raw:
            raise AcpError(-32602, "path is required")
        cwd = os.path.realpath(self.settings.cwd)
        path = os.path.realpath(raw if os.path.isabs(raw) else os.path.join(cwd, raw))
        if os.path.commonpath([path, cwd]) != cwd:
            raise AcpError(-32602, f"path outside the thread's working directory: {raw}")
        return path

    async def _permission(self, params: dict[str, Any]) -> dict[str, Any]:
        ctx, mapper = self._turn_ctx, self._mapper
        if ctx is None or mapper is None or mapper.cancelled:
            # No turn, or it is being interrupted: the tool must not run, nobody is asked.
            return {"outcome": {"outcome": "cancelled"}}
        self._permissions_active += 1
        try:
            return await self._ask_permission(ctx, mapper, params)
        finally:
            self._permissions_active -= 1

    async def _ask_permission(
        self, ctx: b.TurnContext, mapper: AcpTurnMapper, params: dict[str, Any]
    ) -> dict[str, Any]:
        options = [o for o in params.get("options") or [] if isinstance(o, dict)]
        call = params.get("toolCall") if isinstance(params.get("toolCall"), dict) else {}
        assert isinstance(call, dict)
        if mapper.is_hidden(call):
            # One of threadline's own tools: the client answers the call itself, unasked here.
            once = next((o for o in options if o.get("kind") == "allow_once"), None)
            if once is None:
                return {"outcome": {"outcome": "cancelled"}}
            return {"outcome": {"outcome": "selected", "optionId": once.get("optionId")}}
        # Flush pending text first, then announce the tool item (Gemini sends no tool_call
        # before asking).
        await self._drain_now(ctx, mapper)
        mapper.close_text()  # the text before the tool is done (as a tool_call would close it)
        item = mapper.start_tool(call)
        await self._emit(ctx, mapper)
        if isinstance(item, CommandExecutionItem):
            request = b.ApprovalRequest(
                kind="command",
                item_id=item.id,
                command=item.command,
                cwd=item.cwd,
                command_actions=item.command_actions,
                reason=str(call.get("title") or "") or None,
            )
        elif isinstance(item, FileChangeItem):
            request = b.ApprovalRequest(
                kind="fileChange", item_id=item.id, reason=str(call.get("title") or "") or None
            )
        elif isinstance(item, McpToolCallItem):
            request = b.ApprovalRequest(
                kind="tool",
                item_id=item.id,
                tool=approval_name(item.server, item.tool),
                arguments=item.arguments,
                reason=f"MCP server {item.server}: tool {item.tool}",
            )
        else:
            request = b.ApprovalRequest(
                kind="tool",
                item_id=item.id,
                tool=str(call.get("title") or call.get("kind") or "tool"),
                arguments=call.get("rawInput"),
            )
        scope = trio.CancelScope()
        self._permission_scopes.add(scope)
        decision: b.ApprovalDecision = "decline"
        try:
            with scope:
                decision = await ctx.request_approval(request)
        finally:
            self._permission_scopes.discard(scope)
        wanted = self.permission_kinds[decision]
        chosen = next((o for o in options if o.get("kind") == wanted), None)
        if chosen is None and wanted == "allow_always":
            chosen = next((o for o in options if o.get("kind") == "allow_once"), None)
        if scope.cancelled_caught or decision in ("decline", "cancel"):
            # Gemini sends no update for a rejected tool: close the item ourselves.
            mapper.declined.add(item.id)
            mapper.complete_tool(item.id, failed=False, declined=True)
            await self._emit(ctx, mapper)
        if scope.cancelled_caught or chosen is None:
            # Interrupted while waiting (the turn is being cancelled): the tool never ran.
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": chosen.get("optionId")}}

    async def _emit(self, ctx: b.TurnContext, mapper: AcpTurnMapper) -> None:
        # The turn loop and a permission request (another task) both feed the mapper and emit:
        # events are taken under the lock, so they go out in the order the mapper made them
        # (else a message closed by the permission could overtake its last delta).
        async with self._emit_lock:
            for event in mapper.take():
                await ctx.emit(event)

    async def _drain_now(self, ctx: b.TurnContext, mapper: AcpTurnMapper) -> None:
        while True:
            try:
                update = self._updates.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            if update is None or update is PROMPT_DONE or update is _EARLY_END:
                # The turn loop must see these (end of the turn / agent gone): put it back
                # (it is the last thing in the channel either way).
                if update is None:
                    self.host_died()
                elif update is _EARLY_END:
                    with suppress(trio.WouldBlock, trio.ClosedResourceError):
                        self._updates_send.send_nowait(update)
                else:
                    self.on_update(update)
                break
            mapper.feed(update)
        await self._emit(ctx, mapper)

    # lifecycle

    async def open(self) -> None:
        try:
            self.offer.read(await self._open_session())
        except AcpError as exc:
            if self.session_id:
                self.host.sessions.pop(self.session_id, None)
            if exc.code == AUTH_REQUIRED:
                error = no_credentials(SPECS[self.backend_id], exc.message)
                raise b.BackendError.of(error) from None
            raise b.BackendError(
                f"{self.backend_id} could not open the session: {exc.message}"
                + (f" ({exc.data})" if exc.data else ""),
                codex_error_info="other",
            ) from None
        await self.configure()

    async def _open_session(self) -> Any:
        """Load the thread's session, fork it from `fork_of`, or create it: the answer."""
        params = {"cwd": self.settings.cwd, "mcpServers": acp_servers(self.settings.mcp_servers)}
        sid = self.settings.backend_session_id
        if sid:
            if self.before_load is not None:
                await self.before_load(sid)
            self.host.sessions[sid] = self
            self.session_id = sid
            result = await self.host.request("session/load", {**params, "sessionId": sid}, 120)
            await self._skip_replay()
            return result
        source = self.settings.fork_of
        if source and not agent_offers(self.host.init_result, "sessionCapabilities", "fork"):
            raise b.BackendError(
                f"{self.backend_id} cannot fork a session (its ACP agent does not offer"
                " session/fork)",
                codex_error_info="other",
            )
        if source:
            result = await self.host.request("session/fork", {**params, "sessionId": source}, 120)
        else:
            result = await self.host.request("session/new", params, timeout=120)
        result = result if isinstance(result, dict) else {}
        self.session_id = str(result.get("sessionId"))
        self.host.sessions[self.session_id] = self
        if not source:
            self.created(result)
            if self.host.defaults is None:
                self.host.defaults = SessionOffer()
                self.host.defaults.read(result)
        return result

    async def configure(self) -> None:
        """After the session opened: the thread's model, approval mode and effort."""
        await self.apply_overrides(APPLIED_LIVE, opening=True)

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        if self.session_id is None or not self.host.alive:
            return changed
        return await self.apply_overrides(changed, opening=False)

    async def compact(self, ctx: b.TurnContext) -> b.TurnOutcome | None:
        """The agent's compaction command (`compact_command`) as a prompt."""
        command = self.compact_command
        if command is not None and not self.compact_builtin:
            # (The agent lists its commands a moment after it opened the session.)
            with trio.move_on_after(COMMANDS_WAIT):
                await self._commands_listed.wait()
        if command is None or not (self.compact_builtin or command in self.offer.commands):
            raise b.BackendError(
                f"{self.backend_id} offers no command to compact its conversation",
                codex_error_info="other",
            )
        self._compacting = True
        try:
            text = "/" + command
            return await self.run_turn(b.TurnInput(ctx.turn_id, [], text), ctx)
        finally:
            self._compacting = False

    def mcp_call(self, call: dict[str, Any]) -> McpCall | None:
        """Backend hook: the MCP server and tool an ACP tool call (a `tool_call`, its update or
        a permission request's `toolCall`) calls, or None when it is not an MCP tool's call. The
        mapper then shows an `mcpToolCall` item, or none for threadline's own tools."""
        return None

    def prompt_content(self, turn: b.TurnInput) -> list[dict[str, Any]]:
        """Backend hook: the ACP content blocks of the turn's prompt (the role bootstrap, when
        due, goes ahead of them): its text, then its images, mentions and skills."""
        return [{"type": "text", "text": turn.text}, *self._blocks]

    def created(self, result: dict[str, Any]) -> None:
        """Backend hook: the agent's answer to `session/new`."""

    async def watch_model_api(self, mapper: AcpTurnMapper) -> None:
        """Backend hook, run alongside each turn: call `give_up` when the agent retries a model
        API that cannot be reached (for agents that do not say so themselves)."""

    def give_up(self, error: TurnError) -> None:
        """End the running turn as failed with `error` (the agent keeps retrying what cannot
        succeed): its prompt is cancelled. Callable from a task of the host (not blocking)."""
        if self._turn_ctx is None or self.gave_up is not None:
            return
        self.gave_up = error
        with suppress(b.BackendError):
            self.host.start_soon(self.interrupt)

    async def _skip_replay(self) -> None:
        """Drop the history replay of a `session/load`. Gemini streams it *after* its answer
        (not awaited: reference §7.1, transcript f8), so a prompt sent at once would take the
        replayed messages for its own answer. The replay is written back to back: it is over
        once no update came for `REPLAY_QUIET` s (bounded by `REPLAY_MAX`)."""
        with trio.move_on_after(REPLAY_MAX):
            while True:
                with trio.move_on_after(REPLAY_QUIET) as quiet:
                    update = await self._updates.receive()
                if quiet.cancelled_caught or update is None:
                    return

    def _discard_updates(self) -> None:
        while True:
            try:
                self._updates.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return

    def close(self) -> None:
        if self.session_id is not None:
            self.host.sessions.pop(self.session_id, None)
        self._updates_send.close()

    @asynccontextmanager
    async def opened(self) -> AsyncIterator[AcpSession]:
        """The session, opened on its agent; closed on exit."""
        await self.open()
        try:
            yield self
        finally:
            self.close()

    async def interrupt(self) -> None:
        interrupted_at = trio.current_time()
        if self._mapper is not None:
            self._mapper.cancelled = True
        for scope in list(self._permission_scopes):
            scope.cancel()  # answers the pending permission request with "cancelled"
        if self.session_id is not None and self.host.alive:
            await self.host.notify("session/cancel", {"sessionId": self.session_id})
        if self._turn_ctx is not None and not self._interrupted.is_set():
            self._interrupted_at = interrupted_at
            self._interrupted.set()  # the turn may now end without the agent's answer

    def stop_commands(self, since: float) -> None:
        """Kill the commands the agent started since `since` (the engine calls this right
        after `interrupt`): ACP agents run their shell tool in a process group of its own.
        Not while another session on the same agent process runs a turn: its commands could
        not be told apart from ours (the interrupted turn then waits for the agent's answer)."""
        proc = self.host.proc
        if proc is None or self._turn_ctx is None:
            return
        if any(s is not self and s.in_turn for s in self.host.sessions.values()):
            return
        self._stopped.update(proc.kill_escaped(since))

    async def _await_previous_prompt(self) -> None:
        """Wait until the agent answered this session's last prompt (an interrupted turn may
        have ended without it): a new prompt must not overlap it (Gemini aborts a running
        prompt for a new one, and the old one's late updates would land in the new turn). The
        wait is bounded by the old prompt's deadline; an agent that did not answer by then was
        retired, and the engine reopens the session on a new one."""
        if self.session_id is None:
            return
        busy = self.host.prompts.get(self.session_id)
        if busy is not None:
            await busy.done.wait()
        last = self._prompt
        if last is not None and last.detached and not last.answered:
            self.healthy = False
            raise b.SessionLost(
                f"{self.host.name} did not answer an interrupted prompt in time; "
                "restarting the session"
            )

    def _may_end_early(self, prompt: Prompt, mapper: AcpTurnMapper) -> bool:
        """Whether the interrupted turn can end before the agent answers its prompt: no
        permission request is being decided, everything the agent sent so far went through
        the mapper, no tool of the turn may still be doing something (a command only if the
        engine's `stop_commands` killed it and its processes are gone)."""
        if prompt.done.is_set() or self._permissions_active or self.holds_tool_calls():
            return False
        if self._updates.statistics().current_buffer_used:
            return False  # updates the turn has not seen yet (a command just started?)
        running = [item for cid, item in mapper.tools.items() if cid not in mapper.declined]
        if any(not isinstance(item, CommandExecutionItem) for item in running):
            return False  # an edit or another tool: its effect is the agent's to finish
        if self._stopped and not processes_gone(self._stopped):
            return False
        return not running or bool(self._stopped)

    def holds_tool_calls(self) -> bool:
        """Whether tool calls the agent announced are held back from the mapper (OpenCode)."""
        return False

    async def _end_early(self, prompt: Prompt, mapper: AcpTurnMapper) -> None:
        """Once the turn is interrupted, end it as soon as `_may_end_early` allows (the
        agent's answer to the cancelled prompt is then consumed in the background)."""
        await self._interrupted.wait()
        delay = _POLL_FIRST
        while not prompt.done.is_set():
            if self._may_end_early(prompt, mapper):
                try:
                    self._updates_send.send_nowait(_EARLY_END)
                except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    return  # (the turn then waits for the answer, as before)
                # From here on nothing for this session reaches the channel: _EARLY_END is last.
                prompt.detached = True
                prompt.scope.deadline = self._interrupted_at + self._grace
                return
            await trio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    async def _run_prompt(self, prompt: Prompt, params: dict[str, Any]) -> None:
        """The `session/prompt` request (in the host task; see `Prompt`)."""
        try:
            with prompt.scope:
                try:
                    prompt.result = await self.host.request("session/prompt", params)
                    prompt.answered = True
                except AcpError as exc:
                    prompt.error, prompt.answered = exc, True
                except b.BackendError as exc:
                    prompt.failure = exc
            if prompt.scope.cancelled_caught and not prompt.abandoned:
                # Detached, and unanswered by its deadline: treat the agent as hung.
                log.warning(
                    "%s did not answer the interrupted prompt of session %s in time; retiring it",
                    self.host.name,
                    prompt.session_id,
                )
                prompt.abandoned = True
                await self._abandon()
        finally:
            prompt.done.set()
            if self.host.prompts.get(prompt.session_id) is prompt:
                del self.host.prompts[prompt.session_id]
            if not prompt.detached:
                # Queued after every update the agent sent before its answer.
                self.on_update(PROMPT_DONE)
            elif prompt.answered:
                result = prompt.result if isinstance(prompt.result, dict) else {}
                log.debug(
                    "%s answered the interrupted prompt of session %s late: %s",
                    self.host.name,
                    prompt.session_id,
                    result.get("stopReason") or prompt.error,
                )
                usage = usage_from_prompt_result(result)
                if usage is not None:
                    self._usage.add(usage)  # (counted in the thread's total from now on)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self.gave_up = None
        images = agent_offers(self.host.init_result, "promptCapabilities", "image")
        self._blocks, warnings = await input_blocks(turn.input, self.settings.cwd, images=images)
        for text in [*self.notes, *warnings]:
            await ctx.emit(b.Warning(text))
        self.notes.clear()
        outcome = await self._prompt_turn(turn, ctx)
        if self.gave_up is not None:
            return b.TurnOutcome("failed", self.gave_up)
        return outcome

    async def _prompt_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        mapper, prompt = await self._begin_turn(turn, ctx)
        assert self.session_id is not None
        request = Prompt(self.session_id)
        finished = ended_early = False
        try:
            self.host.start_soon(
                self._run_prompt, request, {"sessionId": self.session_id, "prompt": prompt}
            )
            self._prompt = request
            self.host.prompts[self.session_id] = request
            ended_early = await self._follow_prompt(request, mapper, ctx)
            finished = True
        finally:
            self._turn_ctx, self._mapper = None, None
            if not finished and not request.done.is_set():
                request.detached = request.abandoned = True
                request.scope.cancel()
                await self._abandon()
        mapper.close_text()
        for call_id in list(mapper.tools):
            if call_id in mapper.declined:
                mapper.complete_tool(call_id, failed=False, declined=True)
        await self._emit(ctx, mapper)
        if ended_early:
            # Interrupted, and nothing of the turn is left running: done, without the agent's
            # answer (consumed in the background; the session is busy until it comes).
            await self._record_conversation(turn, ctx, mapper.tool_seen)
            return b.TurnOutcome("interrupted")
        return await self._outcome(request, turn, ctx, mapper)

    async def _begin_turn(
        self, turn: b.TurnInput, ctx: b.TurnContext
    ) -> tuple[AcpTurnMapper, list[dict[str, Any]]]:
        """Wait for the session to be free, set the turn up; its mapper and prompt blocks."""
        if self.session_id is None or not self.host.alive:
            raise self.host.failure("is not running")
        await self._await_previous_prompt()
        if not self.host.alive:
            raise self.host.failure("is not running")
        self._discard_updates()
        if self.keeps_unfinished_prompts:
            await ctx.set_backend_session_id(self.session_id)
        mapper = AcpTurnMapper(
            cwd=self.settings.cwd,
            backend_id=self.backend_id,
            new_id=ctx.new_item_id,
            mcp_call=self.mcp_call,
        )
        self._turn_ctx, self._mapper = ctx, mapper
        self._interrupted = trio.Event()
        self._stopped = {}
        grace = getattr(ctx, "interrupt_grace", None)
        self._grace = grace if isinstance(grace, (int, float)) else DEFAULT_INTERRUPT_GRACE
        prompt = self.prompt_content(turn)
        if turn.bootstrap:
            # The role goes in once, as its own block ahead of the first prompt.
            prompt.insert(0, {"type": "text", "text": turn.bootstrap})
            if self.keeps_unfinished_prompts:
                await ctx.mark_role_bootstrap_applied()
        return mapper, prompt

    async def _follow_prompt(
        self, request: Prompt, mapper: AcpTurnMapper, ctx: b.TurnContext
    ) -> bool:
        """Map the session's updates until the prompt is answered (False) or the turn may end
        early after an interrupt (True)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._end_early, request, mapper)
            nursery.start_soon(self.watch_model_api, mapper)
            while True:
                update = await receive_ready_or_none(self._updates)
                if update is None:
                    self.healthy = False
                    raise self.host.failure("exited in the middle of a turn")
                if update is PROMPT_DONE or update is _EARLY_END:
                    nursery.cancel_scope.cancel()
                    return update is _EARLY_END
                mapper.feed(update)
                await self._emit(ctx, mapper)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _record_conversation(
        self, turn: b.TurnInput, ctx: b.TurnContext, in_conversation: bool
    ) -> None:
        """For an agent that drops unfinished prompts: once the turn is in the agent's
        conversation, the session can be resumed and the role went in with it."""
        if not self.keeps_unfinished_prompts and in_conversation:
            assert self.session_id is not None
            await ctx.set_backend_session_id(self.session_id)
            if turn.bootstrap:
                await ctx.mark_role_bootstrap_applied()

    async def _outcome(
        self, request: Prompt, turn: b.TurnInput, ctx: b.TurnContext, mapper: AcpTurnMapper
    ) -> b.TurnOutcome:
        """The turn's end, from the agent's answer to its prompt."""
        if request.failure is not None:
            raise request.failure
        error = request.error
        result: dict[str, Any] = request.result if isinstance(request.result, dict) else {}
        stop = result.get("stopReason")
        # (Gemini keeps an unfinished turn once the model's answer was complete, i.e. it
        # called a tool.)
        finished = error is None and stop != "cancelled"
        await self._record_conversation(turn, ctx, finished or mapper.tool_seen)
        if error is not None:
            if mapper.cancelled:
                # We had sent session/cancel: the user asked to stop, and that is what happened.
                # (OpenCode 1.18.33 answers a prompt cancelled as it starts with "Internal
                # service failure"; found by the fault matrix: turn/cancel right after
                # turn/start ended `failed`.)
                return b.TurnOutcome("interrupted")
            return b.TurnOutcome("failed", self.turn_error(error))
        usage = usage_from_prompt_result(result)
        if usage is not None:
            await ctx.emit(b.TokenUsageUpdated(self._usage.add(usage)))
        if stop == "cancelled":
            return b.TurnOutcome("interrupted")
        if stop == "refusal":
            return b.TurnOutcome(
                "failed",
                TurnError(
                    message=f"{self.backend_id} refused the request", codex_error_info="other"
                ),
            )
        if stop in ("max_tokens", "max_turn_requests"):
            await ctx.emit(b.Warning(f"{self.backend_id} stopped early: {stop}"))
        return b.TurnOutcome("completed")

    async def _abandon(self) -> None:
        """The turn ended (timeout, hard cancel, shutdown) while the agent had not answered
        its prompt. Ask it to stop (best effort), and retire the agent: a wedged agent would
        otherwise be reused by every later session in this cwd and hang them all (found by the
        fault matrix: a hung agent failed every later turn with "Query timed out")."""
        self.healthy = False
        self.host.retired = True
        if self.session_id is not None and self.host.alive:
            with trio.CancelScope(shield=True), trio.move_on_after(1), suppress(b.BackendError):
                await self.host.notify("session/cancel", {"sessionId": self.session_id})

    def turn_error(self, error: AcpError) -> TurnError:
        """The failed turn's error for a `session/prompt` error answer (backends override it to
        make their agent's error text readable)."""
        detail = error.data
        if isinstance(detail, dict):
            detail = detail.get("details") or detail.get("message")
        return TurnError(
            message=error.message + (f": {detail}" if detail else ""),
            codex_error_info=error_info_for_code(error.code, error.message),
        )
