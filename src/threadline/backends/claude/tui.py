"""Claude Code's tui mode: the real interactive claude in a tmux session threadline owns
(kit/tmux.py), driven and observed through the protocol.

Where each part of a turn comes from (claude 2.1.332):
- input: `turn/start` pastes the prompt (bracketed paste; the role bootstrap first, once) and
  presses Enter; the turn begins at the `UserPromptSubmit` hook (tui_hooks.py), which also
  names the prompt (`prompt_id`), the session and its transcript. A prompt a person types in
  the tmux session is a turn of its own (`wait_outside_turn`).
- items: the session transcript (transcript.py): agent messages, reasoning, tool calls and
  results; a tool call's item starts at its `PreToolUse` hook when that comes first.
- approvals: the `PermissionRequest` hook (only where claude would ask a person; it runs with
  `--permission-mode default` unless the thread's config names another), answered through
  threadline's approval router, fail closed (no answer, an error, the session gone: deny);
  `AskUserQuestion` asks the client's user input instead. Should the hook itself fail (an
  HTTP error), claude shows its own permission dialog in the pane: nothing runs unasked.
- the end: `Stop` once the transcript holds the message it names (it can come first: in 4 of
  6 measured turns threadline had not read that line yet), `StopFailure` once it holds the
  API error; an interrupt (Escape, claude's own key, sent once per turn) ends the turn at its
  "[Request interrupted by user]" line, or `_INTERRUPT_GRACE` s after the key at most; no
  hook fires for an interrupt. A refused or unreachable API: claude's debug log
  (tui_debug.py) has each failed attempt it retries; the turn gives up as stream mode does and
  Escape stops the retries.
Coarser than stream mode: each message and reasoning block arrives whole (one delta), tool
output only with the result, token usage once at the end, no images, no steering, no live
model change (a changed setting restarts claude with `--resume`).
The interface is ready for input once claude switched the pane to the alternate screen
(tmux's `alternate_on`); the only screen text threadline reads is an error's last screen.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ... import protocol as p
from .. import base as b
from ..kit.file_tail import JsonLineTail
from ..kit.hook_http import new_token, serve_hooks
from ..kit.tmux import TmuxPane, open_tmux_pane
from ..kit.tui_turns import PaneTurns
from .approve import approve, ask_user
from .content import _references
from .invocation import _NO_CONVERSATION, ClaudeSession, _env, _session_flag, effort_level
from .mapping import error_info_for_status
from .mcp import mcp_config, server_rules
from .transcript import TranscriptMapper
from .tui_debug import ApiAttempt, DebugTail
from .tui_hooks import TOKEN_VARIABLE, Entry, Hook, HookReply, hook_settings
from .tui_setup import prepare_config

__all__ = ["ClaudeTuiSession", "open_claude_tui"]

log = logging.getLogger("threadline.backend.claude")

_READY_TIMEOUT = 30.0
#: How long a pasted prompt may take to reach claude (Enter is pressed again after
#: `_ENTER_AGAIN` s, `_ENTER_PRESSES` times in all: one pressed while the interface was
#: still settling can be lost, measured once in 16 turns of 4 claudes starting at once on 2
#: cores; on an empty input Enter does nothing).
_SUBMIT_TIMEOUT = 30.0
_ENTER_AGAIN = 2.0
_ENTER_PRESSES = 3
#: After `Stop`, how long the transcript may take to show the turn's last message.
_STOP_GRACE = 5.0
_INTERRUPT_GRACE = 3.0
#: How much earlier than the turn's start a failed API attempt may be logged and still count.
_CLOCK_SLACK = 1.0
_POLL = 0.05
#: How often a session waiting for a person's prompt checks that claude still runs.
_ALIVE_CHECK = 1.0

_Event = Hook | Entry | ApiAttempt
#: Tools whose calls are not items of their own (a plan update; a question for the person).
_NO_ITEM = ("TodoWrite", "AskUserQuestion")


def _flags(settings: b.SessionSettings) -> list[str]:
    """The thread's settings as claude's interactive flags."""
    argv = []
    if settings.model and settings.model != "default":
        argv += ["--model", settings.model]
    if effort := effort_level(settings.effort):
        argv += ["--effort", effort]
    config, _ = mcp_config(settings.mcp_servers)
    if config is not None:
        argv += ["--mcp-config", config]
    rules = [
        *(settings.allowed_tools or ()),
        *server_rules(settings.mcp_servers, all_servers=False),
    ]
    if rules:
        argv += ["--allowedTools", ",".join(dict.fromkeys(rules))]
    mode = settings.config.get("permissionMode")
    argv += ["--permission-mode", mode if isinstance(mode, str) and mode else "default"]
    if settings.role_prompt:
        argv += ["--append-system-prompt", settings.role_prompt]
    return argv


def prompt_text(turn: b.TurnInput) -> str:
    """What is pasted: the role bootstrap (first turn), the text, the file references."""
    return "\n\n".join(t for t in (turn.bootstrap, turn.text, _references(turn)) if t)


class ClaudeTuiSession(PaneTurns, ClaudeSession):
    cli_name = "claude"

    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        super().__init__(settings, binary, unsaved)
        self.token = new_token()
        self.init_pane_turns()
        self._send, self._events = trio.open_memory_channel[_Event](10_000)
        self._replies: set[HookReply] = set()
        self._tail = JsonLineTail()
        #: claude's debug log (its failed API attempts), in a private directory of the session.
        self._debug: DebugTail | None = None
        #: When the running turn began (epoch seconds: the debug log's clock).
        self._turn_began = 0.0
        #: The running turn's mapper, and its tool calls waiting for a decision.
        self._mapper: TranscriptMapper | None = None
        self._asking: set[str] = set()
        self.closed = False

    # -- process ---------------------------------------------------------------------------------

    def argv(self, port: int, directory: str) -> list[str]:
        flags, _ = _session_flag(self.settings, self.unsaved)
        url = f"http://127.0.0.1:{port}/hook"
        self._debug = DebugTail(os.path.join(directory, "debug.log"))
        debug = ["--debug-file", self._debug.path]
        return [
            self.binary,
            *_flags(self.settings),
            "--settings",
            hook_settings(url),
            *debug,
            *flags,
        ]

    def env(self) -> dict[str, str]:
        return {**_env(self.settings), TOKEN_VARIABLE: self.token}

    async def hook(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A hook request (authenticated): queued for the turn; a permission waits for its
        decision."""
        path = payload.get("transcript_path")
        if isinstance(path, str) and path.endswith(".jsonl"):
            self._tail.follow(path)
        if self.closed:
            return HookReply().answer() if name == "PermissionRequest" else {}
        if name != "PermissionRequest":
            await self._send.send(Hook(name, payload))
            return {}
        reply = HookReply()
        self._replies.add(reply)
        try:
            await self._send.send(Hook(name, payload, reply))
            await reply.done.wait()
        finally:
            self._replies.discard(reply)
        return reply.answer()

    async def follow_transcript(self) -> None:
        """The transcript's new lines and the debug log's failed API attempts, as events."""
        while True:
            for entry in self._tail.read():
                await self._send.send(Entry(entry))
            for attempt in self._debug.read() if self._debug is not None else ():
                await self._send.send(attempt)
            await trio.sleep(_POLL)

    async def wait_ready(self, pane: TmuxPane) -> None:
        """Until claude's interface takes input (BackendError with its last screen if it
        ends or does not come up; SessionLost when it has no saved conversation to resume,
        which then starts afresh under the same id)."""
        with trio.move_on_after(_READY_TIMEOUT):
            while pane.alive:
                if await pane.flag("alternate_on") == "1":
                    return
                await trio.sleep(_POLL)
        failure = await self._failure(pane, "did not come up")
        sid = self.settings.backend_session_id
        if sid and _NO_CONVERSATION in failure.message:
            self.unsaved.add(sid)
            raise b.SessionLost(f"claude has no saved conversation {sid}; starting it afresh")
        raise failure

    def close(self) -> None:
        """Every permission still waiting is denied (fail closed)."""
        self.closed = True
        for reply in list(self._replies):
            reply.deny()

    # -- turns -----------------------------------------------------------------------------------

    def _drop(self, event: _Event) -> None:
        if isinstance(event, Hook) and event.reply is not None:
            event.reply.deny()  # a permission no turn asks for: denied

    async def wait_outside_turn(self) -> str:
        """The prompt of the next `UserPromptSubmit` no turn of threadline's caused. Once
        claude is gone (a person ended it), the session is unhealthy and this never returns:
        the next turn opens a new one."""
        while True:
            event: _Event | None = None
            with trio.move_on_after(_ALIVE_CHECK):
                event = await self._events.receive()
            if isinstance(event, Hook) and event.name == "UserPromptSubmit":
                self._outside = event.payload
                return str(event.payload.get("prompt") or "")
            if event is not None:
                self._drop(event)
            elif self.pane is None or not self.pane.alive:
                self.healthy = False
                await trio.sleep_forever()

    async def interrupt(self) -> None:
        pane = self.pane
        # Once per turn: a second Escape in a row opens claude's rewind menu, which would
        # take the next prompt's paste.
        if self._in_turn and self._interrupted_at is None and pane is not None and pane.alive:
            self._interrupted_at = trio.current_time()
            if self._mapper is not None:
                # a call still waiting for its approval never runs: declined, not failed
                for tool_id in self._asking:
                    self._mapper.mapper.decisions.setdefault(tool_id, "cancel")
            await pane.keys("Escape")

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        pane = self.live_pane()
        self._in_turn, self._interrupted_at = True, None
        self._turn_began = time.time() - _CLOCK_SLACK
        try:
            prompt = await self.take_prompt(pane, turn, ctx, prompt_text(turn))
            if prompt is None:
                return b.TurnOutcome("interrupted")  # (before claude took the prompt)
            await self._note_session(prompt, ctx)
            prompt_id = prompt.get("prompt_id")
            mapper = TranscriptMapper(self.mapper(), str(prompt_id) if prompt_id else None)
            self._mapper = mapper
            async with trio.open_nursery() as nursery:
                try:
                    outcome = await self._observe(pane, mapper, ctx, nursery)
                finally:
                    nursery.cancel_scope.cancel()
            if (usage := mapper.turn_usage()) is not None:
                await ctx.emit(b.TokenUsageUpdated(self._usage.add(usage)))
            return outcome
        finally:
            self._in_turn, self._mapper = False, None
            self._asking.clear()

    async def _submit(self, pane: TmuxPane, text: str) -> dict[str, Any] | None:
        """Paste `text` and press Enter; the `UserPromptSubmit` it caused (None: the turn
        was interrupted before claude took it)."""
        await self.paste_prompt(pane, text)
        await pane.keys("Enter")
        start = trio.current_time()
        presses = 1
        while trio.current_time() - start < _SUBMIT_TIMEOUT:
            with trio.move_on_after(_ENTER_AGAIN):
                event = await self._events.receive()
                if isinstance(event, Hook) and event.name == "UserPromptSubmit":
                    return event.payload
                self._drop(event)
                continue
            if not pane.alive:
                raise await self._failure(pane, "exited before taking the prompt")
            if self._interrupted_at is not None:
                return None
            if presses < _ENTER_PRESSES:
                log.debug("claude tui: no UserPromptSubmit %.0f s after Enter", _ENTER_AGAIN)
                presses += 1
                await pane.keys("Enter")  # (on an empty input it does nothing)
        raise await self._failure(pane, "did not take the prompt")

    async def _note_session(self, prompt: dict[str, Any], ctx: b.TurnContext) -> None:
        sid = prompt.get("session_id")
        if isinstance(sid, str) and sid:
            await ctx.set_backend_session_id(sid)
            self.settings.backend_session_id = sid
            self.unsaved.discard(sid)

    async def _observe(
        self, pane: TmuxPane, mapper: TranscriptMapper, ctx: b.TurnContext, nursery: trio.Nursery
    ) -> b.TurnOutcome:
        # PreToolUse: (tool_use_id, tool, input)
        pre_tools: list[tuple[str, str, dict[str, Any]]] = []
        # the turn's `Stop` or `StopFailure`, and when it came
        end: Hook | None = None
        ended_at = 0.0
        while True:
            event: _Event | None = None
            with trio.move_on_after(_POLL * 4):
                event = await self._events.receive()
            if isinstance(event, Entry):
                for ev in mapper.feed(event.data):
                    await ctx.emit(ev)
                if mapper.interrupted:
                    return b.TurnOutcome("interrupted")
            elif isinstance(event, ApiAttempt) and event.at >= self._turn_began:
                for ev in mapper.mapper.feed(event.message):
                    await ctx.emit(ev)
            if (give_up := mapper.mapper.give_up) is not None:
                await self.stop_retrying(pane)
                return b.TurnOutcome("failed", give_up)
            if isinstance(event, Hook) and event.name in ("Stop", "StopFailure"):
                end, ended_at = event, trio.current_time()
            elif isinstance(event, Hook):
                await self._tool_hook(event, mapper, ctx, nursery, pre_tools)
            now = trio.current_time()
            if end is not None and (_caught_up(mapper, end) or now - ended_at > _STOP_GRACE):
                if end.name == "StopFailure":
                    return _failed(mapper, end.payload)
                return b.TurnOutcome("completed")
            if self._interrupted_at is not None and now - self._interrupted_at > _INTERRUPT_GRACE:
                return b.TurnOutcome("interrupted")
            if not pane.alive:
                raise await self._failure(pane, "exited in the middle of a turn")

    async def _tool_hook(
        self,
        event: Hook,
        mapper: TranscriptMapper,
        ctx: b.TurnContext,
        nursery: trio.Nursery,
        pre_tools: list[tuple[str, str, dict[str, Any]]],
    ) -> None:
        payload = event.payload
        tool = str(payload.get("tool_name") or "tool")
        raw = payload.get("tool_input")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if event.name == "PreToolUse":
            tool_id = str(payload.get("tool_use_id") or "")
            pre_tools.append((tool_id, tool, args))
            inner = mapper.mapper
            if (
                tool_id
                and tool_id not in inner.tools
                and not inner.is_dynamic_tool(tool)
                and tool not in _NO_ITEM
            ):
                item = inner.item_for_tool(tool_id, tool, args)
                inner.tools[tool_id] = item
                await ctx.emit(b.ItemStarted(item))
        elif event.name == "PermissionRequest" and event.reply is not None:
            # (no tool_use_id: the call is the latest PreToolUse of that tool and input)
            tool_id = next(
                (i for i, t, a in reversed(pre_tools) if t == tool and a == args),
                ctx.new_item_id(),
            )
            nursery.start_soon(self._permission, ctx, mapper, tool, tool_id, args, event.reply)
        else:
            self._drop(event)  # (a person's prompt while the turn runs: claude queues it)

    async def _permission(
        self,
        ctx: b.TurnContext,
        mapper: TranscriptMapper,
        tool: str,
        tool_id: str,
        args: dict[str, Any],
        reply: HookReply,
    ) -> None:
        self._asking.add(tool_id)
        try:
            if tool == "AskUserQuestion":
                reply.give(await ask_user(ctx, mapper.mapper, tool_id, args))
            else:
                cwd = self.settings.cwd
                reply.give(await approve(ctx, mapper.mapper, tool, tool_id, args, None, cwd))
        finally:
            self._asking.discard(tool_id)
            reply.deny()  # (when cancelled or failed: a deny; after `give`, nothing)


def _caught_up(mapper: TranscriptMapper, end: Hook) -> bool:
    """Whether the transcript shows what the turn's `Stop` (its last message) or
    `StopFailure` (the API error) names: the hook can come first."""
    if end.name == "StopFailure":
        return mapper.api_error
    return mapper.caught_up(end.payload.get("last_assistant_message"))


def _failed(mapper: TranscriptMapper, payload: dict[str, Any]) -> b.TurnOutcome:
    """A `StopFailure`: the API error claude showed, as the turn's error."""
    kind = payload.get("error")
    status = mapper.api_status
    text = str(payload.get("last_assistant_message") or payload.get("error_details") or kind)
    error = mapper.mapper.api_error(status, text) or p.TurnError(
        message=text,
        codex_error_info=error_info_for_status(status, kind),
        additional_details=f"HTTP {status}" if status else None,
    )
    return b.TurnOutcome("failed", error)


@asynccontextmanager
async def open_claude_tui(
    settings: b.SessionSettings, binary: str, unsaved: set[str]
) -> AsyncIterator[ClaudeTuiSession]:
    """claude in tmux session `<thread id>`, ready for a turn; everything it started is gone
    when the block ends."""
    session = ClaudeTuiSession(settings, binary, unsaved)
    env = session.env()
    try:
        await trio.to_thread.run_sync(prepare_config, env, settings.cwd)
    except OSError as exc:
        raise b.BackendError(f"cannot prepare claude's config: {exc}") from None
    failure: BaseException | None = None
    directory = tempfile.mkdtemp(prefix="threadline-claude-")
    async with trio.open_nursery() as nursery:
        try:
            port = await nursery.start(serve_hooks, session.hook, session.token)
            argv = session.argv(port, directory)
            async with open_tmux_pane(settings.thread_id, argv, cwd=settings.cwd, env=env) as pane:
                session.pane, session.tui = pane, pane.attach
                nursery.start_soon(session.follow_transcript)
                await session.wait_ready(pane)
                yield session
        except BaseException as exc:
            failure = exc  # (re-raised outside the nursery: not as a group)
        finally:
            session.close()
            nursery.cancel_scope.cancel()
            shutil.rmtree(directory, ignore_errors=True)
    if failure is not None:
        raise failure
