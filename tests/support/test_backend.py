"""A scriptable in-process backend for engine tests (in the spirit of httpx's MockTransport).

Each turn runs a coroutine supplied by the test::

    backend = ScriptedBackend()

    async def turn(ctx, turn_input, session):
        item = ctx.new_item_id()
        await ctx.emit(b.ItemStarted(AgentMessageItem(id=item, text="")))
        await ctx.emit(b.AgentMessageDelta(item, "hi"))
        await ctx.emit(b.ItemCompleted(AgentMessageItem(id=item, text="hi")))

    backend.script = turn

The backend records what the engine handed it (every `TurnInput`, a snapshot of the
`SessionSettings` of every session it opened, interrupt calls, sessions opened and closed) and
has knobs for the engine's failure paths: native interrupt supported or not, an interrupt that
is ignored (forcing the engine's hard cancel), session open that fails or blocks, and a session
that turns unhealthy after a turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import trio

from threadline.backends import base as b
from threadline.backends.spec import mode_capabilities
from threadline.protocol import AgentMessageItem, BackendCapabilities, Model

__all__ = [
    "ScriptedBackend",
    "ScriptedSession",
    "TurnScript",
    "echo_script",
    "stream_message",
]

TurnScript = Callable[
    [b.TurnContext, b.TurnInput, "ScriptedSession"], Awaitable[b.TurnOutcome | None]
]

#: What `ScriptedSession.interrupt()` does:
#: - "cancel": cancel the running script (as a CLI that stops at once) → the turn returns
#:   `TurnOutcome("interrupted")`;
#: - "event": only set `session.interrupted`; the script decides what to do;
#: - "ignore": nothing at all (the engine must hard-cancel after its grace period).
InterruptMode = Literal["cancel", "event", "ignore"]


async def stream_message(
    ctx: b.TurnContext,
    chunks: Sequence[str],
    *,
    final: str | None = None,
    pause: float = 0.0,
    item_id: str | None = None,
) -> str:
    """Emit an agentMessage: started, one delta per chunk, completed with `final` (default:
    the chunks joined). Returns the item id."""
    iid = item_id or ctx.new_item_id()
    await ctx.emit(b.ItemStarted(AgentMessageItem(id=iid, text="")))
    for chunk in chunks:
        await ctx.emit(b.AgentMessageDelta(iid, chunk))
        if pause:
            await trio.sleep(pause)
        else:
            await trio.lowlevel.checkpoint()
    text = "".join(chunks) if final is None else final
    await ctx.emit(b.ItemCompleted(AgentMessageItem(id=iid, text=text)))
    return iid


async def echo_script(
    ctx: b.TurnContext, turn: b.TurnInput, session: ScriptedSession
) -> b.TurnOutcome | None:
    """The default script: answer `echo: <text>` in two deltas."""
    await stream_message(ctx, ["echo: ", turn.text])
    return None


class ScriptedSession(b.BackendSession):
    def __init__(self, backend: ScriptedBackend, settings: b.SessionSettings, index: int) -> None:
        self.backend = backend
        #: The live settings object the engine passed (the engine may mutate it later).
        self.settings = settings
        self.index = index
        self.healthy = True
        self.closed = False
        self.turns: list[b.TurnInput] = []
        self.interrupt_calls = 0
        #: Set by `interrupt()` (any mode but "ignore"); reset at the start of every turn.
        self.interrupted = trio.Event()
        self._scope: trio.CancelScope | None = None

    async def interrupt(self) -> None:
        self.interrupt_calls += 1
        self.backend.interrupt_calls += 1
        mode = self.backend.interrupt_mode
        if self.backend.interrupt_error is not None:
            raise self.backend.interrupt_error
        if mode == "ignore":
            return
        self.interrupted.set()
        if mode == "cancel" and self._scope is not None:
            self._scope.cancel()

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        self.backend.reconfigured.append(changed)
        return changed - self.backend.live_fields - {"approvalPolicy"}

    async def steer(self, turn: b.TurnInput) -> None:
        self.backend.steered.append(turn)

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        backend = self.backend
        self.turns.append(turn)
        backend.turn_inputs.append(turn)
        backend.contexts.append(ctx)
        self.interrupted = trio.Event()
        if backend.session_id is not None:
            await ctx.set_backend_session_id(backend.session_id)
        outcome: b.TurnOutcome | None = None
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    outcome = await backend.script(ctx, turn, self)
                except trio.Cancelled:
                    if not scope.cancel_called:
                        # Not ours (the engine's hard cancel or timeout): record it.
                        backend.cancelled_turns.append(turn.turn_id)
                    raise
            if scope.cancelled_caught:
                outcome = b.TurnOutcome("interrupted")
            backend.returned_turns.append(turn.turn_id)
            return outcome
        finally:
            self._scope = None
            if backend.unhealthy_after_turn:
                self.healthy = False


class ScriptedBackend(b.Backend):
    id = "test"
    display_name = "Scripted test backend"
    modes: Sequence[str] = ("default", "other")
    default_mode = "default"

    def __init__(
        self,
        script: TurnScript | None = None,
        *,
        backend_id: str = "test",
        interrupt: bool = True,
        interrupt_mode: InterruptMode = "cancel",
    ) -> None:
        self.id = backend_id
        self.script: TurnScript = script or echo_script
        # -- knobs ---------------------------------------------------------------------------
        #: `capabilities().interrupt`: False makes the engine cancel instead of interrupting.
        self.supports_interrupt = interrupt
        self.interrupt_mode: InterruptMode = interrupt_mode
        #: Raised by `session.interrupt()` (after counting the call).
        self.interrupt_error: Exception | None = None
        #: Raised when a session is opened; a list is consumed one per open (None = success).
        self.open_error: BaseException | list[BaseException | None] | None = None
        #: When set, opening a session waits for this event first.
        self.open_gate: trio.Event | None = None
        #: `capabilities().overrides` on top of the default; and the fields its sessions
        #: apply live in `reconfigure` (the others make the engine reopen the session).
        self.overrides: dict[str, Any] = {}
        self.live_fields: frozenset[str] = frozenset()
        #: `capabilities().steer`, `.fork`.
        self.steerable = False
        self.forkable = False
        #: Every session turns unhealthy after each turn (the engine must reopen it).
        self.unhealthy_after_turn = False
        #: Reported through `ctx.set_backend_session_id` at the start of every turn.
        self.session_id: str | None = "cli-session-1"
        # -- records -------------------------------------------------------------------------
        #: Snapshots (copies) of the settings of every session open attempt, in order.
        self.settings_seen: list[b.SessionSettings] = []
        self.sessions: list[ScriptedSession] = []
        self.sessions_opened = 0
        self.sessions_closed = 0
        self.open_attempts = 0
        self.turn_inputs: list[b.TurnInput] = []
        self.contexts: list[b.TurnContext] = []
        self.interrupt_calls = 0
        #: What `reconfigure` was called with, and the inputs steered into turns.
        self.reconfigured: list[frozenset[str]] = []
        self.steered: list[b.TurnInput] = []
        #: Turn ids whose script was cancelled from outside (hard cancel / timeout).
        self.cancelled_turns: list[str] = []
        #: Turn ids whose `run_turn` returned normally.
        self.returned_turns: list[str] = []

    def capabilities(self, mode: str) -> BackendCapabilities:
        return mode_capabilities(
            "in-process test script",
            "",
            interrupt=self.supports_interrupt,
            overrides=self.overrides,
            steer=self.steerable,
            fork=self.forkable,
        )

    def foreign_model(self, model: str) -> bool:
        return model.startswith("foreign-")

    async def check(self, cli_path: str | None = None) -> b.BackendCheck:
        return b.BackendCheck(available=True, version="0-test")

    def cli_command(self, settings: b.SessionSettings) -> str | None:
        return None  # in-process: no CLI to look up

    def models(self) -> list[Model]:
        return []

    def _next_open_error(self) -> BaseException | None:
        err = self.open_error
        if isinstance(err, list):
            return err.pop(0) if err else None
        return err

    @asynccontextmanager
    async def _session(self, settings: b.SessionSettings) -> AsyncIterator[ScriptedSession]:
        self.open_attempts += 1
        self.settings_seen.append(dataclasses.replace(settings))
        if self.open_gate is not None:
            await self.open_gate.wait()
        err = self._next_open_error()
        if err is not None:
            raise err
        session = ScriptedSession(self, settings, len(self.sessions))
        self.sessions.append(session)
        self.sessions_opened += 1
        try:
            yield session
        finally:
            session.closed = True
            self.sessions_closed += 1

    def session(self, settings: b.SessionSettings) -> Any:
        return self._session(settings)
