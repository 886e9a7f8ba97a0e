"""How claude is run and what its exits mean: argv, environment, usage totals, turn endings."""

from __future__ import annotations

import signal
import uuid
from typing import Any

from ...procs.group import GroupProcess
from .. import base as b
from ..kit.usage import UsageTotals
from .mapping import ClaudeTurnMapper, TurnResult, api_url
from .mcp import failed_servers, mcp_config, server_rules
from .spec import EFFORTS

__all__ = ["ClaudeSession", "effort_level"]

_DECLINE_MESSAGE = "The user declined this tool use."


def _base_argv(
    settings: b.SessionSettings, binary: str, allowed: list[str] | None = None
) -> list[str]:
    """The flags of both modes; `allowed`: the mode's own `--allowedTools` rules (one flag
    holds them all, with the thread's and its MCP servers')."""
    argv = [binary, "--output-format", "stream-json", "--verbose", "--include-partial-messages"]
    if settings.model and settings.model != "default":
        argv += ["--model", settings.model]
    if effort := effort_level(settings.effort):
        argv += ["--effort", effort]
    argv += ["--max-turns", str(settings.max_turns)]
    config, _ = mcp_config(settings.mcp_servers)
    if config is not None:
        argv += ["--mcp-config", config]
    rules = [
        *(settings.allowed_tools or ()),
        *(allowed or ()),
        *server_rules(settings.mcp_servers, all_servers=False),
    ]
    if rules:
        argv += ["--allowedTools", ",".join(dict.fromkeys(rules))]
    mode = settings.config.get("permissionMode")
    if isinstance(mode, str) and mode:
        argv += ["--permission-mode", mode]
    if settings.role_prompt:
        argv += ["--append-system-prompt", settings.role_prompt]
    return argv


def effort_level(effort: str | None) -> str | None:
    """Codex's reasoning effort as claude's (`none` and `minimal` are its lowest, `low`);
    None for the CLI's default."""
    if effort in ("none", "minimal"):
        return "low"
    return effort if effort in EFFORTS else None


def _session_flag(
    settings: b.SessionSettings, unsaved: set[str] | None = None
) -> tuple[list[str], str | None]:
    """`--resume=<id>` for a session that already has a transcript, else a fresh
    `--session-id=<uuid>` (equals form: an id can never be taken for a flag). A session id in
    `unsaved` was recorded, but the CLI never saved its transcript: it starts afresh under
    the same id. A fork (`fork_of`) resumes its source as a new session under an id chosen
    here (`--fork-session`), leaving the source's own transcript as it was."""
    sid = settings.backend_session_id
    if sid and sid not in (unsaved or ()):
        return [f"--resume={sid}"], sid
    new = sid or str(uuid.uuid4())
    if settings.fork_of:
        return [f"--resume={settings.fork_of}", "--fork-session", f"--session-id={new}"], None
    return [f"--session-id={new}"], None


_NO_CONVERSATION = "No conversation found with session ID"


def _missing_session(message: dict[str, Any]) -> str | None:
    """The session id of a `--resume` the CLI refused because it has no transcript for it
    (it was killed before it wrote one: recorded at `system/init`, the id outlives the
    process that never saved the conversation), else None."""
    if message.get("type") != "result" or not message.get("is_error"):
        return None
    errors = message.get("errors")
    if not isinstance(errors, list) or not any(_NO_CONVERSATION in str(e) for e in errors):
        return None
    sid = message.get("session_id")
    return sid if isinstance(sid, str) else None


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env.pop("CLAUDECODE", None)  # set inside a Claude Code session; makes the CLI refuse to nest
    env["PWD"] = settings.cwd
    _, variables = mcp_config(settings.mcp_servers)
    env.update(variables)  # what the `--mcp-config` refers to (values stay out of argv)
    return env


def _failure_from_exit(proc: GroupProcess, what: str) -> b.BackendError:
    code = proc.returncode
    tail = proc.stderr_tail(2000)
    if code is not None and code < 0:
        # A negative status is a signal (kill -9, the OOM killer): say which, in words a user
        # understands, instead of a bare "exit code -9".
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        detail = f" (killed by {name})"
    else:
        detail = f" (exit code {code})" if code is not None else ""
    message = f"claude {what}{detail}"
    if tail:
        message += f": {tail}"
    return b.BackendError(message, codex_error_info="other", additional_details=tail or None)


async def _finish_turn(
    result: TurnResult,
    ctx: b.TurnContext,
    usage: UsageTotals,
) -> b.TurnOutcome:
    if result.session_id:
        await ctx.set_backend_session_id(result.session_id)
    if result.usage is not None:
        await ctx.emit(b.TokenUsageUpdated(usage.add(result.usage)))
    return b.TurnOutcome(result.status, result.error)


class ClaudeSession(b.BackendSession):
    """What a thread's claude session is in either mode: its settings, the binary, the turns'
    usage totals and the session ids whose transcript the CLI never wrote (shared by the
    backend's sessions)."""

    def __init__(
        self, settings: b.SessionSettings, binary: str, unsaved: set[str] | None = None
    ) -> None:
        self.settings = settings
        self.binary = binary
        self.unsaved = unsaved if unsaved is not None else set()
        self._usage = UsageTotals()
        #: MCP servers already reported as failed to start (`system/init` repeats per turn).
        self._failed_servers: set[str] = set()

    def mapper(self, *, structured: bool = False, compacting: bool = False) -> ClaudeTurnMapper:
        """A turn's mapper (`structured`: the turn has an output schema; `compacting`: the
        turn is a `/compact`)."""
        names = tuple(s.name for s in self.settings.mcp_servers)
        return ClaudeTurnMapper(
            cwd=self.settings.cwd,
            url=api_url(self.settings.env),
            mcp_servers=names,
            structured=structured,
            compacting=compacting,
        )

    def new_failures(self, message: dict[str, Any]) -> list[str]:
        """The MCP servers a `system/init` reports failed that were not reported yet."""
        if message.get("type") != "system" or message.get("subtype") != "init":
            return []
        names = [n for n in failed_servers(message) if n not in self._failed_servers]
        self._failed_servers.update(names)
        return names

    def claude_argv(self, *mode_flags: str, allowed: list[str] | None = None) -> list[str]:
        """The command line: the common flags, the mode's, then the session's."""
        flags, _ = _session_flag(self.settings, self.unsaved)
        return [*_base_argv(self.settings, self.binary, allowed), *mode_flags, *flags]

    async def note_init(self, message: dict[str, Any], ctx: b.TurnContext) -> None:
        """On `system/init`: record the session id (the transcript exists from now on, so
        later spawns resume it)."""
        if message.get("type") != "system" or message.get("subtype") != "init":
            return
        sid = message.get("session_id")
        if isinstance(sid, str):
            await ctx.set_backend_session_id(sid)
            self.settings.backend_session_id = sid
            self.unsaved.discard(sid)

    def _check_resumable(self, message: dict[str, Any]) -> None:
        """A `--resume` of a conversation the CLI never saved fails every time: remember the
        id (the next spawn starts it afresh) and raise SessionLost; the engine reopens the
        session and runs the turn again, since nothing of it happened yet."""
        sid = _missing_session(message)
        if sid is not None:
            self.unsaved.add(sid)
            raise b.SessionLost(f"claude has no saved conversation {sid}; starting it afresh")
