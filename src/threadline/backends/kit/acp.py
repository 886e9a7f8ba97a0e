"""A shared Agent Client Protocol (ACP) client, used by the Gemini and OpenCode backends.

An ACP agent (`gemini --acp`, `opencode acp`) is one long-lived process speaking JSON-RPC 2.0
over stdio that hosts many sessions. `AcpPool` keeps one agent process per (command, cwd) and
multiplexes threads onto it as sessions; a process lives in the server's threads nursery (see
`Backend.attach`) and is stopped a while after its last session closed. Without an attached
nursery (a backend used on its own) each session gets a private process.

`AcpSession` maps one thread onto one ACP session: `session/prompt` per turn, `session/update`
notifications → normalized events, `session/request_permission` → our approval router, interrupt
→ `session/cancel`. `fs/read_text_file` / `fs/write_text_file` requests from the agent are
answered inside the thread's cwd only.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from ...channels import receive_ready
from ...procs.group import (
    GroupProcess,
    LineTooLong,
    ProcessError,
    processes_gone,
)
from ...protocol import (
    AgentMessageItem,
    CommandExecutionItem,
    DynamicToolCallItem,
    FileChangeItem,
    FileUpdateChange,
    PatchKindAdd,
    PatchKindDelete,
    PatchKindUpdate,
    ReasoningItem,
    ThreadItem,
    ThreadTokenUsage,
    TokenUsageBreakdown,
    ToolOutputText,
    TurnError,
    TurnPlanStep,
    UnknownAction,
    WebSearchActionSearch,
    WebSearchItem,
)
from .. import base as b
from ..registry import SPECS
from .api_errors import no_credentials
from .spawn import open_cli_process

__all__ = ["AcpError", "AcpHost", "AcpPool", "AcpSession", "AcpTurnMapper", "error_info_for_code"]

log = logging.getLogger("threadline.backend.acp")

#: How long an agent process with no sessions stays up (the next thread reuses it).
IDLE_CLOSE_SECONDS = 120.0
#: After `session/load`: the history replay is over once no update came for this long...
REPLAY_QUIET = 0.25
#: ... or after this long in all.
REPLAY_MAX = 10.0
#: How long an interrupted prompt may stay unanswered when the turn context does not say
#: (the server's interrupt grace, `ServerConfig.interrupt_grace`).
DEFAULT_INTERRUPT_GRACE = 5.0
#: ACP's error code for "authentication required" (an agent with no credentials).
AUTH_REQUIRED = -32000
_POLL_FIRST = 0.001  # first poll period after an interrupt (doubles up to _POLL_MAX)
_POLL_MAX = 0.02


class AcpError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def error_info_for_code(code: int, message: str) -> str:
    """Codex error info for an ACP error (Gemini uses the HTTP status as the code)."""
    text = message.lower()
    if code in (401, 403) or "401" in text or "unauthorized" in text or "api key" in text:
        return "unauthorized"
    if code == 429 or "429" in text or "rate limit" in text:
        return "rateLimitExceeded"
    if code == 400:
        return "badRequest"
    if 500 <= code < 600 or any(s in text for s in ("500", "internal server error", "overloaded")):
        return "internalServerError"
    return "other"


# -- the agent process ----------------------------------------------------------------------------


RequestHandler = Callable[[str, dict[str, Any]], Any]
#: Called with the host and each line its agent writes to stderr (must not block).
StderrHandler = Callable[["AcpHost", str], None]


class AcpHost:
    """One ACP agent process and its JSON-RPC connection."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        name: str,
        on_stderr_line: StderrHandler | None = None,
    ) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.name = name
        self.on_stderr_line = on_stderr_line
        self.proc: GroupProcess | None = None
        self.init_result: dict[str, Any] = {}
        self.refs = 0
        self.alive = False
        #: Set when a session gave up on a prompt the agent never answered (a turn timeout, a
        #: hard cancel): the agent may be wedged, so no new session is put on it and it stops
        #: once its last session is gone.
        self.retired = False
        self._next_id = 0
        self._pending: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._write_lock = trio.Lock()
        self._stop = trio.Event()
        self._stopped = trio.Event()
        #: sessionId → callbacks of the session using it
        self.sessions: dict[str, AcpSession] = {}
        #: sessionId → its `session/prompt` the agent has not answered yet (also after the
        #: turn that sent it ended: the session is busy until the answer comes).
        self.prompts: dict[str, _Prompt] = {}
        self._idle_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None  # the host task's: prompts in flight

    # lifetime

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host task: spawn, initialize, serve until stopped. Never raises after `started`."""
        started = False
        early_exit: b.BackendError | None = None
        handler = self.on_stderr_line
        try:
            async with open_cli_process(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin="pipe",
                name=self.name,
                grace=3.0,
            ) as proc:
                if handler is not None:
                    proc.on_stderr_line = lambda line: handler(self, line)
                self.proc = proc
                self.alive = True
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._read, proc, nursery.cancel_scope)
                    self.init_result = (
                        await self.request(
                            "initialize",
                            {
                                "protocolVersion": 1,
                                # fs is not advertised: Gemini then does its own file I/O; OpenCode
                                # calls fs/* anyway and we answer it (confined to the cwd).
                                "clientCapabilities": {
                                    "fs": {"readTextFile": False, "writeTextFile": False},
                                    "terminal": False,
                                },
                                "clientInfo": {"name": "threadline", "version": "1"},
                            },
                            timeout=120,
                        )
                        or {}
                    )
                    started = True
                    task_status.started()
                    await self._stop.wait()
                    await proc.close_stdin()  # ACP agents exit 0 on stdin EOF
                    with trio.move_on_after(3):
                        await proc.wait()
                    nursery.cancel_scope.cancel()
            if not started:
                # The agent exited before answering `initialize`: the reader's end cancelled
                # the pending request, so nothing raised (and `nursery.start` would report
                # "child exited without calling task_status.started()" as an internal error).
                early_exit = self.failure("exited during start-up")
        except (ProcessError, AcpError, b.BackendError) as exc:
            if not started:
                raise b.BackendError(f"{self.name}: {exc}", codex_error_info="other") from None
            log.warning("%s stopped: %s", self.name, exc)
        except Exception:
            if not started:
                raise
            log.exception("%s crashed", self.name)
        finally:
            self.alive = False
            self._stopped.set()
            for chan in self._pending.values():
                chan.close()
            self._pending.clear()
            for session in list(self.sessions.values()):
                session.host_died()
        if early_exit is not None:
            raise early_exit

    def stop(self) -> None:
        self._stop.set()

    def start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` in the host task (it ends with the agent process)."""
        if self._nursery is None or not self.alive:
            raise self.failure("is not running")
        try:
            self._nursery.start_soon(fn, *args)
        except RuntimeError:  # the nursery is closing: the agent is going away
            raise self.failure("is not running") from None

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def failure(self, what: str) -> b.BackendError:
        tail = self.proc.stderr_tail(2000) if self.proc is not None else ""
        code = self.proc.returncode if self.proc is not None else None
        message = f"{self.name} {what}"
        if code is not None and code < 0:
            with suppress(ValueError):
                message += f" (killed by {signal.Signals(-code).name})"
        elif code is not None:
            message += f" (exit code {code})"
        if tail:
            message += f": {tail}"
        return b.BackendError(message, codex_error_info="other", additional_details=tail or None)

    # JSON-RPC

    async def _read(self, proc: GroupProcess, scope: trio.CancelScope) -> None:
        decoder = msgspec.json.Decoder()
        async with trio.open_nursery() as handlers:
            while True:
                try:
                    line = await proc.read_line()
                except LineTooLong as exc:
                    log.warning("%s printed an oversized line: %s", self.name, exc)
                    continue
                if line is None:
                    break
                try:
                    msg = decoder.decode(line)
                except msgspec.DecodeError:
                    log.debug("%s (non-JSON stdout): %s", self.name, line[:200])
                    continue
                if not isinstance(msg, dict):
                    continue
                if "method" in msg and "id" in msg:
                    handlers.start_soon(self._answer, msg)
                elif "method" in msg:
                    self._notification(msg)
                elif "id" in msg:
                    chan = (
                        self._pending.pop(msg["id"], None) if isinstance(msg["id"], int) else None
                    )
                    if chan is not None:
                        chan.send_nowait(msg)
            await proc.wait()
            self.alive = False
            for session in list(self.sessions.values()):
                session.host_died()
            handlers.cancel_scope.cancel()
        scope.cancel()

    async def _send(self, message: dict[str, Any]) -> None:
        proc = self.proc
        if proc is None or not self.alive:
            raise self.failure("is not running")
        async with self._write_lock:
            try:
                await proc.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            except ProcessError:
                raise self.failure("stopped accepting input") from None

    async def request(self, method: str, params: Any, timeout: float | None = None) -> Any:
        rid = self._next_id
        self._next_id += 1
        log.debug("%s: request %s %s", self.name, rid, method)
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self._pending[rid] = send
        try:
            await self._send({"id": rid, "method": method, "params": params})
            with trio.fail_after(timeout if timeout is not None else float("inf")):
                try:
                    response = await recv.receive()
                except trio.EndOfChannel:
                    raise self.failure(f"exited while answering {method}") from None
        except trio.TooSlowError:
            raise b.BackendError(
                f"{self.name} did not answer {method} in time", codex_error_info="other"
            ) from None
        finally:
            self._pending.pop(rid, None)
        error = response.get("error")
        log.debug("%s: response %s (%s)%s", self.name, rid, method, " error" if error else "")
        if error is not None:
            if not isinstance(error, dict):
                error = {"code": -32603, "message": str(error)}
            code = error.get("code")
            raise AcpError(
                code if isinstance(code, int) else -32603,
                str(error.get("message", "error")),
                error.get("data"),
            )
        return response.get("result")

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"method": method, "params": params})

    def _notification(self, msg: dict[str, Any]) -> None:
        params = msg.get("params") or {}
        if msg.get("method") == "session/update":
            session = self.sessions.get(str(params.get("sessionId")))
            if session is not None and not session.ignores_updates:
                session.on_update(params.get("update") or {})

    async def _answer(self, msg: dict[str, Any]) -> None:
        method = str(msg.get("method"))
        params = msg.get("params") or {}
        session = self.sessions.get(str(params.get("sessionId")))
        try:
            if session is None:
                raise AcpError(-32602, f"unknown session {params.get('sessionId')!r}")
            result = await session.on_request(method, params)
            reply: dict[str, Any] = {"id": msg["id"], "result": result}
        except AcpError as exc:
            reply = {"id": msg["id"], "error": {"code": exc.code, "message": exc.message}}
        except Exception as exc:
            log.exception("answering %s", method)
            reply = {"id": msg["id"], "error": {"code": -32603, "message": str(exc)}}
        with suppress(b.BackendError):
            await self._send(reply)


class AcpPool:
    """One agent process per (argv, cwd), shared by the threads in that cwd."""

    def __init__(self, name: str, on_stderr_line: StderrHandler | None = None) -> None:
        self.name = name
        self.on_stderr_line = on_stderr_line
        self._nursery: trio.Nursery | None = None
        self._hosts: dict[tuple[tuple[str, ...], str], AcpHost] = {}
        self._lock = trio.Lock()

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery

    @asynccontextmanager
    async def host(
        self,
        argv: Sequence[str],
        cwd: str,
        env: dict[str, str],
        key_extra: str = "",
        session_id: str | None = None,
    ) -> AsyncIterator[AcpHost]:
        """A running agent for `argv` in `cwd` (`key_extra`: whatever else must match for two
        threads to share a process, e.g. the permission config in its environment).

        `session_id`: the ACP session about to be loaded on it. If that session's last prompt
        (an interrupted turn's, see `AcpSession.run_turn`) is still unanswered on the agent,
        the load waits for the answer first; an agent that gave up on it past its deadline
        was retired meanwhile, and a new one is started."""
        if self._nursery is None:
            # No server nursery: a private process for this session.
            host = AcpHost(argv, cwd, env, self.name, self.on_stderr_line)
            async with trio.open_nursery() as nursery:
                await nursery.start(host.run)
                try:
                    yield host
                finally:
                    host.stop()
            return
        key = (tuple(argv), cwd + "\0" + key_extra)
        while True:
            async with self._lock:
                found = self._hosts.get(key)
                if found is None or not found.alive or found.retired:
                    found = AcpHost(argv, cwd, env, self.name, self.on_stderr_line)
                    await self._nursery.start(found.run)
                    self._hosts[key] = found
                busy = found.prompts.get(session_id) if session_id else None
                if busy is None or busy.done.is_set():
                    host = found
                    host.refs += 1
                    if host._idle_scope is not None:
                        host._idle_scope.cancel()
                        host._idle_scope = None
                    break
            # (Bounded: an unanswered interrupted prompt has a deadline; see `_Prompt`.)
            await busy.done.wait()
        try:
            yield host
        finally:
            host.refs -= 1
            if host.refs == 0 and host.retired:
                if self._hosts.get(key) is host:
                    del self._hosts[key]
                host.stop()
            elif host.refs == 0 and self._nursery is not None:
                self._nursery.start_soon(self._close_when_idle, key, host)

    async def _close_when_idle(self, key: tuple[tuple[str, ...], str], host: AcpHost) -> None:
        with trio.CancelScope() as scope:
            host._idle_scope = scope
            await trio.sleep(IDLE_CLOSE_SECONDS)
            if host.refs == 0:
                if self._hosts.get(key) is host:
                    del self._hosts[key]
                host.stop()


# -- mapping ACP session/update → events -----------------------------------------------------------


def _content_text(content: Any) -> str:
    """Text of an ACP ContentBlock or ToolCallContent list."""
    if isinstance(content, dict):
        if content.get("type") == "text":
            return str(content.get("text", ""))
        if content.get("type") == "content":
            return _content_text(content.get("content"))
        return ""
    if isinstance(content, list):
        return "".join(_content_text(c) for c in content)
    return ""


def _unified(path: str, old: str | None, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile="/dev/null" if not old else f"a/{path.lstrip('/')}",
            tofile=f"b/{path.lstrip('/')}",
        )
    )


def _diff_changes(content: Any) -> list[FileUpdateChange]:
    changes = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict) or block.get("type") != "diff":
            continue
        path = str(block.get("path", ""))
        old, new = block.get("oldText"), str(block.get("newText") or "")
        meta_kind = (block.get("_meta") or {}).get("kind")
        if meta_kind == "delete":
            kind: PatchKindAdd | PatchKindDelete | PatchKindUpdate = PatchKindDelete()
        elif meta_kind == "add" or not old:
            kind = PatchKindAdd()
        else:
            kind = PatchKindUpdate()
        changes.append(FileUpdateChange(path=path, kind=kind, diff=_unified(path, old, new)))
    return changes


@dataclass
class AcpTurnMapper:
    """Per-turn state: turns the session/update stream into item events."""

    cwd: str
    backend_id: str
    new_id: Callable[[], str]
    events: list[b.BackendEvent] = field(default_factory=list)
    tools: dict[str, ThreadItem] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    declined: set[str] = field(default_factory=set)
    _message: AgentMessageItem | None = None
    _message_key: Any = None
    _message_text: list[str] = field(default_factory=list)
    _thought: ReasoningItem | None = None
    _thought_text: list[str] = field(default_factory=list)
    #: Set once the turn is being cancelled: a command that "completes" after that was cut
    #: short (Gemini reports its killed shell as completed, "Command cancelled by user.").
    cancelled: bool = False
    #: True once the agent announced a tool call this turn (its model answer was complete).
    tool_seen: bool = False

    def take(self) -> list[b.BackendEvent]:
        out, self.events = self.events, []
        return out

    def close_text(self) -> None:
        if self._message is not None:
            self._message.text = "".join(self._message_text)
            self.events.append(b.ItemCompleted(self._message))
            self._message, self._message_text = None, []
        if self._thought is not None:
            text = "".join(self._thought_text)
            self._thought.summary = [text] if text else []
            self.events.append(b.ItemCompleted(self._thought))
            self._thought, self._thought_text = None, []

    def feed(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            text = _content_text(update.get("content"))
            if text.startswith("[MODE_UPDATE]"):
                # Gemini reports mode switches as message text: a notice, not the answer.
                self.events.append(
                    b.Warning(
                        f"{self.backend_id} mode changed: {text[len('[MODE_UPDATE]') :].strip()}"
                    )
                )
                return
            key = update.get("messageId")
            if self._thought is not None:
                self.close_text()
            if self._message is not None and key is not None and key != self._message_key:
                self.close_text()
            if self._message is None:
                self._message = AgentMessageItem(id=self.new_id(), text="")
                self._message_key = key
                self.events.append(b.ItemStarted(AgentMessageItem(id=self._message.id, text="")))
            if text:
                self._message_text.append(text)
                self.events.append(b.AgentMessageDelta(self._message.id, text))
        elif kind == "agent_thought_chunk":
            text = _content_text(update.get("content"))
            if self._message is not None:
                self.close_text()
            if self._thought is None:
                self._thought = ReasoningItem(id=self.new_id())
                self.events.append(b.ItemStarted(ReasoningItem(id=self._thought.id)))
                self.events.append(b.ReasoningSummaryPartAdded(self._thought.id, 0))
            if text:
                self._thought_text.append(text)
                self.events.append(b.ReasoningSummaryDelta(self._thought.id, text, 0))
        elif kind in ("tool_call", "tool_call_update"):
            self.close_text()
            self._tool(update)
        elif kind == "plan":
            steps = []
            for entry in update.get("entries") or []:
                if isinstance(entry, dict):
                    status = {"in_progress": "inProgress", "completed": "completed"}.get(
                        str(entry.get("status")), "pending"
                    )
                    steps.append(TurnPlanStep(step=str(entry.get("content", "")), status=status))  # type: ignore[arg-type]
            self.events.append(b.PlanUpdated(steps))
        # user_message_chunk (history replay), available_commands_update, usage_update,
        # config_option_update, current_mode_update: nothing for the client here.

    def tool_item(self, call: dict[str, Any]) -> ThreadItem:
        """The item for an ACP tool call (from a tool_call or a permission request)."""
        call_id = str(call.get("toolCallId") or self.new_id())
        kind = call.get("kind")
        raw = call.get("rawInput") if isinstance(call.get("rawInput"), dict) else {}
        assert isinstance(raw, dict)
        title = str(call.get("title") or "")
        if kind == "execute":
            command = str(raw.get("command") or title)
            cwd = str(raw.get("cwd") or raw.get("workdir") or raw.get("dir_path") or self.cwd)
            return CommandExecutionItem(
                id=call_id,
                command=command,
                cwd=cwd,
                status="inProgress",
                command_actions=[UnknownAction(command=command)],
            )
        if kind in ("edit", "delete", "move"):
            changes = _diff_changes(call.get("content"))
            if not changes:
                locations = [
                    loc.get("path")
                    for loc in call.get("locations") or []
                    if isinstance(loc, dict) and isinstance(loc.get("path"), str)
                ]
                # (Gemini's title is prose, "Writing to notes.txt": the location is the path.)
                path = str(
                    raw.get("filePath") or raw.get("file_path") or next(iter(locations), title)
                )
                if path and not os.path.isabs(path):
                    path = os.path.join(self.cwd, path)
                new = raw.get("content")
                changes = [
                    FileUpdateChange(
                        path=path,
                        kind=PatchKindAdd() if not os.path.exists(path) else PatchKindUpdate(),
                        diff=_unified(path, None, str(new)) if isinstance(new, str) else "",
                    )
                ]
            return FileChangeItem(id=call_id, changes=changes, status="inProgress")
        if kind == "fetch" and "search" in title.lower():
            query = str(raw.get("query") or title)
            return WebSearchItem(id=call_id, query=query, action=WebSearchActionSearch(query=query))
        return DynamicToolCallItem(
            id=call_id,
            tool=title or str(kind or "tool"),
            arguments=raw or None,
            status="inProgress",
            namespace=self.backend_id,
        )

    def start_tool(self, call: dict[str, Any]) -> ThreadItem:
        call_id = str(call.get("toolCallId") or "")
        item = self.tools.get(call_id)
        self.tool_seen = True
        if item is None:
            item = self.tool_item(call)
            self.tools[item.id] = item
            self.events.append(b.ItemStarted(item))
        return item

    def _tool(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        call_id = str(update.get("toolCallId") or "")
        item = self.start_tool(update)
        status = update.get("status")
        raw = update.get("rawInput")
        if isinstance(item, CommandExecutionItem) and isinstance(raw, dict) and raw.get("command"):
            item.command = str(raw["command"])
        text = _content_text(update.get("content"))
        # Output comes in updates only: a first `tool_call`'s content describes the call
        # (Gemini: "[current working directory …] (description)"), it is not output.
        if isinstance(item, CommandExecutionItem) and text and kind == "tool_call_update":
            seen = self.outputs.get(call_id, "")
            # OpenCode sends growing snapshots of the output: forward only what is new.
            if text.startswith(seen) and len(text) > len(seen):
                self.events.append(b.CommandOutputDelta(item.id, text[len(seen) :]))
            self.outputs[call_id] = text
        if status in ("completed", "failed"):
            self.complete_tool(call_id, failed=status == "failed", update=update)

    def complete_tool(
        self,
        call_id: str,
        *,
        failed: bool,
        declined: bool = False,
        update: dict[str, Any] | None = None,
    ) -> None:
        item = self.tools.pop(call_id, None)
        if item is None:
            return
        update = update or {}
        text = _content_text(update.get("content")) or self.outputs.get(call_id, "")
        raw_out = update.get("rawOutput") if isinstance(update.get("rawOutput"), dict) else {}
        assert isinstance(raw_out, dict)
        declined = declined or call_id in self.declined
        if isinstance(item, CommandExecutionItem):
            meta = raw_out.get("metadata") if isinstance(raw_out.get("metadata"), dict) else {}
            assert isinstance(meta, dict)
            out = raw_out.get("output") if isinstance(raw_out.get("output"), str) else None
            item.aggregated_output = out if out is not None else (text or None)
            code = meta.get("exit")
            item.exit_code = code if isinstance(code, int) else None
            failed = failed or self.cancelled
            item.status = "declined" if declined else ("failed" if failed else "completed")
        elif isinstance(item, FileChangeItem):
            changes = _diff_changes(update.get("content"))
            if changes:
                item.changes = changes
            item.status = "declined" if declined else ("failed" if failed else "completed")
        elif isinstance(item, DynamicToolCallItem):
            item.status = "failed" if failed or declined else "completed"
            item.success = not (failed or declined)
            item.content_items = [ToolOutputText(text=text)] if text else []
        self.events.append(b.ItemCompleted(item))


def usage_from_prompt_result(result: dict[str, Any]) -> TokenUsageBreakdown | None:
    usage = result.get("usage")
    if isinstance(usage, dict):  # OpenCode
        inp = int(usage.get("inputTokens") or 0)
        out = int(usage.get("outputTokens") or 0)
        return TokenUsageBreakdown(
            total_tokens=int(usage.get("totalTokens") or inp + out),
            input_tokens=inp,
            cached_input_tokens=int(usage.get("cachedReadTokens") or 0),
            output_tokens=out,
            reasoning_output_tokens=int(usage.get("thoughtTokens") or 0),
            cache_write_input_tokens=int(usage.get("cachedWriteTokens") or 0),
        )
    quota = ((result.get("_meta") or {}).get("quota") or {}).get("token_count")
    if isinstance(quota, dict):  # Gemini
        inp = int(quota.get("input_tokens") or 0)
        out = int(quota.get("output_tokens") or 0)
        return TokenUsageBreakdown(
            total_tokens=inp + out,
            input_tokens=inp,
            cached_input_tokens=0,
            output_tokens=out,
            reasoning_output_tokens=0,
        )
    return None


# -- one thread = one ACP session ---------------------------------------------------------------


#: Marks the end of a turn's updates in a session's update channel.
_PROMPT_DONE: dict[str, Any] = {"sessionUpdate": "__threadline_prompt_done__"}
#: Marks the end of an interrupted turn that ends before the agent answered its prompt.
_EARLY_END: dict[str, Any] = {"sessionUpdate": "__threadline_early_end__"}


class _Prompt:
    """One `session/prompt` in flight. It runs in the agent process's task, not the turn's,
    so an interrupted turn can end before the agent answers it (Gemini first walks the killed
    command's process tree with pgrep, OpenCode answers 70-800 ms late): the session stays
    busy until the answer comes, and the next prompt (or a `session/load` of the session)
    waits for it. Once the turn has ended without it (`detached`), nothing the agent sends for
    the session reaches a turn until the next prompt, and the answer must come by the
    scope's deadline (the interrupt grace, as when the turn waited for it), or the agent is
    retired as a hung one."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.answered = False  # with a result or an ACP error
        self.result: Any = None
        self.error: AcpError | None = None
        self.failure: b.BackendError | None = None  # the request itself failed
        self.detached = False  # its turn has ended
        self.abandoned = False  # given up on (the agent was retired)


_PERMISSION_KIND = {
    "accept": "allow_once",
    "acceptForSession": "allow_always",
    "decline": "reject_once",
    "cancel": "reject_once",
}


class AcpSession(b.BackendSession):
    """A thread's ACP session on a (possibly shared) agent process."""

    #: Our approval decision → the ACP permission option kind answered. A backend whose agent
    #: grants more for `allow_always` than the user approved maps acceptForSession to
    #: `allow_once` instead (the approval router then remembers the exact grant itself).
    permission_kinds: dict[str, str] = _PERMISSION_KIND
    #: Whether the agent keeps the prompt of a failed or cancelled turn in its conversation.
    #: If not (Gemini), the session id is recorded for resume, and the role bootstrap counted
    #: as delivered, only once a turn finished (the next prompt carries the role again).
    keeps_unfinished_prompts: bool = True

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
        self._total: TokenUsageBreakdown | None = None
        #: The last prompt sent on this session (possibly still unanswered).
        self._prompt: _Prompt | None = None
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

    @property
    def ignores_updates(self) -> bool:
        """True from the moment a turn ended without its prompt's answer until the next
        prompt: whatever the agent still sends for the session belongs to no turn."""
        return self._prompt is not None and self._prompt.detached

    # host callbacks (run in the host's reader task: never block)

    def on_update(self, update: dict[str, Any]) -> None:
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
            if update is None or update is _PROMPT_DONE or update is _EARLY_END:
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
        params = {"cwd": self.settings.cwd, "mcpServers": self._mcp_servers()}
        try:
            if self.settings.backend_session_id:
                sid = self.settings.backend_session_id
                if self.before_load is not None:
                    await self.before_load(sid)
                self.host.sessions[sid] = self
                self.session_id = sid
                await self.host.request("session/load", {**params, "sessionId": sid}, timeout=120)
                await self._skip_replay()
            else:
                result = await self.host.request("session/new", params, timeout=120) or {}
                self.session_id = str(result.get("sessionId"))
                self.host.sessions[self.session_id] = self
                self.created(result)
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

    async def configure(self) -> None:
        """Backend hook after the session exists (modes, model)."""

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

    def _mcp_servers(self) -> list[Any]:
        servers = self.settings.config.get("mcpServers")
        return servers if isinstance(servers, list) else []

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
        if any(s is not self and s._turn_ctx is not None for s in self.host.sessions.values()):
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

    def _may_end_early(self, prompt: _Prompt, mapper: AcpTurnMapper) -> bool:
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

    async def _end_early(self, prompt: _Prompt, mapper: AcpTurnMapper) -> None:
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

    async def _run_prompt(self, prompt: _Prompt, params: dict[str, Any]) -> None:
        """The `session/prompt` request (in the host task; see `_Prompt`)."""
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
                self.on_update(_PROMPT_DONE)
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
                    self._add_usage(usage)  # (counted in the thread's total from now on)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self.gave_up = None
        outcome = await self._prompt_turn(turn, ctx)
        if self.gave_up is not None:
            return b.TurnOutcome("failed", self.gave_up)
        return outcome

    async def _prompt_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if self.session_id is None or not self.host.alive:
            raise self.host.failure("is not running")
        await self._await_previous_prompt()
        if not self.host.alive:
            raise self.host.failure("is not running")
        self._discard_updates()
        if self.keeps_unfinished_prompts:
            await ctx.set_backend_session_id(self.session_id)
        mapper = AcpTurnMapper(
            cwd=self.settings.cwd, backend_id=self.backend_id, new_id=ctx.new_item_id
        )
        self._turn_ctx, self._mapper = ctx, mapper
        self._interrupted = trio.Event()
        self._stopped = {}
        grace = getattr(ctx, "interrupt_grace", None)
        self._grace = grace if isinstance(grace, (int, float)) else DEFAULT_INTERRUPT_GRACE
        prompt = [{"type": "text", "text": turn.text}]
        if turn.bootstrap:
            # The role goes in once, as its own block ahead of the first prompt.
            prompt.insert(0, {"type": "text", "text": turn.bootstrap})
            if self.keeps_unfinished_prompts:
                await ctx.mark_role_bootstrap_applied()
        request = _Prompt(self.session_id)
        finished = ended_early = False
        try:
            self.host.start_soon(
                self._run_prompt, request, {"sessionId": self.session_id, "prompt": prompt}
            )
            self._prompt = request
            self.host.prompts[self.session_id] = request
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._end_early, request, mapper)
                nursery.start_soon(self.watch_model_api, mapper)
                while True:
                    try:
                        update = await receive_ready(self._updates)
                    except trio.EndOfChannel:
                        update = None
                    if update is None:
                        self.healthy = False
                        raise self.host.failure("exited in the middle of a turn")
                    if update is _PROMPT_DONE:
                        break
                    if update is _EARLY_END:
                        ended_early = True
                        break
                    mapper.feed(update)
                    await self._emit(ctx, mapper)
                nursery.cancel_scope.cancel()
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
            if not self.keeps_unfinished_prompts and mapper.tool_seen:
                await ctx.set_backend_session_id(self.session_id)
                if turn.bootstrap:
                    await ctx.mark_role_bootstrap_applied()
            return b.TurnOutcome("interrupted")
        if request.failure is not None:
            raise request.failure
        result: Any = request.result
        error = request.error
        result = result if isinstance(result, dict) else {}
        stop = result.get("stopReason")
        finished = error is None and stop != "cancelled"
        if not self.keeps_unfinished_prompts and (finished or mapper.tool_seen):
            # The turn is in the agent's conversation now (Gemini keeps an unfinished turn
            # once the model's answer was complete, i.e. it called a tool): the session can be
            # resumed, and the role went in with it.
            await ctx.set_backend_session_id(self.session_id)
            if turn.bootstrap:
                await ctx.mark_role_bootstrap_applied()
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
            await ctx.emit(b.TokenUsageUpdated(self._add_usage(usage)))
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

    def _add_usage(self, last: TokenUsageBreakdown) -> ThreadTokenUsage:
        t = self._total
        self._total = (
            last
            if t is None
            else TokenUsageBreakdown(
                total_tokens=t.total_tokens + last.total_tokens,
                input_tokens=t.input_tokens + last.input_tokens,
                cached_input_tokens=t.cached_input_tokens + last.cached_input_tokens,
                output_tokens=t.output_tokens + last.output_tokens,
                reasoning_output_tokens=t.reasoning_output_tokens + last.reasoning_output_tokens,
            )
        )
        return ThreadTokenUsage(total=self._total, last=last)
