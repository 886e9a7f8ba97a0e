"""Claude Code stream-json → normalized backend events (pure; no I/O but reading the file a
Write/Edit is about to change, to show its diff).

One `ClaudeTurnMapper` per turn. Feed it every stdout message of the turn; it returns the
events to emit. Facts behind the mapping (measured on claude 2.1.197):
- with `--include-partial-messages`, `stream_event` carries the raw API SSE events; an
  `assistant` message arrives per content block, right before that block's
  `content_block_stop`, and is authoritative for the block's content;
- tool results come back in `user` messages (`tool_result` blocks + `tool_use_result`);
  Bash has no exit code field: a failure's content starts with `Exit code N`;
- an API failure produces a synthetic assistant message (`model: "<synthetic>"`) whose text is
  the error: it is reported as the turn's error, not as an agent message;
- every turn ends with exactly one `result`;
- with no key the CLI answers at once "Not logged in · Please run /login" (synthetic, error
  `authentication_failed`, no HTTP status); by default it retries a 401 and an unreachable API
  10 times over minutes (`system/api_retry`; `error_status` null when nothing answered): the
  mapper decides when to give up (`give_up`), and the session then interrupts the turn.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ... import protocol as p
from .. import base as b
from ..kit.api_errors import (
    ConnectionWatch,
    no_credentials,
    refused,
    refused_or_unreachable,
    unreachable,
)
from ..kit.diff import file_diff
from ..kit.mcp import is_dynamic, mcp_item
from ..kit.plan import todo_steps
from ..kit.usage import UsageFields, read_usage
from .mcp import split_tool
from .spec import SPEC

__all__ = [
    "EDIT_TOOLS",
    "STRUCTURED_OUTPUT",
    "ClaudeTurnMapper",
    "TurnResult",
    "api_url",
    "error_info_for_status",
    "structured_patch_diff",
]

EDIT_TOOLS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
#: The tool a `--json-schema` turn answers with: its input is the turn's final message.
STRUCTURED_OUTPUT = "StructuredOutput"
#: `tool_use_result` of a tool the CLI stopped because of an interrupt (claude 2.1.197).
_CUT_OFF = "User rejected tool use"
_EXIT_CODE = re.compile(r"^(?:Error: )?Exit code (\d+)")
#: What to check when the API cannot be reached.
_CHECK = "ANTHROPIC_BASE_URL"


def api_url(env: dict[str, str]) -> str:
    """The Messages API URL the CLI calls (ANTHROPIC_BASE_URL, else Anthropic's)."""
    base = env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
    return base.rstrip("/") + "/v1/messages"


def error_info_for_status(status: Any, error: Any = None) -> str:
    """Codex error info for an Anthropic API failure (HTTP status or the CLI's error kind)."""
    if status in (401, 403) or error == "authentication_failed":
        return "unauthorized"
    if status == 429 or error == "rate_limit":
        return "rateLimitExceeded"
    if status == 400 or error == "invalid_request":
        return "badRequest"
    if status == 529 or error == "overloaded":
        return "serverOverloaded"
    if isinstance(status, int) and status >= 500:
        return "internalServerError"
    if error == "billing_error":
        return "usageLimitExceeded"
    return "other"


def structured_patch_diff(path: str, hunks: Any, *, created: bool = False) -> str | None:
    """Claude's `structuredPatch` hunks → a unified diff (None if there is nothing usable)."""
    if not isinstance(hunks, list) or not hunks:
        return None
    out = [
        f"--- {'/dev/null' if created else 'a/' + path.lstrip('/')}\n",
        f"+++ b/{path.lstrip('/')}\n",
    ]
    for h in hunks:
        if not isinstance(h, dict):
            return None
        out.append(
            f"@@ -{h.get('oldStart', 0)},{h.get('oldLines', 0)} "
            f"+{h.get('newStart', 0)},{h.get('newLines', 0)} @@\n"
        )
        out.extend(f"{line}\n" for line in h.get("lines", []) if isinstance(line, str))
    return "".join(out)


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def proposed_change(tool: str, args: dict[str, Any], cwd: str) -> p.FileUpdateChange:
    """The change a Write/Edit/MultiEdit/NotebookEdit call proposes, diffed against the file
    as it is now (so the approval shows what will change)."""
    raw_path = str(args.get("file_path") or args.get("notebook_path") or "")
    path = raw_path if os.path.isabs(raw_path) else os.path.join(cwd, raw_path)
    old = _read_text(path)
    if tool == "Write":
        new = str(args.get("content", ""))
    elif tool == "Edit":
        new = _apply_edit(old or "", args)
    elif tool == "MultiEdit":
        new = old or ""
        for edit in args.get("edits") or []:
            if isinstance(edit, dict):
                new = _apply_edit(new, edit)
    else:  # NotebookEdit: cell-level; show the new source as the change
        new = str(args.get("new_source", ""))
        return p.FileUpdateChange(path=path, kind=p.PatchKindUpdate(), diff=new)
    kind = p.PatchKindAdd() if old is None else p.PatchKindUpdate()
    return p.FileUpdateChange(path=path, kind=kind, diff=file_diff(path.lstrip("/"), old, new))


def _apply_edit(text: str, edit: dict[str, Any]) -> str:
    old_s, new_s = str(edit.get("old_string", "")), str(edit.get("new_string", ""))
    if not old_s:
        return text
    return text.replace(old_s, new_s) if edit.get("replace_all") else text.replace(old_s, new_s, 1)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "\n".join(parts)
    return ""


def _mcp_complete(
    item: p.McpToolCallItem, content: Any, structured: Any, failed: bool
) -> p.McpToolCallItem:
    """An MCP call's item from its tool_result: the content blocks (claude gives a string:
    one text block) and the MCP `structuredContent`; or the error text (failed, declined)."""
    text = _text_of(content)
    if failed:
        return mcp_item(item.id, item.server, item.tool, item.arguments, error=text or "failed")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": text}]
    done = mcp_item(
        item.id, item.server, item.tool, item.arguments, status="completed", content=blocks
    )
    if isinstance(structured, dict) and done.result is not None:
        done.result.structured_content = structured.get("structuredContent")
    return done


_USAGE = UsageFields(
    input="input_tokens",
    more_input=("cache_read_input_tokens", "cache_creation_input_tokens"),
    output="output_tokens",
    cached="cache_read_input_tokens",
    cache_write="cache_creation_input_tokens",
)


def usage_breakdown(usage: Any) -> p.TokenUsageBreakdown | None:
    return read_usage(usage, _USAGE)


@dataclass
class TurnResult:
    status: Literal["completed", "interrupted", "failed"]
    error: p.TurnError | None
    usage: p.TokenUsageBreakdown | None
    session_id: str | None


@dataclass
class _Block:
    item_id: str
    kind: str  # text | thinking | tool_use | other
    streamed: list[str] = field(default_factory=list)  # the deltas so far
    done: bool = False  # completed by its `assistant` message, or stopped


@dataclass
class ClaudeTurnMapper:
    cwd: str
    backend_id: str = "claude"
    #: tool_use_id → item (started, waiting for its tool_result)
    tools: dict[str, p.ThreadItem] = field(default_factory=dict)
    #: tool_use_id → our approval decision ("decline"/"cancel" → the item is declined)
    decisions: dict[str, str] = field(default_factory=dict)
    session_id: str | None = None
    #: The Messages API the CLI calls (named in an unreachable or 401 error).
    url: str = "https://api.anthropic.com/v1/messages"
    #: Set once the CLI's retries of a 401 or an unreachable API are pointless: the turn's
    #: error (the session interrupts the CLI, and `result` reports this instead).
    give_up: p.TurnError | None = None
    watch: ConnectionWatch = field(default_factory=ConnectionWatch)
    _blocks: dict[tuple[str, int], _Block] = field(default_factory=dict)
    _msg_id: str | None = None
    _open_index: int | None = None
    _synthetic_error: str | None = None
    _synthetic_kind: Any = None
    _plan_tools: set[str] = field(default_factory=set)
    #: The thread's MCP servers by name (to split `mcp__<server>__<tool>`).
    mcp_servers: tuple[str, ...] = ()
    #: Calls of the client's own tools (`kit.mcp.is_dynamic`): the tool host reports them.
    _dynamic_calls: set[str] = field(default_factory=set)
    #: The turn has an output schema: its `StructuredOutput` call is the final message.
    structured: bool = False
    #: A turn that compacts the conversation: the engine shows the compaction item itself.
    compacting: bool = False

    def is_dynamic_tool(self, name: str) -> bool:
        """Whether `name` is a tool of threadline's server of the client's tools."""
        split = split_tool(name, self.mcp_servers)
        return split is not None and is_dynamic(split[0])

    def feed(self, msg: dict[str, Any]) -> list[b.BackendEvent]:
        kind = msg.get("type")
        if msg.get("parent_tool_use_id"):
            return []  # a sub-agent's own traffic: its Task tool item covers it
        if kind == "stream_event":  # the hot path (P3): most messages of a turn
            self.watch.progress()
            return self._stream_event(msg.get("event") or {})
        # (A stream event names the session its `system/init` named already.)
        sid = msg.get("session_id")
        if isinstance(sid, str) and sid != "default":
            self.session_id = sid
        if kind == "assistant":
            return self._assistant(msg)
        if kind == "user":
            return self._user(msg)
        if kind == "system":
            return self._system(msg)
        return []

    # -- partial messages ------------------------------------------------------------------------

    def _stream_event(self, ev: dict[str, Any]) -> list[b.BackendEvent]:
        etype = ev.get("type")
        if etype == "content_block_delta":
            return self._block_delta(ev)
        if etype == "message_start":
            message = ev.get("message") or {}
            self._msg_id = str(message.get("id") or "msg")
            return self._abandon_open(self._msg_id)
        index = ev.get("index")
        if not isinstance(index, int) or self._msg_id is None:
            return []
        key = (self._msg_id, index)
        if etype == "content_block_start":
            block = ev.get("content_block") or {}
            btype = block.get("type")
            self._open_index = index
            item_id = f"{self._msg_id}-{index}"
            if btype == "text":
                self._blocks[key] = _Block(item_id, "text")
                return [b.ItemStarted(p.AgentMessageItem(id=item_id, text=""))]
            if btype in ("thinking", "redacted_thinking"):
                self._blocks[key] = _Block(item_id, "thinking")
                return [
                    b.ItemStarted(p.ReasoningItem(id=item_id)),
                    b.ReasoningSummaryPartAdded(item_id, 0),
                ]
            self._blocks[key] = _Block(str(block.get("id") or item_id), "other")
            return []
        if etype == "content_block_stop":
            self._open_index = None
            if key in self._blocks:
                self._blocks[key].done = True
        return []

    def _block_delta(self, ev: dict[str, Any]) -> list[b.BackendEvent]:
        index, msg_id = ev.get("index"), self._msg_id
        blk = self._blocks.get((msg_id, index)) if isinstance(index, int) and msg_id else None
        if blk is None:
            return []
        delta = ev.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta" and blk.kind == "text":
            text = str(delta.get("text", ""))
            blk.streamed.append(text)
            return [b.AgentMessageDelta(blk.item_id, text)]
        if dtype == "thinking_delta" and blk.kind == "thinking":
            thinking = str(delta.get("thinking", ""))
            blk.streamed.append(thinking)
            return [b.ReasoningSummaryDelta(blk.item_id, thinking, 0)]
        return []

    def _abandon_open(self, msg_id: str) -> list[b.BackendEvent]:
        """Blocks of an earlier message that never finished: its stream was cut, and the CLI
        retried (claude answers a dropped stream with a non-streaming request). They are
        complete with what was streamed, so the retry's answer is a message of its own (and
        the turn's final message), not a second item left open behind the first."""
        events: list[b.BackendEvent] = []
        for (owner, _index), blk in self._blocks.items():
            if owner == msg_id or blk.done or blk.kind not in ("text", "thinking"):
                continue
            blk.done = True
            self._open_index = None
            text = "".join(blk.streamed)
            if blk.kind == "text":
                events.append(b.ItemCompleted(p.AgentMessageItem(id=blk.item_id, text=text)))
            else:
                summary = [text] if text else []
                events.append(b.ItemCompleted(p.ReasoningItem(id=blk.item_id, summary=summary)))
        return events

    # -- complete blocks -----------------------------------------------------------------------

    def _assistant(self, msg: dict[str, Any]) -> list[b.BackendEvent]:
        message = msg.get("message") or {}
        content = message.get("content") or []
        msg_id = str(message.get("id") or msg.get("uuid") or "msg")
        if message.get("model") == "<synthetic>" or msg.get("error"):
            self._synthetic_error = _text_of(content) or str(msg.get("error") or "API error")
            self._synthetic_kind = msg.get("error")
            return []
        events: list[b.BackendEvent] = self._abandon_open(msg_id)
        for offset, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            index = self._open_index if self._open_index is not None else offset
            known = self._blocks.get((msg_id, index))
            if known is not None:
                known.done = True
            fallback_id = f"{msg_id}-{index}" if len(content) == 1 else f"{msg_id}-b{offset}"
            item_id = known.item_id if known and known.kind != "other" else fallback_id
            if btype == "text":
                events.append(
                    b.ItemCompleted(p.AgentMessageItem(id=item_id, text=str(block.get("text", ""))))
                )
            elif btype in ("thinking", "redacted_thinking"):
                text = str(block.get("thinking", ""))
                events.append(
                    b.ItemCompleted(p.ReasoningItem(id=item_id, summary=[text] if text else []))
                )
            elif btype in ("tool_use", "server_tool_use"):
                events.extend(self._tool_use(block))
        return events

    def _tool_use(self, block: dict[str, Any]) -> list[b.BackendEvent]:
        tool_id = str(block.get("id") or "")
        name = str(block.get("name") or "tool")
        args = block.get("input") if isinstance(block.get("input"), dict) else {}
        assert isinstance(args, dict)
        if tool_id in self.tools:
            return []
        if name == "TodoWrite":
            self._plan_tools.add(tool_id)
            return [b.PlanUpdated(todo_steps(args.get("todos"), fallback_text="activeForm"))]
        if self.is_dynamic_tool(name):
            self._dynamic_calls.add(tool_id)  # no item of ours: the tool host shows it
            return []
        if name == STRUCTURED_OUTPUT and self.structured:
            self._dynamic_calls.add(tool_id)  # (its tool_result is claude's own receipt)
            text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
            return [b.ItemCompleted(p.AgentMessageItem(id=tool_id, text=text))]
        item = self.item_for_tool(tool_id, name, args)
        self.tools[tool_id] = item
        return [b.ItemStarted(item)]

    def item_for_tool(self, tool_id: str, name: str, args: dict[str, Any]) -> p.ThreadItem:
        if name == "Bash":
            command = str(args.get("command", ""))
            return p.CommandExecutionItem(
                id=tool_id,
                command=command,
                cwd=self.cwd,
                status="inProgress",
                command_actions=[p.UnknownAction(command=command)],
            )
        if name in EDIT_TOOLS:
            return p.FileChangeItem(
                id=tool_id, status="inProgress", changes=[proposed_change(name, args, self.cwd)]
            )
        split = split_tool(name, self.mcp_servers)
        if split is not None:
            return mcp_item(tool_id, split[0], split[1] or name, args)
        if name in ("WebSearch", "web_search"):
            query = str(args.get("query", ""))
            return p.WebSearchItem(
                id=tool_id, query=query, action=p.WebSearchActionSearch(query=query)
            )
        return p.DynamicToolCallItem(
            id=tool_id, tool=name, arguments=args, status="inProgress", namespace=self.backend_id
        )

    # -- tool results ------------------------------------------------------------------------------

    def _user(self, msg: dict[str, Any]) -> list[b.BackendEvent]:
        content = (msg.get("message") or {}).get("content")
        if not isinstance(content, list):
            return []
        structured = msg.get("tool_use_result")
        events: list[b.BackendEvent] = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = str(block.get("tool_use_id") or "")
            if tool_id in self._plan_tools or tool_id in self._dynamic_calls:
                continue
            item = self.tools.pop(tool_id, None)
            if item is None:
                continue
            is_error = bool(block.get("is_error"))
            declined = self.decisions.get(tool_id) in ("decline", "cancel")
            events.append(
                b.ItemCompleted(
                    self._complete(item, block.get("content"), structured, is_error, declined)
                )
            )
        return events

    def _complete(
        self, item: p.ThreadItem, content: Any, structured: Any, is_error: bool, declined: bool
    ) -> p.ThreadItem:
        text = _text_of(content)
        if isinstance(item, p.CommandExecutionItem):
            if declined:
                item.status = "declined"
                return item
            if is_error and structured == _CUT_OFF:
                # An approved command cut off by an interrupt. The CLI answers with its stock
                # "The user doesn't want to proceed with this tool use. The tool use was
                # rejected..." text, which would tell the user they rejected a command they
                # had approved and that was running. stream-json carries no partial output.
                item.status = "failed"
                item.exit_code = None
                item.aggregated_output = None
                return item
            if isinstance(structured, dict) and not is_error:
                out = str(structured.get("stdout", ""))
                err = str(structured.get("stderr", ""))
                item.aggregated_output = out + (("\n" if out and err else "") + err if err else "")
                item.exit_code = 0
                item.status = "completed"
            else:
                match = _EXIT_CODE.match(text)
                item.exit_code = int(match.group(1)) if match else None
                item.aggregated_output = (
                    _EXIT_CODE.sub("", text, count=1).lstrip("\n") if match else text
                )
                item.status = "failed" if is_error else "completed"
                if not is_error and item.exit_code is None:
                    item.exit_code = 0
            return item
        if isinstance(item, p.FileChangeItem):
            if declined:
                item.status = "declined"
                return item
            item.status = "failed" if is_error else "completed"
            if isinstance(structured, dict) and not is_error and item.changes:
                change = item.changes[0]
                created = structured.get("type") == "create"
                diff = structured_patch_diff(change.path, structured.get("structuredPatch"))
                if created:
                    new = str(structured.get("content", ""))
                    change.kind = p.PatchKindAdd()
                    change.diff = file_diff(change.path.lstrip("/"), None, new)
                elif diff:
                    change.diff = diff
            return item
        if isinstance(item, p.McpToolCallItem):
            return _mcp_complete(item, content, structured, is_error or declined)
        if isinstance(item, p.DynamicToolCallItem):
            item.status = "failed" if is_error or declined else "completed"
            item.success = not (is_error or declined)
            item.content_items = [p.ToolOutputText(text=text)] if text else []
            return item
        return item

    # -- system and result ----------------------------------------------------------------------

    def _system(self, msg: dict[str, Any]) -> list[b.BackendEvent]:
        sub = msg.get("subtype")
        if sub == "api_retry":
            status = msg.get("error_status")
            attempt, limit = msg.get("attempt"), msg.get("max_retries")
            self._check_retry(msg)
            return [
                b.RetryableError(
                    p.TurnError(
                        message=f"API request failed ({status or msg.get('error') or 'network'}); "
                        f"retrying (attempt {attempt} of {limit})",
                        codex_error_info=error_info_for_status(status, msg.get("error")),
                    )
                )
            ]
        if sub == "compact_boundary" and not self.compacting:
            from ...protocol import ContextCompactionItem

            item = ContextCompactionItem(id=str(msg.get("uuid") or "compaction"))
            return [b.ItemStarted(item), b.ItemCompleted(item)]
        return []

    def _check_retry(self, msg: dict[str, Any]) -> None:
        """Give up on a retried 401 (at its second retry) or on an API that nothing answered
        (`error_status` null) once the next attempt would come past the budget."""
        if self.give_up is not None:
            return
        status = msg.get("error_status")
        retrying = f"attempt {msg.get('attempt')} of {msg.get('max_retries')}"
        if status == 401 or msg.get("error") == "authentication_failed":
            if self.watch.refused():
                self.give_up = refused(SPEC, self.url, f"claude was retrying it ({retrying})")
        elif status is None:
            delay = msg.get("retry_delay_ms")
            next_delay = delay / 1000 if isinstance(delay, (int, float)) else None
            if self.watch.failed(next_delay):
                detail = f"no answer; claude was retrying ({retrying})"
                self.give_up = unreachable(
                    SPEC, self.url, _CHECK, detail, after=self.watch.elapsed()
                )

    def api_error(self, status: Any, message: str) -> p.TurnError | None:
        """The error that says what to do, for a refused, missing or unreachable API."""
        if status is None and self._synthetic_kind == "authentication_failed":
            return no_credentials(SPEC, message)  # "Not logged in · Please run /login"
        return refused_or_unreachable(SPEC, status, message, self.url, _CHECK)

    def result(self, msg: dict[str, Any]) -> TurnResult:
        usage = usage_breakdown(msg.get("usage"))
        session_id = msg.get("session_id") if isinstance(msg.get("session_id"), str) else None
        if self.give_up is not None:
            return TurnResult("failed", self.give_up, usage, session_id)
        if not msg.get("is_error"):
            return TurnResult("completed", None, usage, session_id)
        if msg.get("terminal_reason") in ("aborted_streaming", "aborted_tools"):
            return TurnResult("interrupted", None, usage, session_id)
        status = msg.get("api_error_status")
        errors = [
            e
            for e in (msg.get("errors") or [])
            if isinstance(e, str) and not e.startswith("[ede_diagnostic]")
        ]
        text = msg.get("result") if isinstance(msg.get("result"), str) else None
        message = (
            "; ".join(errors)
            or text
            or self._synthetic_error
            or (f"claude reported {msg.get('subtype') or 'an error'}")
        )
        error = self.api_error(status, message) or p.TurnError(
            message=message,
            codex_error_info=error_info_for_status(status, self._synthetic_kind),
            additional_details=f"HTTP {status}" if status else None,
        )
        return TurnResult("failed", error, usage, session_id)
