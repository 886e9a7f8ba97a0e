"""Turning a turn's notifications into terminal output.

Agent text streams as it arrives; reasoning is dimmed; a command shows as `$ command` with its
output and exit code; a file change shows its diff; a plan shows as a checklist. Colour is used
only on a terminal and never when NO_COLOR is set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import partialmethod
from typing import Any, TextIO

import msgspec

from .. import protocol as p
from ..client import Notification, UnknownNotification

__all__ = ["Renderer", "Style"]

_ENCODER = msgspec.json.Encoder()


class Style:
    """ANSI styles, or nothing when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and text else text

    dim = partialmethod(_wrap, "2")
    bold = partialmethod(_wrap, "1")
    red = partialmethod(_wrap, "31")
    green = partialmethod(_wrap, "32")
    yellow = partialmethod(_wrap, "33")
    cyan = partialmethod(_wrap, "36")

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        return cls(stream.isatty() and "NO_COLOR" not in os.environ)


class Renderer:
    """Writes one turn after another to `out`; knows what it is in the middle of, so blocks
    (text, reasoning, command output) start on their own line."""

    def __init__(self, out: TextIO | None = None, *, json_mode: bool = False) -> None:
        self.out = out or sys.stdout
        self.style = Style.for_stream(self.out)
        self.json_mode = json_mode
        self._block: str | None = None  # "text" | "reasoning" | "output"
        self._at_line_start = True
        #: Items seen by id, so an approval prompt can describe the item it is about.
        self.items: dict[str, p.ThreadItem] = {}
        self.last_output = time.monotonic()
        self.current: str | None = None  # what the agent is doing, for the progress line
        #: A turn's final error, held so the turn's last line reports it once.
        self._final_error: str | None = None

    # -- low level -------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        if not text:
            return
        self.out.write(text)
        self.out.flush()
        self._at_line_start = text.endswith("\n")
        self.last_output = time.monotonic()

    def newline(self) -> None:
        if not self._at_line_start:
            self.write("\n")

    def line(self, text: str) -> None:
        self.newline()
        self._block = None
        self.write(text + "\n")

    def _enter(self, block: str, header: str = "") -> None:
        if self._block != block:
            self.newline()
            if header:
                self.write(header)
            self._block = block

    # -- notifications ---------------------------------------------------------------------------

    def notification(self, n: Notification) -> None:
        if self.json_mode:
            self._json(n)
            return
        match n:
            case p.AgentMessageDeltaNotification(delta=delta):
                self._enter("text")
                self.write(delta)
            case (
                p.ReasoningSummaryTextDeltaNotification(delta=delta)
                | p.ReasoningTextDeltaNotification(delta=delta)
            ):
                self._enter("reasoning", self.style.dim("thinking: "))
                self.write(self.style.dim(delta))
            case p.ReasoningSummaryPartAddedNotification():
                if self._block == "reasoning":
                    self.write("\n" + self.style.dim("thinking: "))
            case p.CommandExecutionOutputDeltaNotification(delta=delta):
                self._enter("output")
                self.write(self.style.dim(delta))
            case p.ItemStartedNotification(item=item):
                self.items[item.id] = item
                self._started(item)
            case p.ItemCompletedNotification(item=item):
                self.items[item.id] = item
                self._completed(item)
            case p.TurnPlanUpdatedNotification(plan=plan, explanation=explanation):
                marks = {"completed": "[x]", "inProgress": "[>]", "pending": "[ ]"}
                lines = [self.style.bold("plan:")] + ([f"  {explanation}"] if explanation else [])
                lines += [f"  {marks.get(step.status, '[ ]')} {step.step}" for step in plan]
                self.line("\n".join(lines))
            case p.ErrorNotification(error=error, will_retry=will_retry):
                if will_retry:
                    self.line(self.style.red(f"error: {error.message} (retrying)"))
                else:
                    # The turn's end says it once: `— failed: <the same message>`.
                    self._final_error = error.message
            case p.WarningNotification(message=message):
                self.line(self.style.yellow(f"warning: {message}"))
            case p.TurnCompletedNotification(turn=turn):
                self._turn_completed(turn.status, turn.error.message if turn.error else None)
            case _:
                pass

    def _json(self, n: Notification) -> None:
        from ..protocol import NOTIFICATIONS

        if isinstance(n, UnknownNotification):
            method, params = n.method, n.params
        else:
            method = next(m for m, t in NOTIFICATIONS.items() if isinstance(n, t))
            params = msgspec.json.decode(_ENCODER.encode(n))
        self.write(json.dumps({"method": method, "params": params}, ensure_ascii=False) + "\n")

    def _started(self, item: p.ThreadItem) -> None:
        s = self.style
        match item:
            case p.CommandExecutionItem(command=command):
                self.current = f"running: {command}"
                self.line(s.cyan(f"$ {command}"))
                self._block = "output"
            case p.FileChangeItem(changes=changes):
                self.current = "changing files"
                for change in changes:
                    self.line(s.bold(f"~ {change.path} ({_kind(change.kind)})"))
                    self.diff(change.diff)
            case p.DynamicToolCallItem(tool=tool, arguments=arguments):
                self.current = f"tool: {tool}"
                self.line(s.cyan(f"» {tool} {_short_json(arguments)}"))
            case p.McpToolCallItem(server=server, tool=tool, arguments=arguments):
                self.current = f"tool: {server}.{tool}"
                self.line(s.cyan(f"» {server}.{tool} {_short_json(arguments)}"))
            case p.WebSearchItem(query=query):
                self.current = "searching the web"
                self.line(s.cyan(f"» web search: {query}"))
            case p.ContextCompactionItem():
                self.current = "compacting the conversation"
                self.line(s.cyan("» compacting the conversation"))
            case p.ReasoningItem():
                self.current = "thinking"
            case p.AgentMessageItem():
                self.current = "writing"
                self._block = None  # a new message starts on its own line
            case _:
                pass

    def _completed(self, item: p.ThreadItem) -> None:
        s = self.style
        match item:
            case p.CommandExecutionItem(status=status, exit_code=code):
                if status == "completed" and code == 0:
                    self.line(s.dim("(exit 0)"))
                elif status == "declined":
                    self.line(s.yellow("(declined)"))
                else:
                    self.line(s.red(f"({status}, exit {code})"))
            case p.FileChangeItem(status=status, changes=changes):
                paths = ", ".join(c.path for c in changes)
                paint = s.dim if status == "completed" else s.yellow
                self.line(paint(f"({status}: {paths})"))
            case p.DynamicToolCallItem(status=status) | p.McpToolCallItem(status=status):
                if status != "completed":
                    self.line(s.yellow(f"({status})"))
            case p.PlanItem(text=text):
                self.line(s.bold("plan: ") + text)
            case p.ContextCompactionItem():
                self.line(s.dim("(conversation compacted)"))
            case _:
                pass
        self.current = None

    def diff(self, diff: str) -> None:
        s = self.style
        for raw in diff.splitlines():
            if raw.startswith("+") and not raw.startswith("+++"):
                self.write(s.green(raw) + "\n")
            elif raw.startswith("-") and not raw.startswith("---"):
                self.write(s.red(raw) + "\n")
            elif raw.startswith("@@"):
                self.write(s.cyan(raw) + "\n")
            else:
                self.write(s.dim(raw) + "\n")

    def _turn_completed(self, status: str, error: str | None) -> None:
        s = self.style
        final, self._final_error = self._final_error, None
        if final is not None and final != error:
            self.line(s.red(f"error: {final}"))
        if status == "completed":
            self.line(s.dim("— done"))
        elif status == "interrupted":
            self.line(s.yellow("— interrupted"))
        else:
            self.line(s.red(f"— failed: {error or 'unknown error'}"))


def _kind(kind: Any) -> str:
    return {"PatchKindAdd": "new", "PatchKindDelete": "deleted"}.get(type(kind).__name__, "edit")


def _short_json(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not None else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"
