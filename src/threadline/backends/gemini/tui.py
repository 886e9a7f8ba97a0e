"""Gemini CLI's tui mode: the real interactive gemini in a tmux session threadline owns
(kit/tmux.py), driven and observed through the protocol.

Where each part of a turn comes from (gemini 0.61.0):
- input: `turn/start` pastes the prompt (bracketed paste; the role bootstrap first, once;
  not before `_SETTLE` s after `SessionStart`, which comes while a resumed session's history
  is still drawn and a paste then is lost), waits `_ENTER_DELAY` s (an Enter sent with the
  paste is swallowed) and presses Enter; the
  turn begins at the `BeforeAgent` hook (tui_setup.py). A prompt a person types in the tmux
  session is a turn of its own (`wait_outside_turn`).
- tool calls: the hooks. `BeforeTool` announces the call (shell commands as
  `commandExecution`, `write_file` and `replace` as `fileChange`, others as tool calls) and
  holds it until threadline's approval router decided (gemini runs in `yolo` mode, the hook is
  the gate: `{}` runs the call, a deny blocks it and gemini tells the model); `AfterTool`
  completes it with its result.
- agent text and thoughts: gemini's chat record (the hooks' `transcript_path`). gemini
  appends a model response's message when the response ends, before its tool calls run: the
  record is read at each `BeforeTool` (so a message comes before the calls it announced) and
  at `AfterAgent`. Each model message with text is one `agentMessage`, whole (no deltas), its
  thoughts one `reasoning` item; the turn's messages' `tokens` added up are its token usage.
- the end: `AfterAgent`. An interrupt (Escape, which also kills the running command) ends the
  turn `_INTERRUPT_GRACE` s after the key (gemini reports no hook for a cancelled turn).
- API failures: an error gemini showed is an `error` message of its chat record (the turn
  fails with it); an API gemini cannot reach it retries for minutes in silence, so threadline
  probes the API's host and port meanwhile (kit/api_probe.py) and Escape stops the retries.
Coarser than the ACP mode: no deltas (whole messages and thoughts: `AfterModel`, the one hook
that sees chunks, is awaited per chunk and carries the whole request each time), no images; a
changed model restarts gemini with `--resume`. Nothing is read off the screen but an error's
last screen and gemini's dialogs asking for credentials (checked before a paste, which the API
key dialog would take for the key).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from ... import protocol as p
from .. import base as b
from ..kit.api_errors import ConnectionWatch, no_credentials, unreachable
from ..kit.api_probe import probe_target, watch_api
from ..kit.hook_http import new_token, serve_hooks
from ..kit.per_turn import prompt_with_bootstrap
from ..kit.tmux import TmuxPane, open_tmux_pane
from ..kit.tui_turns import PaneTurns
from ..kit.usage import UsageFields, UsageTotals, add_usage, read_usage
from .headless import api_result_error
from .invocation import _CHECK, PROBE_BUDGET, api_url
from .sessions import prune_empty
from .spec import SPEC
from .tui_setup import gemini_tui_argv, gemini_tui_env, hook_directory, write_hooks

__all__ = ["GeminiTuiSession", "open_gemini_tui"]

log = logging.getLogger("threadline.backend.gemini")

_READY_TIMEOUT = 60.0
_SUBMIT_TIMEOUT = 30.0
_ENTER_DELAY = 0.3
#: After `SessionStart`, how long gemini may still be drawing (a resumed session's history):
#: a paste before then can be lost (measured on a resume).
_SETTLE = 2.0
_ENTER_AGAIN = 2.0
_INTERRUPT_GRACE = 2.0
_POLL = 0.2
_ALIVE_CHECK = 1.0
_SHELL = "run_shell_command"
_EDITS = ("write_file", "replace")
_EXIT = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)
_DENY = {"decision": "deny", "reason": "The user declined this tool call."}
#: A chat record message's `tokens`.
_RECORD_USAGE = UsageFields(
    input="input", output="output", total="total", cached="cached", reasoning="thoughts"
)
#: The words of gemini's dialogs asking for credentials (it then has none it can use).
_LOGIN_DIALOGS = ("Enter Gemini API Key", "How would you like to authenticate")


@dataclass(eq=False)
class _Gate:
    """A `BeforeTool` hook waiting for threadline's decision (a deny unless one is given)."""

    answer: dict[str, Any] = field(default_factory=lambda: dict(_DENY))
    done: trio.Event = field(default_factory=trio.Event)

    def give(self, answer: dict[str, Any]) -> None:
        if not self.done.is_set():
            self.answer = answer
            self.done.set()


@dataclass(frozen=True)
class _Hook:
    name: str
    payload: dict[str, Any]
    gate: _Gate | None = None


def _item(item_id: str, tool: str, args: dict[str, Any], cwd: str) -> p.ThreadItem:
    if tool == _SHELL:
        command = str(args.get("command") or "")
        return p.CommandExecutionItem(
            id=item_id,
            command=command,
            cwd=cwd,
            status="inProgress",
            command_actions=[p.UnknownAction(command=command)],
        )
    if tool in _EDITS:
        path = str(args.get("file_path") or "")
        change = p.FileUpdateChange(path=path, kind=p.PatchKindUpdate(), diff="")
        return p.FileChangeItem(id=item_id, status="inProgress", changes=[change])
    return p.DynamicToolCallItem(
        id=item_id, tool=tool, arguments=args, status="inProgress", namespace="gemini"
    )


def _request(item: p.ThreadItem, tool: str, args: dict[str, Any], cwd: str) -> b.ApprovalRequest:
    if isinstance(item, p.CommandExecutionItem):
        return b.ApprovalRequest(kind="command", item_id=item.id, command=item.command, cwd=cwd)
    if isinstance(item, p.FileChangeItem):
        return b.ApprovalRequest(kind="fileChange", item_id=item.id)
    return b.ApprovalRequest(kind="tool", item_id=item.id, tool=tool, arguments=args)


def _result_text(response: Any) -> str:
    if isinstance(response, dict):
        for key in ("llmContent", "returnDisplay", "output"):
            if isinstance(response.get(key), str):
                return str(response[key])
    return response if isinstance(response, str) else json.dumps(response)


def _completed(item: p.ThreadItem, response: Any) -> p.ThreadItem:
    text = _result_text(response)
    failed = isinstance(response, dict) and bool(response.get("error"))
    if isinstance(item, p.CommandExecutionItem):
        code = _EXIT.search(text)
        item.exit_code = int(code.group(1)) if code else (None if failed else 0)
        item.aggregated_output = text
        item.status = "failed" if failed or (item.exit_code or 0) != 0 else "completed"
    elif isinstance(item, p.FileChangeItem):
        item.status = "failed" if failed else "completed"
    elif isinstance(item, p.DynamicToolCallItem):
        item.status = "failed" if failed else "completed"
        item.success = not failed
        item.content_items = [p.ToolOutputText(text=text)] if text else []
    return item


def _declined(item: p.ThreadItem) -> p.ThreadItem:
    if isinstance(item, (p.CommandExecutionItem, p.FileChangeItem)):
        item.status = "declined"
    elif isinstance(item, p.DynamicToolCallItem):
        item.status, item.success = "failed", False
    return item


def turn_records(path: str, prompt: str) -> list[dict[str, Any]]:
    """The messages after the last user message `prompt` in gemini's chat record (each line
    a message, upserted by id, or a `$set` of all of them): the model's (`gemini`, with
    `content`, `thoughts` and `tokens`), the API errors it showed (`error`), notes (`info`)."""
    messages: dict[str, dict[str, Any]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError:
        return []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        listed = (entry.get("$set") or {}).get("messages") if "$set" in entry else None
        if isinstance(listed, list):
            messages = {str(m.get("id")): m for m in listed if isinstance(m, dict)}
        elif isinstance(entry.get("id"), str) and "type" in entry:
            messages[entry["id"]] = entry
    ordered = list(messages.values())
    start = 0
    for index, message in enumerate(ordered):
        if message.get("type") == "user" and prompt.strip() in _text(message.get("content")):
            start = index + 1
    return ordered[start:]  # (read during the turn: no later turn is there)


def record_events(records: list[dict[str, Any]]) -> list[b.BackendEvent]:
    """The turn's model messages as items: its thoughts (`**subject** description`, as
    gemini shows them) as reasoning, its text as an agent message, each whole."""
    events: list[b.BackendEvent] = []
    for message in records:
        if message.get("type") != "gemini":
            continue
        base = str(message.get("id"))
        thoughts = [t for t in message.get("thoughts") or () if isinstance(t, dict)]
        summary = [_thought(t) for t in thoughts if _thought(t)]
        if summary:
            item_id = f"{base}-thoughts"
            events.append(b.ItemStarted(p.ReasoningItem(id=item_id)))
            for index, part in enumerate(summary):
                events.append(b.ReasoningSummaryPartAdded(item_id, index))
                events.append(b.ReasoningSummaryDelta(item_id, part, index))
            events.append(b.ItemCompleted(p.ReasoningItem(id=item_id, summary=summary)))
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            events.append(b.ItemStarted(p.AgentMessageItem(id=base, text="")))
            events.append(b.AgentMessageDelta(base, content))
            events.append(b.ItemCompleted(p.AgentMessageItem(id=base, text=content)))
    return events


def record_usage(records: list[dict[str, Any]]) -> p.TokenUsageBreakdown | None:
    """The turn's tokens: its model messages' `tokens`, added up."""
    total = None
    for message in records:
        if message.get("type") == "gemini":
            usage = read_usage(message.get("tokens"), _RECORD_USAGE)
            if usage is not None:
                total = usage if total is None else add_usage(total, usage)
    return total


def _thought(thought: dict[str, Any]) -> str:
    subject = str(thought.get("subject") or "").strip()
    description = str(thought.get("description") or "").strip()
    return f"**{subject}** {description}".strip() if subject else description


def _text(content: Any) -> str:
    """A chat record message's text (a string, or parts with `text`)."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(c.get("text") or "") for c in parts if isinstance(c, dict))


class GeminiTuiSession(PaneTurns, b.BackendSession):
    cli_name = "gemini"

    def __init__(self, settings: b.SessionSettings) -> None:
        self.settings = settings
        self.token = new_token()
        self.init_pane_turns()
        self._send, self._events = trio.open_memory_channel[_Hook](10_000)
        self._ready = trio.Event()
        self._ready_at = 0.0
        self._gates: set[_Gate] = set()
        #: When the running turn last heard from gemini (a hook).
        self._last_event = 0.0
        self._usage = UsageTotals()
        self.closed = False

    async def hook(self, name: str, payload: dict[str, Any]) -> dict[str, Any]:
        if name == "SessionStart":
            if not self._ready.is_set():
                self._ready_at = trio.current_time()
            self._ready.set()
            return {}
        if name != "BeforeTool":
            await self._send.send(_Hook(name, payload))
            return {}
        gate = _Gate()
        if self.closed:
            return gate.answer
        self._gates.add(gate)
        try:
            await self._send.send(_Hook(name, payload, gate))
            await gate.done.wait()
        finally:
            self._gates.discard(gate)
        return gate.answer

    def close(self) -> None:
        """Every call still waiting is denied (fail closed)."""
        self.closed = True
        for gate in list(self._gates):
            gate.done.set()

    async def wait_ready(self, pane: TmuxPane) -> None:
        with trio.move_on_after(_READY_TIMEOUT):
            while pane.alive:
                with trio.move_on_after(_POLL):
                    await self._ready.wait()
                    return
        raise await self._failure(pane, "did not come up (no SessionStart hook reached threadline)")

    def _drop(self, event: _Hook) -> None:
        if event.gate is not None:
            event.gate.done.set()  # a call no turn asks about: denied

    async def wait_outside_turn(self) -> str:
        while True:
            event: _Hook | None = None
            with trio.move_on_after(_ALIVE_CHECK):
                event = await self._events.receive()
            if event is not None and event.name == "BeforeAgent" and event.payload.get("prompt"):
                self._outside = event.payload
                return str(event.payload["prompt"])
            if event is not None:
                self._drop(event)
            elif self.pane is None or not self.pane.alive:
                self.healthy = False
                await trio.sleep_forever()

    async def interrupt(self) -> None:
        pane = self.pane
        if self._in_turn and pane is not None and pane.alive:
            self._interrupted_at = trio.current_time()
            for gate in list(self._gates):
                gate.done.set()  # (denied: the call never runs)
            await pane.keys("Escape")

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        pane = self.live_pane()
        self._in_turn, self._interrupted_at = True, None
        try:
            prompt = await self.take_prompt(pane, turn, ctx, prompt_with_bootstrap(turn)) or {}
            sid = prompt.get("session_id")
            if isinstance(sid, str) and sid and sid != self.settings.backend_session_id:
                await ctx.set_backend_session_id(sid)
                self.settings.backend_session_id = sid
            async with trio.open_nursery() as nursery:
                try:
                    return await self._observe(pane, ctx, nursery, prompt)
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            self._in_turn = False

    async def _submit(self, pane: TmuxPane, text: str) -> dict[str, Any]:
        await trio.sleep_until(self._ready_at + _SETTLE)
        await self._check_login(pane)
        await self.paste_prompt(pane, text)
        await trio.sleep(_ENTER_DELAY)
        await self._check_login(pane, pasted=True)
        await pane.keys("Enter")
        pressed_again = False
        with trio.move_on_after(_SUBMIT_TIMEOUT):
            while True:
                event: _Hook | None = None
                with trio.move_on_after(_ENTER_AGAIN):
                    event = await self._events.receive()
                if event is not None and event.name == "BeforeAgent":
                    return event.payload
                if event is not None:
                    self._drop(event)
                elif not pane.alive:
                    raise await self._failure(pane, "exited before taking the prompt")
                elif not pressed_again:
                    pressed_again = True
                    await pane.keys("Enter")
        raise await self._failure(pane, "did not take the prompt")

    async def _check_login(self, pane: TmuxPane, *, pasted: bool = False) -> None:
        """gemini without credentials asks for them in a dialog, which would take a pasted
        prompt for the API key: the turn fails with what to do instead (the dialog stays, for
        a person to answer; a paste in it is withdrawn with Escape)."""
        screen = await pane.capture()
        found = next((words for words in _LOGIN_DIALOGS if words in screen), None)
        if found is None:
            return
        if pasted:
            await pane.keys("Escape")
        raise b.BackendError.of(no_credentials(SPEC, f"gemini shows its dialog {found!r}"))

    async def _observe(
        self, pane: TmuxPane, ctx: b.TurnContext, nursery: trio.Nursery, prompt: dict[str, Any]
    ) -> b.TurnOutcome:
        calls: list[tuple[str, dict[str, Any], p.ThreadItem]] = []  # (tool, input, item)
        give_up: list[p.TurnError] = []  # (the API cannot be reached)
        shown: set[str] = set()  # the chat record's messages reported
        self._last_event = trio.current_time()
        nursery.start_soon(self._watch_api, calls, give_up)
        while True:
            event: _Hook | None = None
            with trio.move_on_after(_POLL):
                event = await self._events.receive()
            if event is not None and event.name == "BeforeTool" and event.gate is not None:
                await self._show_messages(ctx, prompt, shown)
                tool, args = _tool(event.payload)
                item = _item(ctx.new_item_id(), tool, args, self.settings.cwd)
                calls.append((tool, args, item))
                await ctx.emit(b.ItemStarted(item))
                nursery.start_soon(self._decide, ctx, item, tool, args, event.gate, calls)
            elif event is not None and event.name == "AfterTool":
                tool, args = _tool(event.payload)
                found = next((c for c in calls if c[0] == tool and c[1] == args), None)
                if found is not None:
                    calls.remove(found)
                    done = _completed(found[2], event.payload.get("tool_response"))
                    await ctx.emit(b.ItemCompleted(done))
            elif event is not None and event.name == "AfterAgent":
                return await self._messages(ctx, prompt, shown)
            elif event is not None:
                self._drop(event)
            if event is not None:
                self._last_event = trio.current_time()
            if give_up:
                await self.stop_retrying(pane)
                return b.TurnOutcome("failed", give_up[0])
            now = trio.current_time()
            if self._interrupted_at is not None and now - self._interrupted_at > _INTERRUPT_GRACE:
                await self._show_messages(ctx, prompt, shown)
                return b.TurnOutcome("interrupted")
            if not pane.alive:
                raise await self._failure(pane, "exited in the middle of a turn")

    async def _decide(
        self,
        ctx: b.TurnContext,
        item: p.ThreadItem,
        tool: str,
        args: dict[str, Any],
        gate: _Gate,
        calls: list[tuple[str, dict[str, Any], p.ThreadItem]],
    ) -> None:
        decision: str = "decline"
        try:
            decision = await ctx.request_approval(_request(item, tool, args, self.settings.cwd))
        finally:
            # (cancelled, failed, declined or interrupted: the gate's default deny)
            allowed = decision in ("accept", "acceptForSession") and self._interrupted_at is None
            if allowed:
                gate.give({})
            gate.done.set()
        for call in calls if not allowed else []:
            if call[2] is item:
                calls.remove(call)
                await ctx.emit(b.ItemCompleted(_declined(item)))
                break

    async def _watch_api(
        self, calls: list[tuple[str, dict[str, Any], p.ThreadItem]], give_up: list[p.TurnError]
    ) -> None:
        """gemini retries an unreachable API for minutes and no hook says so: probe it (see
        kit/api_probe.py) while the turn waits on the model (no tool call in flight)."""
        url = api_url(self.settings.env)
        target = probe_target(url, self.settings.env)
        if target is None:
            return
        watch = ConnectionWatch(budget=PROBE_BUDGET)
        error = await watch_api(target, watch, lambda: None if calls else self._last_event)
        give_up.append(unreachable(SPEC, url, _CHECK, error, after=watch.elapsed()))

    async def _show_messages(
        self, ctx: b.TurnContext, prompt: dict[str, Any], shown: set[str]
    ) -> list[dict[str, Any]]:
        """Reports the turn's chat record messages not reported yet; returns all of them."""
        path = prompt.get("transcript_path")
        if not isinstance(path, str):
            return []
        text = str(prompt.get("prompt") or "")
        records = await trio.to_thread.run_sync(turn_records, path, text)
        new = [m for m in records if str(m.get("id")) not in shown]
        shown.update(str(m.get("id")) for m in new)
        for event in record_events(new):
            await ctx.emit(event)
        return records

    async def _messages(
        self, ctx: b.TurnContext, prompt: dict[str, Any], shown: set[str]
    ) -> b.TurnOutcome:
        """The turn's end: its last model messages and its token usage from the chat record,
        and its outcome (failed when gemini recorded an API error)."""
        records = await self._show_messages(ctx, prompt, shown)
        if (usage := record_usage(records)) is not None:
            await ctx.emit(b.TokenUsageUpdated(self._usage.add(usage)))
        errors = [str(m.get("content")) for m in records if m.get("type") == "error"]
        if errors:
            return b.TurnOutcome("failed", api_result_error(errors[-1], self.settings))
        return b.TurnOutcome("completed")


def _tool(payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    raw = payload.get("tool_input")
    return str(payload.get("tool_name") or "tool"), raw if isinstance(raw, dict) else {}


@asynccontextmanager
async def open_gemini_tui(
    settings: b.SessionSettings, binary: str
) -> AsyncIterator[GeminiTuiSession]:
    """gemini in tmux session `<thread id>`, ready for a turn; everything it started is gone
    when the block ends."""
    failure: BaseException | None = None
    session = GeminiTuiSession(settings)
    for path in await trio.to_thread.run_sync(prune_empty, settings.env):
        log.info("removed gemini's empty duplicate session file %s", path)
    with hook_directory() as directory:
        async with trio.open_nursery() as nursery:
            try:
                port = await nursery.start(serve_hooks, session.hook, session.token)
                await trio.to_thread.run_sync(
                    write_hooks, directory, port, session.token, settings.env
                )
                argv = gemini_tui_argv(binary, settings)
                env = gemini_tui_env(settings, directory)
                async with open_tmux_pane(
                    settings.thread_id, argv, cwd=settings.cwd, env=env
                ) as pane:
                    session.pane, session.tui = pane, pane.attach
                    await session.wait_ready(pane)
                    yield session
            except BaseException as exc:
                failure = exc
            finally:
                session.close()
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
