"""OpenCode backend.

ACP mode (default): a long-lived `opencode acp` per cwd (its start-up costs seconds, so never
per turn), threads multiplexed as ACP sessions (`backends/acp.py`).

Run mode (`config.mode: "run"`): `opencode run --format json` per turn, prompt on stdin then
EOF (run reads all of stdin; an open pipe hangs it), `PWD` = the thread's cwd (run prefers
`$PWD` over its real cwd), `--session <id>` for later turns (never `--continue`, which picks the
project's latest session). No interactive approvals: `approvalPolicy: never` → `--auto`;
otherwise OpenCode's own rules. Cancel kills the group and every descendant — the bash tool
runs its commands in their own session, outside the CLI's process group.

OpenCode allows every tool by default, so the thread's approval policy is passed down as
`OPENCODE_PERMISSION` (merged over the user's config): ask for bash/edit/webfetch unless the
policy is `never`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio

from ..protocol import (
    AgentMessageItem,
    BackendCapabilities,
    CommandExecutionItem,
    DynamicToolCallItem,
    FileChangeItem,
    FileUpdateChange,
    Model,
    PatchKindAdd,
    PatchKindUpdate,
    ReasoningEffortOption,
    ReasoningItem,
    ThreadItem,
    ThreadTokenUsage,
    TokenUsageBreakdown,
    ToolOutputText,
    TurnError,
    TurnPlanStep,
    UnknownAction,
)
from . import base as b
from .acp import AcpPool, AcpSession, error_info_for_code
from .cli_version import cli_version
from .process import LineTooLong, ProcessError, open_group_process, resolve_executable

__all__ = ["OpenCodeBackend"]

log = logging.getLogger("threadline.backend.opencode")

_ACP_CAPS = BackendCapabilities(
    approvals=True, interrupt=True, resume=True, deltas=True, reasoning=True, images=False
)
_RUN_CAPS = BackendCapabilities(
    approvals=False, interrupt=False, resume=True, deltas=False, reasoning=True, images=False
)
_ASK = {"bash": "ask", "edit": "ask", "webfetch": "ask"}
_ALLOW = {
    "bash": "allow",
    "edit": "allow",
    "webfetch": "allow",
    "external_directory": "allow",
    "doom_loop": "allow",
}


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env["PWD"] = settings.cwd  # OpenCode resolves its directory from $PWD first
    env.setdefault("OPENCODE_DISABLE_AUTOUPDATE", "1")
    permission: dict[str, Any] = {}
    raw = env.get("OPENCODE_PERMISSION")
    if raw:
        try:
            parsed = json.loads(raw)
            if isinstance(parsed, dict):
                permission.update(parsed)
        except json.JSONDecodeError:
            log.warning("ignoring an invalid OPENCODE_PERMISSION")
    permission.update(_ALLOW if settings.approval_policy == "never" else _ASK)
    env["OPENCODE_PERMISSION"] = json.dumps(permission, sort_keys=True)
    if settings.model and settings.model != "default":
        content: dict[str, Any] = {}
        if env.get("OPENCODE_CONFIG_CONTENT"):
            try:
                loaded = json.loads(env["OPENCODE_CONFIG_CONTENT"])
                content = loaded if isinstance(loaded, dict) else {}
            except json.JSONDecodeError:
                content = {}
        content["model"] = settings.model
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(content)
    return env


# -- run mode -------------------------------------------------------------------------------


class OpenCodeRunSession(b.BackendSession):
    def __init__(self, settings: b.SessionSettings, binary: str) -> None:
        self.settings = settings
        self.binary = binary
        self._total: TokenUsageBreakdown | None = None

    def argv(self) -> list[str]:
        s = self.settings
        argv = [self.binary, "run", "--format", "json", "--dir", s.cwd, "--thinking"]
        if s.model and s.model != "default":
            argv += ["--model", s.model]
        if s.backend_session_id:
            argv += ["--session", s.backend_session_id]
        else:
            argv += ["--title", "threadline"]  # also skips the title-generation model call
        if s.approval_policy == "never":
            argv.append("--auto")
        return argv

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        prompt = f"{turn.bootstrap}\n\n{turn.text}" if turn.bootstrap else turn.text
        if turn.bootstrap:
            await ctx.mark_role_bootstrap_applied()
        decoder = msgspec.json.Decoder()
        errors: list[dict[str, Any]] = []
        usage: TokenUsageBreakdown | None = None
        try:
            async with open_group_process(
                self.argv(),
                cwd=self.settings.cwd,
                env=_env(self.settings),
                stdin="pipe",
                name="opencode run",
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
                        event = decoder.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if not isinstance(event, dict):
                        continue
                    sid = event.get("sessionID")
                    if isinstance(sid, str) and sid != self.settings.backend_session_id:
                        self.settings.backend_session_id = sid
                        await ctx.set_backend_session_id(sid)
                    etype = event.get("type")
                    part = event.get("part") if isinstance(event.get("part"), dict) else {}
                    assert isinstance(part, dict)
                    if etype == "text":
                        item = AgentMessageItem(
                            id=str(part.get("id") or ctx.new_item_id()),
                            text=str(part.get("text", "")),
                        )
                        await ctx.emit(b.ItemCompleted(item))
                    elif etype == "reasoning":
                        text = str(part.get("text", ""))
                        await ctx.emit(
                            b.ItemCompleted(
                                ReasoningItem(
                                    id=str(part.get("id") or ctx.new_item_id()),
                                    summary=[text] if text else [],
                                )
                            )
                        )
                    elif etype == "tool_use":
                        mapped = _run_tool(part, self.settings.cwd)
                        if isinstance(mapped, list):
                            await ctx.emit(b.PlanUpdated(mapped))
                        else:
                            await ctx.emit(b.ItemCompleted(mapped))
                    elif etype == "step_finish":
                        step = _step_usage(part.get("tokens"))
                        if step is not None:
                            usage = step if usage is None else _sum(usage, step)
                    elif etype == "error":
                        errors.append(event.get("error") or {})
                code = await proc.wait()
                stderr = proc.stderr_tail(1500)
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
        if usage is not None:
            self._total = usage if self._total is None else _sum(self._total, usage)
            await ctx.emit(b.TokenUsageUpdated(ThreadTokenUsage(total=self._total, last=usage)))
        if errors:
            err = errors[-1]
            data = err.get("data") if isinstance(err.get("data"), dict) else {}
            assert isinstance(data, dict)
            message = str(data.get("message") or err.get("name") or "opencode failed")
            status = data.get("statusCode")
            return b.TurnOutcome(
                "failed",
                TurnError(
                    message=message,
                    codex_error_info=error_info_for_code(
                        status if isinstance(status, int) else 0, message
                    ),
                    additional_details=f"HTTP {status}" if status else None,
                ),
            )
        if code != 0:
            raise b.BackendError(
                f"opencode run exited with code {code}" + (f": {stderr}" if stderr else ""),
                codex_error_info="other",
                additional_details=stderr or None,
            )
        return b.TurnOutcome("completed")


def _step_usage(tokens: Any) -> TokenUsageBreakdown | None:
    if not isinstance(tokens, dict):
        return None
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    assert isinstance(cache, dict)
    inp, out = int(tokens.get("input") or 0), int(tokens.get("output") or 0)
    return TokenUsageBreakdown(
        total_tokens=int(tokens.get("total") or inp + out),
        input_tokens=inp,
        cached_input_tokens=int(cache.get("read") or 0),
        output_tokens=out,
        reasoning_output_tokens=int(tokens.get("reasoning") or 0),
        cache_write_input_tokens=int(cache.get("write") or 0),
    )


def _sum(a: TokenUsageBreakdown, c: TokenUsageBreakdown) -> TokenUsageBreakdown:
    return TokenUsageBreakdown(
        total_tokens=a.total_tokens + c.total_tokens,
        input_tokens=a.input_tokens + c.input_tokens,
        cached_input_tokens=a.cached_input_tokens + c.cached_input_tokens,
        output_tokens=a.output_tokens + c.output_tokens,
        reasoning_output_tokens=a.reasoning_output_tokens + c.reasoning_output_tokens,
        cache_write_input_tokens=(a.cache_write_input_tokens or 0)
        + (c.cache_write_input_tokens or 0),
    )


def _run_tool(part: dict[str, Any], cwd: str) -> ThreadItem | list[TurnPlanStep]:
    """A finished `tool_use` part → a completed item (run mode reports tools only at the end)."""
    tool = str(part.get("tool") or "tool")
    call_id = str(part.get("callID") or part.get("id") or tool)
    state = part.get("state") if isinstance(part.get("state"), dict) else {}
    assert isinstance(state, dict)
    args = state.get("input") if isinstance(state.get("input"), dict) else {}
    assert isinstance(args, dict)
    meta = state.get("metadata") if isinstance(state.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    ok = state.get("status") == "completed"
    error = str(state.get("error") or "")
    rejected = "rejected permission" in error
    if tool == "bash":
        command = str(args.get("command", ""))
        code = meta.get("exit")
        output = meta.get("output") if isinstance(meta.get("output"), str) else state.get("output")
        return CommandExecutionItem(
            id=call_id,
            command=command,
            cwd=str(args.get("workdir") or cwd),
            status="declined" if rejected else ("completed" if ok else "failed"),
            command_actions=[UnknownAction(command=command)],
            aggregated_output=str(output) if output is not None else (error or None),
            exit_code=code if isinstance(code, int) else None,
        )
    if tool in ("edit", "write", "patch"):
        path = str(args.get("filePath") or meta.get("filepath") or "")
        filediff = meta.get("filediff") if isinstance(meta.get("filediff"), dict) else {}
        assert isinstance(filediff, dict)
        diff = str(filediff.get("patch") or meta.get("diff") or "")
        if not diff and tool == "write":
            content = str(args.get("content", ""))
            diff = "".join(f"+{line}\n" for line in content.splitlines())
        kind = PatchKindUpdate() if meta.get("exists") or tool == "edit" else PatchKindAdd()
        return FileChangeItem(
            id=call_id,
            changes=[FileUpdateChange(path=path, kind=kind, diff=diff)],
            status="declined" if rejected else ("completed" if ok else "failed"),
        )
    if tool == "todowrite":
        steps = []
        for todo in args.get("todos") or []:
            if isinstance(todo, dict):
                status = {"in_progress": "inProgress", "completed": "completed"}.get(
                    str(todo.get("status")), "pending"
                )
                steps.append(TurnPlanStep(step=str(todo.get("content", "")), status=status))  # type: ignore[arg-type]
        return steps
    output = state.get("output")
    text = str(output) if output is not None else error
    return DynamicToolCallItem(
        id=call_id,
        tool=tool,
        arguments=args,
        namespace="opencode",
        status="completed" if ok else "failed",
        success=ok,
        content_items=[ToolOutputText(text=text)] if text else [],
    )


# -- backend ---------------------------------------------------------------------------------------


class OpenCodeBackend(b.Backend):
    id = "opencode"
    display_name = "OpenCode"
    modes = ("acp", "run")
    default_mode = "acp"

    def __init__(self) -> None:
        self._pool = AcpPool("opencode acp")

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    def capabilities(self, mode: str) -> BackendCapabilities:
        return _RUN_CAPS if mode == "run" else _ACP_CAPS

    async def check(self, cli_path: str | None = None) -> b.BackendCheck:
        try:
            path = resolve_executable(cli_path or "opencode")
        except ProcessError as exc:
            return b.BackendCheck(available=False, message=str(exc))
        version = await cli_version(path)
        creds = (
            "OPENCODE_CONFIG_CONTENT set"
            if os.environ.get("OPENCODE_CONFIG_CONTENT")
            else "provider credentials come from opencode's own config (opencode auth)"
        )
        return b.BackendCheck(
            available=version is not None,
            path=path,
            version=version,
            credentials=creds,
            message=None if version else "`opencode --version` failed",
        )

    @asynccontextmanager
    async def _session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        try:
            binary = resolve_executable(settings.cli_path or "opencode", settings.env)
        except ProcessError as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
        if settings.mode == "run":
            yield OpenCodeRunSession(settings, binary)
            return
        env = _env(settings)
        key = env["OPENCODE_PERMISSION"] + env.get("OPENCODE_CONFIG_CONTENT", "")
        async with self._pool.host(
            [binary, "acp", "--cwd", settings.cwd], settings.cwd, env, key_extra=key
        ) as host:
            session = AcpSession(host, settings, "opencode")
            await session.open()
            try:
                yield session
            finally:
                session.close()

    def session(self, settings: b.SessionSettings) -> Any:
        return self._session(settings)

    def models(self) -> list[Model]:
        efforts = [ReasoningEffortOption(reasoning_effort="medium", description="default")]
        return [
            Model(
                id="opencode/default",
                model="default",
                display_name="OpenCode default",
                description="The model configured for opencode (provider/model)",
                hidden=False,
                is_default=True,
                default_reasoning_effort="medium",
                supported_reasoning_efforts=efforts,
            )
        ]
