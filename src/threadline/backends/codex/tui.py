"""Codex's tui mode: the real interactive Codex TUI in a tmux session threadline owns
(kit/tmux.py), attached to a `codex app-server` of the thread's own (ws_host.py) on which
threadline is a second client.

Where each part of a turn comes from (codex 0.169.0, measured):
- the thread: threadline opens it over its connection (`thread/start` / `thread/resume` /
  `thread/fork` with the thread's settings, as stream mode does), makes Codex write its
  rollout (`thread/name/set`: `thread/resume`, and so the TUI's `resume <id>`, fail with "no
  rollout found" until then), then starts the TUI as `codex --remote <url> resume <id>`.
- input: `turn/start` over threadline's connection (every override, images, output schema
  as in stream mode); the TUI shows the prompt and the answer as they come (it is
  subscribed to the thread). Not a paste: that would lose the overrides, images and schema,
  and an Enter sent while the TUI settles is lost. A prompt a person types in the TUI is a
  turn of its own: its
  `turn/started` is one threadline did not ask for (`wait_outside_turn`).
- items, deltas, token usage, the end: the app-server's v2 notifications, mapped exactly as
  in stream mode (app_server.py).
- approvals: Codex sends each approval request to both clients: threadline asks through its
  approval router (fail closed) and its answer resolves the TUI's prompt; a person who
  answers in the TUI first resolves it for both (`serverRequest/resolved`: the client's
  request is withdrawn).
- interrupt: `turn/interrupt` (or Escape in the TUI); the commands Codex leaves running are
  killed (commands.py).
- a TUI a person quit (`/quit`): the session is unhealthy; the next turn opens a new one
  (app-server and TUI, `resume <id>`).
First-run screens (folder trust, the model-migration notice) are answered ahead through
Codex's own `config/batchWrite`, with the values the TUI itself would write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from ...channels import receive_ready_or_none
from ...rpc.endpoint import Incoming, ResponseError
from ...rpc.errors import METHOD_NOT_FOUND, RpcError
from .. import base as b
from ..kit.spawn import running
from ..kit.tmux import TmuxPane, open_tmux_pane
from .app_server import CodexAppServerSession, _params, app_server_argv
from .invocation import CodexCommand
from .overrides import own_model
from .ws_host import CodexWsHost

__all__ = ["CodexTuiSession", "open_codex_tui"]

log = logging.getLogger("threadline.backend.codex")

_READY_TIMEOUT = 20.0
_POLL = 0.1
#: How often a session waiting for a person's prompt checks that the TUI still runs.
_ALIVE_CHECK = 1.0
#: Settings a person may change in the TUI: threadline's turns send them every time.
_RESENT = frozenset({"approvalPolicy", "sandboxPolicy", "model", "effort"})


class CodexTuiSession(CodexAppServerSession):
    host: CodexWsHost

    def __init__(self, settings: b.SessionSettings, codex: CodexCommand, host: CodexWsHost):
        super().__init__(settings, codex, host)
        self.codex = codex
        self.pane: TmuxPane | None = None
        #: A person's turn seen by `wait_outside_turn`: its messages so far, read again first.
        self._replay: list[Incoming] = []
        self._outside_turn: str | None = None
        self._outside_began = 0.0
        #: Codex's requests being answered through threadline (request id → their scope).
        self._answering: dict[int | str, trio.CancelScope] = {}

    # -- opening -------------------------------------------------------------------------------

    async def open(self) -> None:
        fresh = not self.settings.backend_session_id
        await self._answer_first_run()
        await super().open()
        if fresh and self.codex_thread_id is not None:
            # (writes the rollout: the TUI can resume the thread from now on)
            await self.request(
                "thread/name/set",
                {"threadId": self.codex_thread_id, "name": f"threadline {self.settings.thread_id}"},
            )

    async def _answer_first_run(self) -> None:
        """Trust the cwd and keep the configured model: the answers the TUI itself writes
        to its first-run screens (`[projects."<cwd>"] trust_level`, `[notice.model_migrations]`),
        written by Codex's `config/batchWrite` into the thread's CODEX_HOME. (`-c` flags do not
        skip them: the remote TUI reads its own config.toml.)"""
        cwd = self.settings.cwd
        edits: list[dict[str, Any]] = [
            {"keyPath": "projects", "value": {cwd: {"trust_level": "trusted"}}, **_UPSERT}
        ]
        try:
            read = await self.request("config/read", {"cwd": cwd}, timeout=10) or {}
            # (the TUI asks about its config's model even when the thread has its own)
            models = {(read.get("config") or {}).get("model"), own_model(self.settings)}
            migrations = await self._upgrades({m for m in models if isinstance(m, str) and m})
            if migrations:
                edits.append({"keyPath": "notice.model_migrations", "value": migrations, **_UPSERT})
            await self.request("config/batchWrite", {"edits": edits}, timeout=10)
        except ResponseError as exc:
            # (the TUI then shows its screen: `wait_ready` fails with it)
            log.warning("codex config/batchWrite of the first-run answers: %s", exc.message)

    async def _upgrades(self, models: set[str]) -> dict[str, str]:
        """The model Codex would offer to migrate each of `models` to (`model/list`'s
        `upgrade`), for those that have one."""
        upgrades: dict[str, str] = {}
        for entry in await self._model_entries():
            upgrade = entry.get("upgrade")
            name = entry.get("model")
            if name in models and isinstance(upgrade, str) and upgrade:
                upgrades[str(name)] = upgrade
        return upgrades

    async def _model_entries(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = await self.request("model/list", {"cursor": cursor}, timeout=10) or {}
            entries += [e for e in page.get("data") or () if isinstance(e, dict)]
            cursor = page.get("nextCursor")
            if not cursor:
                return entries

    def tui_argv(self) -> list[str]:
        """`codex --remote <url> -C <cwd> resume <thread>`. No `-a`/`-s`/`-m`: the thread
        has them from threadline (codex 0.169 refuses permission flags with a remote resume:
        "Permission overrides are not supported when resuming a remote task")."""
        assert self.host.url is not None and self.codex_thread_id is not None
        cwd = self.settings.cwd
        return [
            self.codex.binary,
            "--remote",
            self.host.url,
            "-C",
            cwd,
            "resume",
            self.codex_thread_id,
        ]

    async def wait_ready(self, pane: TmuxPane) -> None:
        """Until the TUI shows its composer (BackendError with its screen if it ends or does
        not come up)."""
        screen = ""
        with trio.move_on_after(_READY_TIMEOUT):
            while pane.alive:
                screen = await pane.capture()
                if _composer_shown(screen):
                    return
                await trio.sleep(_POLL)
        self.healthy = False
        tail = "\n".join(line for line in screen.splitlines() if line.strip())[-2000:]
        raise b.BackendError(
            "the codex TUI did not come up" + (f"; its screen: {tail}" if tail else ""),
            codex_error_info="other",
        )

    # -- a person's turns ------------------------------------------------------------------------

    async def wait_outside_turn(self) -> str:
        """The prompt of the next turn a person starts in the TUI (a `turn/started` no
        `turn/start` of threadline's caused). Codex's requests meanwhile are refused (fail
        closed). Once the TUI or the app-server is gone, the session is unhealthy and this
        never returns."""
        while self.healthy:
            msg: Incoming | None = None
            alive = True
            with trio.move_on_after(_ALIVE_CHECK):
                msg = await receive_ready_or_none(self._events)
                alive = msg is not None
            if not alive or self.pane is None or not self.pane.alive:
                break
            if msg is None:
                continue
            if msg.id is not None:
                await self._respond(msg, None, RpcError(METHOD_NOT_FOUND, "no turn is running"))
                continue
            params = _params(msg)
            if msg.method == "turn/started" and params.get("threadId") == self.codex_thread_id:
                prompt = await self._outside_prompt(msg, params)
                if prompt is not None:
                    return prompt
        self.healthy = False
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def _outside_prompt(self, started: Incoming, params: dict[str, Any]) -> str | None:
        """Read the person's turn up to its user message; its text (None if the turn ends
        first). What was read is kept for `run_turn`."""
        self._outside_turn = str((params.get("turn") or {}).get("id") or "") or None
        self._outside_began = time.monotonic()
        self._replay = [started]
        while (msg := await receive_ready_or_none(self._events)) is not None:
            self._replay.append(msg)
            item = _params(msg).get("item") or {}
            if msg.method == "item/started" and item.get("type") == "userMessage":
                return _user_text(item)
            if msg.method == "turn/completed":
                break
        self._replay, self._outside_turn = [], None
        return None

    # -- Codex's requests: the TUI gets them too ----------------------------------------------

    async def _server_request(self, request: Incoming, ctx: b.TurnContext) -> None:
        """Answered through threadline's approval router, unless a person answers it in the
        TUI first (Codex then sends `serverRequest/resolved`: the client's request is
        withdrawn and Codex gets no second answer)."""
        assert request.id is not None
        result: Any = None
        error: RpcError | None = None
        with trio.CancelScope() as scope:
            self._answering[request.id] = scope
            try:
                result = await self._answer(request, ctx)
            except RpcError as exc:
                error = exc
            finally:
                self._answering.pop(request.id, None)
        if not scope.cancelled_caught:
            await self._respond(request, result, error)
        elif request.method == "item/commandExecution/requestApproval":
            # (the person's decision is not told: the command may run)
            self._not_running.discard(str(_params(request).get("itemId") or ""))

    async def _translate(
        self, method: str, params: dict[str, Any], ctx: b.TurnContext, in_flight: set[str]
    ) -> None:
        if method == "serverRequest/resolved":
            request_id = params.get("requestId")
            scope = self._answering.get(request_id) if request_id is not None else None
            if scope is not None:
                scope.cancel()
            return
        await super()._translate(method, params, ctx, in_flight)

    async def _next_event(self) -> Incoming:
        if self._replay:
            return self._replay.pop(0)
        return await super()._next_event()

    # -- turns -----------------------------------------------------------------------------------

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        if self.pane is None or not self.pane.alive:
            self.healthy = False
            raise b.SessionLost("the codex TUI is not running")
        if not turn.outside:
            self._replay, self._outside_turn = [], None
            self._pending |= {f for f in _RESENT if f != "model" or own_model(self.settings)}
            return await super().run_turn(turn, ctx)
        if self._outside_turn is None or self.codex_thread_id is None:
            return b.TurnOutcome("completed")
        await ctx.set_backend_session_id(self.codex_thread_id)
        self._turn_id = self._open_turn = self._outside_turn
        self._turn_began, self._outside_turn = self._outside_began, None
        return await self._follow(ctx)


_UPSERT = {"mergeStrategy": "upsert"}


def _user_text(item: dict[str, Any]) -> str:
    parts = item.get("content") or []
    return "\n\n".join(
        str(part.get("text") or "")
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )


#: The TUI's prompt mark, starting its composer line (U+203A).
_PROMPT_MARK = "\u203a"
#: The hint under an empty composer (the first-run screens show none).
_HINT = "? for shortcuts"


def _composer_shown(screen: str) -> bool:
    """The TUI's main view, the thread resumed: the hint under its composer, or (in case the
    hint changes) its header and a composer line. (A long history scrolls the header off.)"""
    if "Resuming session" in screen:
        return False
    lines = [line.strip() for line in screen.splitlines()]
    composer = any(line.startswith(_PROMPT_MARK) for line in lines)
    return composer and (_HINT in screen or "OpenAI Codex" in screen)


@asynccontextmanager
async def open_codex_tui(
    settings: b.SessionSettings, codex: CodexCommand
) -> AsyncIterator[CodexTuiSession]:
    """The thread's app-server and its TUI in tmux session `<thread id>`, ready for a turn;
    both, and every command they started, are gone when the block ends."""
    env = codex.env(settings)
    host = CodexWsHost(app_server_argv(codex, settings), settings.cwd, env)
    async with running(host.run, host.stop):
        host.refs = 1
        session = CodexTuiSession(settings, codex, host)
        try:
            await session.open()
            async with open_tmux_pane(
                settings.thread_id, session.tui_argv(), cwd=settings.cwd, env=env
            ) as pane:
                session.pane, session.tui = pane, pane.attach
                await session.wait_ready(pane)
                yield session
        finally:
            with trio.CancelScope(shield=True):
                await session.detach()
