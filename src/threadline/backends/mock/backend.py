"""The `mock` backend: deterministic, offline, no credentials — for client development, first
runs and our own end-to-end tests. It goes through the same engine as the real backends.

A prompt is a script, one directive per line (any other line is echoed back as the answer):

    /text Hello there          stream an agent message, word by word
    /reason Thinking about it  a reasoning item (streamed summary)
    /run echo hi > out.txt     a real `sh -c` command behind a commandExecution approval
    /write notes.txt Some text write a file (relative to the cwd) behind a fileChange approval
    /tool fetch {"url": "x"}   a generic tool call behind an item/tool/requestApproval
    /ask What is your name?    ask the client a question (item/tool/requestUserInput)
    /mcp srv echo {"text": "x"} call a tool of the thread's MCP server `srv` (or of its
                               dynamicTools: server `threadline`); the answer is echoed
    /plan Read | Edit | Test   a plan update (turn/plan/updated)
    /sleep 2.5                 wait (the turn can be interrupted meanwhile)
    /fail Something broke      fail the turn with this message
    /history                   echo the session's conversation so far (forks copy it,
                               compaction shrinks it, injected history shows in it)
    /settings                  echo the settings the session sees (turn/start overrides)

Images are answered with a line naming each (`[image: image/png, 68 bytes]`); input steered
into a running turn (`turn/steer`) is answered with `steered: <text>` before the turn ends.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.lowlevel

from ... import protocol as p
from ...ids import new_id
from ...procs.group import ProcessError, open_group_process
from .. import base as b
from ..kit.diff import file_diff
from ..kit.images import resolve_images
from .history import HISTORIES, describe_images
from .mcp_client import call_mcp_tool
from .spec import SPEC

__all__ = ["MockBackend"]


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [part + (" " if i < len(parts) - 1 else "") for i, part in enumerate(parts)]


class MockSession(b.BackendSession):
    def __init__(self, settings: b.SessionSettings) -> None:
        self.settings = settings
        self.session_id = settings.backend_session_id or f"mock-{new_id()}"
        if settings.fork_of and not settings.backend_session_id:
            HISTORIES[self.session_id] = list(HISTORIES.get(settings.fork_of, []))
        self.history = HISTORIES.setdefault(self.session_id, [])
        self._steered: list[str] = []
        self._output_schema: Any = None
        self._scope: trio.CancelScope | None = None
        self._turns = 0
        self._usage = p.TokenUsageBreakdown(
            total_tokens=0,
            input_tokens=0,
            cached_input_tokens=0,
            output_tokens=0,
            reasoning_output_tokens=0,
        )

    async def interrupt(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self._turns += 1
        # The scope exists before the first checkpoint: an interrupt that arrives right after
        # turn/start must find it (else the engine waits out its whole grace period).
        with trio.CancelScope() as scope:
            self._scope = scope
            try:
                await ctx.set_backend_session_id(self.session_id)
                if turn.bootstrap:
                    await ctx.mark_role_bootstrap_applied()
                    await self._message(ctx, f"[role bootstrap received: {turn.bootstrap}]")
                self.history.append(f"user: {turn.text}")
                self._output_schema = turn.output_schema
                images = await resolve_images(turn.input, self.settings.cwd)
                if images:
                    await self._message(ctx, describe_images(images))
                await self._script(turn.text, ctx)
                while self._steered:
                    await self._message(ctx, f"steered: {self._steered.pop(0)}")
                await self._report_usage(ctx, turn.text)
            finally:
                self._scope = None
        if scope.cancelled_caught:
            return b.TurnOutcome("interrupted")
        return None

    async def _script(self, text: str, ctx: b.TurnContext) -> None:
        plain: list[str] = []
        for line in text.splitlines() or [""]:
            if not line.startswith("/"):
                plain.append(line)
                continue
            name, _, arg = line[1:].partition(" ")
            handler = getattr(self, f"_do_{name}", None)
            if handler is None:
                raise b.BackendError(f"mock: unknown directive /{name}")
            await handler(arg.strip(), ctx)
        reply = "\n".join(plain).strip()
        if reply or not any(line.startswith("/") for line in text.splitlines()):
            await self._message(ctx, f"mock reply: {reply}" if reply else "mock reply")

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        return frozenset()  # every setting is read where it is used

    async def steer(self, turn: b.TurnInput) -> None:
        self.history.append(f"user (steered): {turn.text}")
        self._steered.append(turn.text)

    async def compact(self, ctx: b.TurnContext) -> b.TurnOutcome | None:
        count = len(self.history)
        self.history[:] = [f"[compacted: {count} entries]"]
        return None

    async def _do_history(self, arg: str, ctx: b.TurnContext) -> None:
        # One line per entry (its own line breaks as spaces).
        await self._message(ctx, "\n".join(" ".join(e.splitlines()) for e in self.history))

    async def _do_settings(self, arg: str, ctx: b.TurnContext) -> None:
        s = self.settings
        shown = {
            "model": s.model,
            "effort": s.effort,
            "summary": s.summary,
            "approvalPolicy": s.approval_policy,
            "sandbox": s.sandbox,
            "cwd": s.cwd,
            "outputSchema": self._output_schema is not None,
        }
        await self._message(ctx, " ".join(f"{k}={v}" for k, v in shown.items()))

    async def _message(self, ctx: b.TurnContext, text: str) -> None:
        item_id = ctx.new_item_id()
        await ctx.emit(b.ItemStarted(p.AgentMessageItem(id=item_id, text="")))
        for word in _words(text):
            await ctx.emit(b.AgentMessageDelta(item_id, word))
            await trio.lowlevel.checkpoint()
        await ctx.emit(b.ItemCompleted(p.AgentMessageItem(id=item_id, text=text)))
        self.history.append(f"assistant: {text}")

    async def _report_usage(self, ctx: b.TurnContext, text: str) -> None:
        last = p.TokenUsageBreakdown(
            total_tokens=len(text) + 10,
            input_tokens=len(text),
            cached_input_tokens=0,
            output_tokens=10,
            reasoning_output_tokens=0,
        )
        u = self._usage
        self._usage = p.TokenUsageBreakdown(
            total_tokens=u.total_tokens + last.total_tokens,
            input_tokens=u.input_tokens + last.input_tokens,
            cached_input_tokens=0,
            output_tokens=u.output_tokens + last.output_tokens,
            reasoning_output_tokens=0,
        )
        await ctx.emit(b.TokenUsageUpdated(p.ThreadTokenUsage(total=self._usage, last=last)))

    # -- directives ----------------------------------------------------------------------------

    async def _do_text(self, arg: str, ctx: b.TurnContext) -> None:
        await self._message(ctx, arg)

    async def _do_reason(self, arg: str, ctx: b.TurnContext) -> None:
        item_id = ctx.new_item_id()
        await ctx.emit(b.ItemStarted(p.ReasoningItem(id=item_id)))
        await ctx.emit(b.ReasoningSummaryPartAdded(item_id, 0))
        for word in _words(arg):
            await ctx.emit(b.ReasoningSummaryDelta(item_id, word, 0))
        await ctx.emit(b.ItemCompleted(p.ReasoningItem(id=item_id, summary=[arg])))

    async def _do_plan(self, arg: str, ctx: b.TurnContext) -> None:
        steps = [s.strip() for s in arg.split("|") if s.strip()]
        plan = [
            p.TurnPlanStep(step=s, status="inProgress" if i == 0 else "pending")
            for i, s in enumerate(steps)
        ]
        await ctx.emit(b.PlanUpdated(plan))

    async def _do_sleep(self, arg: str, ctx: b.TurnContext) -> None:
        try:
            seconds = float(arg or "1")
        except ValueError:
            seconds = math.nan
        # Negative or NaN durations made trio.sleep raise ValueError, which surfaced as an
        # "internal error in the mock backend" instead of a readable turn failure.
        if math.isnan(seconds) or seconds < 0:
            raise b.BackendError(f"mock: /sleep needs a number of seconds >= 0, got {arg!r}")
        await trio.sleep(seconds)

    async def _do_fail(self, arg: str, ctx: b.TurnContext) -> None:
        raise b.BackendError(arg or "mock failure", codex_error_info="other")

    async def _do_run(self, arg: str, ctx: b.TurnContext) -> None:
        cwd = self.settings.cwd
        item = p.CommandExecutionItem(
            id=ctx.new_item_id(),
            command=arg,
            cwd=cwd,
            status="inProgress",
            command_actions=[p.UnknownAction(command=arg)],
        )
        await ctx.emit(b.ItemStarted(item))
        decision = await ctx.request_approval(
            b.ApprovalRequest(
                kind="command",
                item_id=item.id,
                command=arg,
                cwd=cwd,
                command_actions=item.command_actions,
                reason="mock wants to run a command",
            )
        )
        if decision not in ("accept", "acceptForSession"):
            item.status = "declined"
            await ctx.emit(b.ItemCompleted(item))
            return
        started = time.monotonic()
        output: list[str] = []
        try:
            async with open_group_process(
                ["sh", "-c", arg], cwd=cwd, env=self.settings.env, name="mock-run"
            ) as proc:
                while (line := await proc.read_line()) is not None:
                    chunk = line.decode("utf-8", "replace") + "\n"
                    output.append(chunk)
                    await ctx.emit(b.CommandOutputDelta(item.id, chunk))
                code = await proc.wait()
        except ProcessError as exc:
            # e.g. the thread's cwd was removed: a readable turn failure (the runner closes the
            # item), not an "internal error in the mock backend".
            raise b.BackendError(f"mock: cannot run the command: {exc}") from exc
        item.aggregated_output = "".join(output)
        item.exit_code = code
        item.duration_ms = int((time.monotonic() - started) * 1000)
        item.status = "completed" if code == 0 else "failed"
        await ctx.emit(b.ItemCompleted(item))

    async def _do_write(self, arg: str, ctx: b.TurnContext) -> None:
        try:
            rel, _, content = arg.partition(" ")
            rel = shlex.split(rel)[0] if rel else ""
        except ValueError:
            rel = ""
        if not rel:
            raise b.BackendError("mock: /write needs a path")
        path = os.path.normpath(os.path.join(self.settings.cwd, rel))
        if os.path.commonpath([path, self.settings.cwd]) != self.settings.cwd:
            raise b.BackendError(f"mock: /write path escapes the thread's cwd: {rel}")
        content = content.replace("\\n", "\n")
        if not content.endswith("\n"):
            content += "\n"
        try:
            with open(path, encoding="utf-8") as fh:  # noqa: ASYNC230 - small, local
                old: str | None = fh.read()
        except FileNotFoundError:
            old = None
        diff = file_diff(rel, old, content)
        kind = p.PatchKindAdd() if old is None else p.PatchKindUpdate()
        item = p.FileChangeItem(
            id=ctx.new_item_id(),
            status="inProgress",
            changes=[p.FileUpdateChange(path=path, kind=kind, diff=diff)],
        )
        await ctx.emit(b.ItemStarted(item))
        decision = await ctx.request_approval(
            b.ApprovalRequest(
                kind="fileChange",
                item_id=item.id,
                reason=f"mock wants to write {rel}",
            )
        )
        if decision not in ("accept", "acceptForSession"):
            item.status = "declined"
        else:
            await trio.Path(path).write_text(content, encoding="utf-8")
            item.status = "completed"
            await ctx.emit(b.DiffUpdated(diff))
        await ctx.emit(b.ItemCompleted(item))

    async def _do_tool(self, arg: str, ctx: b.TurnContext) -> None:
        name, _, raw_args = arg.partition(" ")
        try:
            args: Any = json.loads(raw_args) if raw_args.strip() else {}
        except json.JSONDecodeError:
            args = raw_args
        item = p.DynamicToolCallItem(
            id=ctx.new_item_id(),
            tool=name or "tool",
            arguments=args,
            status="inProgress",
            namespace="mock",
        )
        await ctx.emit(b.ItemStarted(item))
        decision = await ctx.request_approval(
            b.ApprovalRequest(
                kind="tool",
                item_id=item.id,
                tool=item.tool,
                arguments=args,
            )
        )
        ok = decision in ("accept", "acceptForSession")
        item.status = "completed" if ok else "failed"
        item.success = ok
        item.content_items = [
            p.ToolOutputText(text=f"{item.tool} {'ran' if ok else 'was declined'}")
        ]
        await ctx.emit(b.ItemCompleted(item))

    async def _do_mcp(self, arg: str, ctx: b.TurnContext) -> None:
        tool, answer = await call_mcp_tool(self.settings, arg, ctx)
        await self._message(ctx, f"{tool}: {answer}")

    async def _do_ask(self, arg: str, ctx: b.TurnContext) -> None:
        item = p.DynamicToolCallItem(
            id=ctx.new_item_id(),
            tool="AskUserQuestion",
            arguments={"question": arg},
            status="inProgress",
            namespace="mock",
        )
        await ctx.emit(b.ItemStarted(item))
        answers = await ctx.request_user_input(
            item.id,
            [
                p.ToolRequestUserInputQuestion(id="q1", header="Question", question=arg or "?"),
            ],
        )
        picked = (answers or {}).get("q1") or []
        item.status = "completed" if answers is not None else "failed"
        item.success = answers is not None
        item.content_items = [p.ToolOutputText(text=", ".join(picked) or "(no answer)")]
        await ctx.emit(b.ItemCompleted(item))
        await self._message(ctx, f"answer: {', '.join(picked) or '(none)'}")


class MockBackend(b.Backend):
    def __init__(self) -> None:
        super().__init__(SPEC)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        yield MockSession(settings)


def create() -> MockBackend:
    return MockBackend()
