"""Qwen Code's tui mode: the real interactive qwen in a tmux session threadline owns
(kit/tmux.py), driven and observed through the protocol.

Where each part of a turn comes from (qwen 0.24.4):
- input: `turn/start` appends `{"type": "submit", "text": ...}` to qwen's `--input-file` (the
  role bootstrap first, once); qwen polls the file, waits until it is idle, and submits the
  text as if typed. The turn begins at the `UserPromptSubmit` hook (tui_setup.py), which also
  names the prompt (`prompt_id`) and the session. A prompt a person types in the tmux session
  is a turn of its own (`wait_outside_turn`).
- items: qwen's dual output, `--json-file` (tui_mapping.py): streamed agent text and
  reasoning, tool calls and their results (shell commands as `commandExecution`, `write_file`
  and `edit` as `fileChange`, others as tool calls), token usage.
- approvals: the dual output's `control_request can_use_tool` (qwen runs with
  `--approval-mode default`: it asks before shell commands and edits), decided by threadline's
  approval router and answered with `{"type": "confirmation_response", "allowed": ...}` in the
  input file; fail closed (an error, a cancelled request: not allowed). The TUI shows the
  question too; a person's answer there (a `control_response` threadline did not cause) is
  taken as the decision. `acceptForSession` allows once (the router remembers the grant).
- the end: the `Stop` hook once the dual output shows the message it names (it can come
  first); `StopFailure` for an API error; else the `Notification` hook `idle_prompt`, which
  is all qwen reports for a turn a declined tool ended (qwen does not ask the model again) or
  an Escape cancelled. An interrupt (Escape, which also kills the running command) ends the
  turn there, or `_INTERRUPT_GRACE` s after the key at most.
Coarser than the ACP mode: no images, no steering, no compaction, no effort, no MCP servers of
the thread's; a changed model restarts qwen with `--resume`. A prompt a person types while a
turn runs is queued by qwen and not reported. A refused or unreachable API: qwen's session
record (api_records.py), as in ACP mode; Escape stops its retries. Nothing is read off the
screen but an error's last screen and qwen's provider dialog ("Failed to login": no
credentials), which takes no prompt.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ... import protocol as p
from .. import base as b
from ..claude.approve import approve
from ..claude.tui_hooks import Entry, Hook
from ..kit.api_errors import no_credentials
from ..kit.file_tail import JsonLineTail
from ..kit.hook_http import new_token, serve_hooks
from ..kit.per_turn import prompt_with_bootstrap
from ..kit.tmux import TmuxPane, open_tmux_pane
from ..kit.tui_turns import PaneTurns
from ..kit.usage import UsageTotals
from .api_records import watch_api_records
from .invocation import prompt_failure
from .spec import SPEC
from .tui_mapping import QwenTuiMapper, claude_name
from .tui_setup import SideChannel, qwen_argv, qwen_env, side_channel, write_settings

__all__ = ["QwenTuiSession", "open_qwen_tui"]

log = logging.getLogger("threadline.backend.qwen")

_READY_TIMEOUT = 60.0
#: How long a submitted prompt may take to start (qwen polls its input file every ~0.5 s).
_SUBMIT_TIMEOUT = 30.0
#: After `Stop`, how long the dual output may take to show the turn's last message.
_STOP_GRACE = 3.0
_INTERRUPT_GRACE = 3.0
#: After `idle_prompt`, how long a `Stop` or `StopFailure` may still come: qwen sends its
#: hooks without waiting for one another, and the idle one can arrive first (seen with a 401).
_IDLE_GRACE = 1.5
_POLL = 0.05
_ALIVE_CHECK = 1.0
#: Lines of the dual output kept while no turn runs (from the last prompt message on).
_IDLE_LINES = 10_000

_Event = Hook | Entry
#: What qwen's provider dialog says when it has no credentials (it then takes no prompt).
_NO_LOGIN = re.compile(r"Failed to login\. Message: (.*?)(?:\n\s*\n|$)", re.DOTALL)


def _is_prompt_line(data: dict[str, Any]) -> bool:
    if data.get("type") != "user":
        return False
    content = (data.get("message") or {}).get("content")
    return isinstance(content, str) or (
        isinstance(content, list)
        and any(isinstance(c, dict) and c.get("type") == "text" for c in content)
    )


class QwenTuiSession(PaneTurns, b.BackendSession):
    cli_name = "qwen"

    def __init__(self, settings: b.SessionSettings, channel: SideChannel) -> None:
        self.settings = settings
        self.channel = channel
        self.token = new_token()
        self.init_pane_turns()
        self._send, self._events = trio.open_memory_channel[_Event](10_000)
        self._tail = JsonLineTail()
        self._tail.follow(channel.events)
        self._ready = trio.Event()
        self._usage = UsageTotals()
        #: Dual-output lines that came while no turn ran (the next turn's may be among them).
        self._idle: list[Entry] = []
        self._mapper: QwenTuiMapper | None = None
        #: Approvals being decided: request id → (tool call id, the decision's scope).
        self._asking: dict[str, tuple[str, trio.CancelScope]] = {}
        #: The thread's MCP servers were named as not passed to qwen (once per session).
        self._warned = False

    # -- process ---------------------------------------------------------------------------------

    async def hook(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A hook request (authenticated): queued for the turn; answered `{}` at once."""
        if name == "SessionStart":
            self._ready.set()
        else:
            await self._send.send(Hook(name, payload))
        return {}

    async def follow(self) -> None:
        while True:
            for entry in self._tail.read():
                await self._send.send(Entry(entry))
            await trio.sleep(_POLL)

    async def wait_ready(self, pane: TmuxPane) -> None:
        """Until qwen's `SessionStart` hook came (BackendError with its last screen if it
        ends or does not come up)."""
        with trio.move_on_after(_READY_TIMEOUT):
            while pane.alive:
                with trio.move_on_after(_POLL * 4):
                    await self._ready.wait()
                    return
        raise await self._failure(pane, "did not come up (no SessionStart hook reached threadline)")

    # -- outside turns ---------------------------------------------------------------------------

    def _keep(self, entry: Entry) -> None:
        """A dual-output line while no turn runs: kept from the last prompt message on."""
        if _is_prompt_line(entry.data):
            self._idle = []
        if len(self._idle) < _IDLE_LINES:
            self._idle.append(entry)

    async def wait_outside_turn(self) -> str:
        """The prompt of the next `UserPromptSubmit` no turn of threadline's caused. Once
        qwen is gone (a person ended it), the session is unhealthy and this never returns:
        the next turn opens a new one."""
        while True:
            event: _Event | None = None
            with trio.move_on_after(_ALIVE_CHECK):
                event = await self._events.receive()
            if isinstance(event, Entry):
                self._keep(event)
            elif isinstance(event, Hook) and event.name == "UserPromptSubmit":
                if event.payload.get("prompt"):  # (qwen also sends one with "" after a tool)
                    self._outside = event.payload
                    return str(event.payload["prompt"])
            elif event is None and (self.pane is None or not self.pane.alive):
                self.healthy = False
                await trio.sleep_forever()

    # -- interrupt -------------------------------------------------------------------------------

    async def interrupt(self) -> None:
        pane = self.pane
        if self._in_turn and pane is not None and pane.alive:
            self._interrupted_at = trio.current_time()
            if self._mapper is not None:
                # a call still waiting for its approval never runs: declined, not failed
                for tool_id, _ in self._asking.values():
                    self._mapper.decisions.setdefault(tool_id, "cancel")
            await pane.keys("Escape")

    # -- turns -----------------------------------------------------------------------------------

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        pane = self.live_pane()
        self._in_turn, self._interrupted_at = True, None
        try:
            prompt = await self.take_prompt(pane, turn, ctx, prompt_with_bootstrap(turn)) or {}
            await self._note_session(prompt, ctx)
            if self.settings.mcp_servers and not self._warned:
                self._warned = True
                names = ", ".join(s.name for s in self.settings.mcp_servers)
                await ctx.emit(
                    b.Warning(f"qwen's tui mode does not give qwen MCP servers: {names}")
                )
            mapper = QwenTuiMapper(self.settings.cwd)
            self._mapper = mapper
            early, self._idle = self._idle, []
            for entry in early:
                await self._feed(entry, mapper, ctx, None)
            async with trio.open_nursery() as nursery:
                try:
                    outcome = await self._observe(pane, mapper, ctx, nursery, prompt)
                finally:
                    nursery.cancel_scope.cancel()
            for event in mapper.declined():
                await ctx.emit(event)
            if mapper.turn_usage is not None:
                await ctx.emit(b.TokenUsageUpdated(self._usage.add(mapper.turn_usage)))
            return outcome
        finally:
            self._in_turn, self._mapper = False, None

    async def _submit(self, pane: TmuxPane, text: str) -> dict[str, Any]:
        """Give qwen `text` as a prompt; the `UserPromptSubmit` it caused."""
        self._idle = []
        await trio.to_thread.run_sync(self.channel.send, {"type": "submit", "text": text})
        with trio.move_on_after(_SUBMIT_TIMEOUT):
            while True:
                event: _Event | None = None
                with trio.move_on_after(_ALIVE_CHECK):
                    event = await self._events.receive()
                if isinstance(event, Entry):
                    self._keep(event)
                elif isinstance(event, Hook) and event.name == "UserPromptSubmit":
                    if event.payload.get("prompt"):
                        return event.payload
                elif event is None and not pane.alive:
                    raise await self._failure(pane, "exited before taking the prompt")
                elif event is None:
                    await self._check_login(pane)
        raise await self._failure(pane, "did not take the prompt")

    async def _check_login(self, pane: TmuxPane) -> None:
        """qwen without credentials shows its provider dialog instead of taking the prompt:
        the turn's error then (the session stays, for a person to log in)."""
        screen = await pane.capture()
        found = _NO_LOGIN.search(re.sub(r"[│┌┐└┘─]", " ", screen))
        if found is not None:
            detail = " ".join(found[1].split())
            raise b.BackendError.of(no_credentials(SPEC, detail))

    async def _note_session(self, prompt: dict[str, Any], ctx: b.TurnContext) -> None:
        sid = prompt.get("session_id")
        if isinstance(sid, str) and sid and sid != self.settings.backend_session_id:
            await ctx.set_backend_session_id(sid)
            self.settings.backend_session_id = sid

    async def _observe(
        self,
        pane: TmuxPane,
        mapper: QwenTuiMapper,
        ctx: b.TurnContext,
        nursery: trio.Nursery,
        prompt: dict[str, Any],
    ) -> b.TurnOutcome:
        prompt_id = prompt.get("prompt_id")
        since = str(prompt.get("timestamp") or "")
        end: Hook | None = None  # the turn's `Stop` or `StopFailure`
        ended_at = 0.0
        idle_at: float | None = None  # when qwen said it waits for input again
        give_up: list[p.TurnError] = []  # (the API cannot be used: qwen's retries cannot help)
        if sid := self.settings.backend_session_id:
            nursery.start_soon(self._watch_api, sid, give_up)
        while True:
            event: _Event | None = None
            with trio.move_on_after(_POLL * 4):
                event = await self._events.receive()
            if isinstance(event, Entry):
                await self._feed(event, mapper, ctx, nursery)
            elif isinstance(event, Hook) and event.name in ("Stop", "StopFailure"):
                if not prompt_id or event.payload.get("prompt_id") in (None, prompt_id):
                    end, ended_at = event, trio.current_time()
            elif isinstance(event, Hook) and _idle_prompt(event, since):
                idle_at = trio.current_time() if idle_at is None else idle_at
            now = trio.current_time()
            if give_up and end is None:
                await self.stop_retrying(pane)
                await self._catch_up(mapper, ctx)
                return b.TurnOutcome("failed", give_up[0])
            if end is not None and end.name == "StopFailure":
                await self._catch_up(mapper, ctx)
                return self._failed(end.payload)
            if end is not None and (
                mapper.caught_up(end.payload.get("last_assistant_message"))
                or now - ended_at > _STOP_GRACE
            ):
                return b.TurnOutcome("completed")
            interrupted = self._interrupted_at is not None
            if idle_at is not None and end is None and (interrupted or now - idle_at > _IDLE_GRACE):
                await self._catch_up(mapper, ctx)
                return b.TurnOutcome("interrupted" if interrupted else "completed")
            if self._interrupted_at is not None and now - self._interrupted_at > _INTERRUPT_GRACE:
                return b.TurnOutcome("interrupted")
            if not pane.alive:
                raise await self._failure(pane, "exited in the middle of a turn")

    async def _watch_api(self, session_id: str, give_up: list[p.TurnError]) -> None:
        give_up.append(await watch_api_records(session_id, self.settings.env))

    async def _catch_up(self, mapper: QwenTuiMapper, ctx: b.TurnContext) -> None:
        """Map what the dual output holds by now (the turn ended without naming its last
        message)."""
        for data in self._tail.read():
            await self._send.send(Entry(data))
        while True:
            try:
                event = self._events.receive_nowait()
            except trio.WouldBlock:
                return
            if isinstance(event, Entry):
                await self._feed(event, mapper, ctx, None)

    async def _feed(
        self,
        entry: Entry,
        mapper: QwenTuiMapper,
        ctx: b.TurnContext,
        nursery: trio.Nursery | None,
    ) -> None:
        data = entry.data
        kind = data.get("type")
        if kind == "control_request" and nursery is not None and mapper.started:
            self._ask(data, mapper, ctx, nursery)
        elif kind == "control_response":
            self._answered_in_tui(data, mapper)
        else:
            for event in mapper.feed(data):
                await ctx.emit(event)

    def _ask(
        self, data: dict[str, Any], mapper: QwenTuiMapper, ctx: b.TurnContext, nursery: trio.Nursery
    ) -> None:
        request = data.get("request")
        request_id = data.get("request_id")
        if not isinstance(request, dict) or request.get("subtype") != "can_use_tool":
            return
        if not isinstance(request_id, str) or request_id in self._asking:
            return
        tool = claude_name(str(request.get("tool_name") or "tool"))
        tool_id = str(request.get("tool_use_id") or ctx.new_item_id())
        raw = request.get("input")
        args: dict[str, Any] = raw if isinstance(raw, dict) else {}
        scope = trio.CancelScope()
        self._asking[request_id] = (tool_id, scope)
        nursery.start_soon(self._permission, ctx, mapper, request_id, tool, tool_id, args, scope)

    async def _permission(
        self,
        ctx: b.TurnContext,
        mapper: QwenTuiMapper,
        request_id: str,
        tool: str,
        tool_id: str,
        args: dict[str, Any],
        scope: trio.CancelScope,
    ) -> None:
        allowed = False
        try:
            with scope:
                answer = await approve(ctx, mapper, tool, tool_id, args, None, self.settings.cwd)
                allowed = answer.get("behavior") == "allow"
        finally:
            # (cancelled, failed or declined: not allowed; answered in the TUI: nothing)
            # (a small append, written at once: this runs when cancelled too)
            if self._asking.pop(request_id, None) is not None:
                self._confirm(request_id, allowed)

    def _confirm(self, request_id: str, allowed: bool) -> None:
        command = {"type": "confirmation_response", "request_id": request_id, "allowed": allowed}
        try:
            self.channel.send(command)
        except OSError as exc:
            log.warning("qwen: cannot answer approval %s: %s", request_id, exc)

    def _answered_in_tui(self, data: dict[str, Any], mapper: QwenTuiMapper) -> None:
        """A `control_response` for an approval threadline still asks about: a person answered
        it in the TUI."""
        response = data.get("response")
        inner = response.get("response") if isinstance(response, dict) else None
        request_id = response.get("request_id") if isinstance(response, dict) else None
        asking = self._asking.pop(request_id, None) if isinstance(request_id, str) else None
        if asking is None:
            return
        tool_id, scope = asking
        allowed = isinstance(inner, dict) and inner.get("allowed") is True
        mapper.decisions[tool_id] = "accept" if allowed else "decline"
        scope.cancel()

    def _failed(self, payload: dict[str, Any]) -> b.TurnOutcome:
        """A `StopFailure`: the API error qwen showed, as the turn's error."""
        details = payload.get("error_details") or payload.get("error") or "the turn failed"
        return b.TurnOutcome("failed", prompt_failure(str(details), self.settings.env))


def _idle_prompt(event: Hook, since: str) -> bool:
    """A `Notification` that qwen waits for input, sent after the turn's prompt."""
    payload = event.payload
    if event.name != "Notification" or payload.get("notification_type") != "idle_prompt":
        return False
    stamp = payload.get("timestamp")
    return not since or not isinstance(stamp, str) or stamp >= since


@asynccontextmanager
async def open_qwen_tui(settings: b.SessionSettings, binary: str) -> AsyncIterator[QwenTuiSession]:
    """qwen in tmux session `<thread id>`, ready for a turn; everything it started (and its
    side channel directory) is gone when the block ends."""
    failure: BaseException | None = None
    with side_channel() as channel:
        session = QwenTuiSession(settings, channel)
        async with trio.open_nursery() as nursery:
            try:
                port = await nursery.start(serve_hooks, session.hook, session.token)
                url = f"http://127.0.0.1:{port}/hook"
                await trio.to_thread.run_sync(write_settings, channel, url, settings.env)
                argv = qwen_argv(binary, settings, channel)
                env = qwen_env(settings, channel, session.token)
                async with open_tmux_pane(
                    settings.thread_id, argv, cwd=settings.cwd, env=env
                ) as pane:
                    session.pane, session.tui = pane, pane.attach
                    nursery.start_soon(session.follow)
                    await session.wait_ready(pane)
                    yield session
            except BaseException as exc:
                failure = exc  # (re-raised outside the nursery: not as a group)
            finally:
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
