"""Gemini CLI over ACP (`gemini --acp`): the kit's session with Gemini's quirks."""

from __future__ import annotations

import datetime as dt
import glob
import logging
import os
from typing import Any

import trio

from ...protocol import TurnError
from .. import base as b
from ..kit.acp import AcpError, AcpSession, AcpTurnMapper, McpCall
from ..kit.api_errors import ConnectionWatch, unreachable
from ..kit.api_probe import probe_target, watch_api
from .headless import _api_error, _info_for_status
from .invocation import _CHECK, PROBE_BUDGET, _api_failure, api_url
from .mcp import StartFailures, acp_mcp_call
from .spec import SPEC

log = logging.getLogger("threadline.backend.gemini")


async def _wait_out_session_minute(session_id: str, env: dict[str, str]) -> None:
    """Gemini wipes a session loaded in the same minute as its file's name: wait it out."""
    home = env.get("HOME") or os.path.expanduser("~")
    pattern = os.path.join(
        home, ".gemini", "tmp", "*", "chats", f"session-*-{session_id[:8]}*.jsonl"
    )
    names = [os.path.basename(p) for p in glob.glob(pattern)]
    stamps = {n[len("session-") : len("session-") + 16] for n in names}
    now = [
        dt.datetime.now().strftime("%Y-%m-%dT%H-%M"),
        dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H-%M"),
    ]
    if stamps & set(now):
        wait = 61 - dt.datetime.now().second
        log.info("waiting %ss before session/load of %s (same-minute bug)", wait, session_id)
        await trio.sleep(wait)


class GeminiAcpSession(AcpSession):
    _last_update = 0.0  # trio.current_time() of the session's last update
    # Gemini's "Allow for this session" (proceed_always) grants more than the user approved: for
    # a shell command, every later command with the same root (`touch x` → any `touch`); for an
    # edit, it switches the whole session to autoEdit. Answer "Allow" (once) instead: the
    # approval router remembers the exact acceptForSession grant and auto-approves repeats.
    permission_kinds = {**AcpSession.permission_kinds, "acceptForSession": "allow_once"}
    # A prompt that failed (API error) or was cancelled while the model streamed is dropped
    # from the conversation (observed with 0.61.0: the next API request does not carry it; a
    # turn cancelled after a tool call is kept). Until a turn got that far there is nothing to
    # session/load, and the role must go again with the next prompt.
    keeps_unfinished_prompts = False

    def turn_error(self, error: AcpError) -> TurnError:
        # An API failure answers session/prompt with code = HTTP status and the API's JSON
        # error body as the message (reference §7.5): show its text, not the JSON.
        api = _api_error(error.message)
        if api is None:
            status = error.code if 400 <= error.code < 600 else None
            failure = _api_failure(error.message, status, self.settings.env)
            return failure or super().turn_error(error)
        text, code = api
        failure = _api_failure(text, code or error.code, self.settings.env)
        return failure or TurnError(
            message=text, codex_error_info=_info_for_status(code or error.code, text)
        )

    _failures: StartFailures | None = None
    #: The agent's debug log (`DEBUG_LOG` in its environment), set by the backend.
    debug_log: str | None = None

    def mcp_call(self, call: dict[str, Any]) -> McpCall | None:
        return acp_mcp_call(call, [s.name for s in self.settings.mcp_servers])

    async def open(self) -> None:
        # The agent's debug log from here on says which of our servers failed to start.
        names = [s.name for s in self.settings.mcp_servers]
        self._failures = StartFailures(self.debug_log, names)
        await super().open()

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if self._failures is not None:
            for text in self._failures.warnings():
                await ctx.emit(b.Warning(text))
        return await super().run_turn(turn, ctx)

    def on_update(self, update: dict[str, Any]) -> None:
        self._last_update = trio.current_time()
        super().on_update(update)

    async def watch_model_api(self, mapper: AcpTurnMapper) -> None:
        # gemini --acp retries an unreachable API for minutes without a word: probe it (see
        # api_probe) while the turn waits on the model.
        url = api_url(self.settings.env)
        target = probe_target(url, self.settings.env)
        if target is None:
            return
        self._last_update = trio.current_time()

        def quiet_since() -> float | None:
            busy = mapper.tools or self._permissions_active
            return None if busy else self._last_update

        watch = ConnectionWatch(budget=PROBE_BUDGET)
        error = await watch_api(target, watch, quiet_since)
        self.give_up(unreachable(SPEC, url, _CHECK, error, after=watch.elapsed()))

    def approval_mode(self, policy: b.ApprovalPolicy) -> str | None:
        # `never`: Gemini runs tools without asking; otherwise it asks (mode `default`).
        return "yolo" if policy == "never" else "default"
