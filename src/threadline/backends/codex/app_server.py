"""Codex's app-server mode: a thread is a Codex thread on a `codex app-server` (shared with the
server's other codex threads of the same binary, flags and environment: `pool.CodexPool`),
its JSON-RPC proxied 1:1."""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from typing import Any

import msgspec
import trio

from ... import protocol as p
from ...channels import drain, receive_ready_or_none, send_ready
from ...procs.group import GroupProcess, processes_gone
from ...rpc.endpoint import Incoming, ResponseError
from ...rpc.errors import METHOD_NOT_FOUND, RpcError
from .. import base as b
from ..kit.api_errors import ConnectionWatch, is_connection_failure, no_credentials
from ..kit.mcp import approval_name, is_dynamic
from .api import api_failure, provider_url, retry_status
from .commands import escalate, kill_thread_commands
from .host import CodexHost
from .inputs import app_server_input
from .invocation import (
    _ACTIONS_DECODER,
    _COMMON_FLAGS,
    _ERROR_DECODER,
    _ITEM_DECODER,
    _STEP_DECODER,
    _STOP_WAIT,
    _USAGE_DECODER,
    CodexCommand,
    _config_flags,
    _convert,
    _exit_error,
    thread_config,
)
from .mcp import APPROVAL_KIND, mcp_config, with_error
from .models import codex_models
from .overrides import own_model, turn_overrides
from .spec import SPEC

__all__ = ["CodexAppServerSession", "app_server_argv"]

log = logging.getLogger("threadline.backend.codex")

#: How long the first turn waits for the thread's MCP servers to start (Codex itself waits
#: about 1 s, then leaves a slower server's tools out of the model's request).
_MCP_START_WAIT = 30.0
_MCP_STARTED = ("ready", "failed", "cancelled")
#: How long a steer waits for the turn being started to get its Codex turn id (the first
#: turn waits for the thread's MCP servers first).
_STEER_WAIT = _MCP_START_WAIT + 10
#: A thread leaving the app-server while its Codex turn still runs (the engine gave up on
#: it): how long Codex gets to answer `turn/interrupt` and end the turn before the process
#: counts as hung and is retired.
_ABANDON_WAIT = 3.0
#: How long the commands of an interrupted turn get after SIGTERM before SIGKILL.
_KILL_GRACE = 3.0


def app_server_argv(codex: CodexCommand, settings: b.SessionSettings) -> list[str]:
    """The app-server's command line: what must match for two threads to share one."""
    flags = _config_flags(settings, process_only=True)
    return [codex.binary, "app-server", *_COMMON_FLAGS, *flags]


class CodexAppServerSession(b.BackendSession):
    """One thread on an app-server (`host`): `open` starts or resumes its Codex thread,
    `detach` leaves the process (`thread/unsubscribe`) without stopping it."""

    def __init__(
        self, settings: b.SessionSettings, codex: CodexCommand, host: CodexHost | None = None
    ) -> None:
        self.settings = settings
        #: (None: a process of the thread's own, not started yet.)
        self.host = host or CodexHost(app_server_argv(codex, settings), settings.cwd, {})
        self.codex_thread_id: str | None = None
        self._events_send, self._events = trio.open_memory_channel[Incoming | None](10_000)
        #: Set once the process has ended or the session left it.
        self.exited = trio.Event()
        self._turn_id: str | None = None
        #: The Codex turn started and not seen completing (the engine may give up on it).
        self._open_turn: str | None = None
        self._turn_began = time.monotonic()
        # Command items of the running turn that have not been allowed to run (their approval
        # is pending, declined or cancelled): an interrupt leaves nothing of theirs running.
        self._not_running: set[str] = set()
        # Processes `stop_commands` killed in the running turn (pid -> start time).
        self._stopped: dict[int, int] = {}
        #: The provider needs an OpenAI login and `account/read` found none.
        self._logged_out = False
        #: The running turn's error once Codex's retries cannot help (it is interrupted).
        self._gave_up: p.TurnError | None = None
        self.mcp = mcp_config(settings, inline=True)
        #: The start-up state (and error) Codex reported of each of the thread's MCP servers.
        self._mcp_state: dict[str, tuple[str, str | None]] = {}
        self._mcp_started = trio.Event()
        if not self.mcp.servers:
            self._mcp_started.set()
        self._mcp_warned: set[str] = set()
        #: MCP tool items of the running turn: id -> (server, tool); the ids not shown.
        self._mcp_calls: dict[str, tuple[str, str]] = {}
        self._hidden: set[str] = set()
        #: Override fields the next `turn/start` sends (Codex keeps them for later turns):
        #: those `thread/start`/`thread/resume` cannot take, and those changed since.
        self._pending: set[str] = {"effort", "summary"}
        if settings.sandbox_policy is not None:
            self._pending.add("sandboxPolicy")
        #: The model Codex opened the thread with (sent when the thread's model is reset).
        self._default_model: str | None = None
        #: Set once the turn being started has its Codex turn id (or failed to start).
        self._started = trio.Event()
        self._started.set()
        #: A `thread/compact/start` runs (its turn id comes with `turn/started`).
        self._compacting = False

    @property
    def proc(self) -> GroupProcess | None:
        return self.host.proc

    # -- routing (the host's reader task calls these) ------------------------------------------

    async def deliver(self, message: Incoming) -> None:
        # Codex's requests reach `_events` in arrival order with its notifications: the
        # running turn answers them (`_server_request`).
        if message.id is None and message.method == "mcpServer/startupStatus/updated":
            self._mcp_status(_params(message))
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            await send_ready(self._events_send, message)

    def deliver_nowait(self, message: Incoming) -> None:
        if message.id is None and message.method == "mcpServer/startupStatus/updated":
            self._mcp_status(_params(message))
        with suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self._events_send.send_nowait(message)

    def host_died(self) -> None:
        self.healthy = False
        self.exited.set()
        with suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            self._events_send.send_nowait(None)

    def _mcp_status(self, params: dict[str, Any]) -> None:
        """Record a server's start-up state; once each of the thread's servers has started
        or failed, `_mcp_started` is set."""
        name, status = str(params.get("name") or ""), str(params.get("status") or "")
        if name not in self.mcp.servers:
            return  # one of the user's own servers
        error = params.get("error")
        self._mcp_state[name] = (status, str(error) if error else None)
        if all(self._mcp_state.get(n, ("",))[0] in _MCP_STARTED for n in self.mcp.servers):
            self._mcp_started.set()

    async def _servers_started(self, ctx: b.TurnContext) -> None:
        """Wait (bounded) until the thread's MCP servers have started, so that their tools
        are offered from the first request on; warn of each that failed."""
        with trio.move_on_after(_MCP_START_WAIT):
            await self._mcp_started.wait()
        for name, (status, error) in sorted(self._mcp_state.items()):
            if status in ("failed", "cancelled") and name not in self._mcp_warned:
                self._mcp_warned.add(name)
                reason = error or status
                await ctx.emit(b.Warning(f"MCP server {name!r} failed to start: {reason}"))

    # -- JSON-RPC ------------------------------------------------------------------------------

    async def request(
        self, method: str, params: Any, timeout: float = 60, sent: trio.Event | None = None
    ) -> Any:
        """Codex's result; raises `ResponseError` for its error answer, `BackendError` when it
        does not answer."""
        if self.exited.is_set():
            raise _exit_error(self.proc, "is not running")
        try:
            return await self.host.request(method, params, timeout=timeout, sent=sent)
        except b.BackendError:
            if not self.host.alive:
                self.healthy = False
            raise

    async def _respond(self, request: Incoming, result: Any, error: RpcError | None) -> None:
        await self.host.respond(request, result, error)

    # -- the thread on the process -------------------------------------------------------------

    async def open(self) -> None:
        """Start, resume or fork the thread's Codex thread on the process."""
        params: dict[str, Any] = {
            "cwd": self.settings.cwd,
            "approvalPolicy": self.settings.approval_policy,
        }
        if self.settings.model and self.settings.model != "default":
            params["model"] = self.settings.model
        if self.settings.sandbox:
            params["sandbox"] = self.settings.sandbox
        if self.settings.developer_instructions:
            params["developerInstructions"] = self.settings.developer_instructions
        if self.settings.base_instructions:
            params["baseInstructions"] = self.settings.base_instructions
        config = thread_config(self.settings)
        if self.mcp.servers:
            config["mcp_servers"] = self.mcp.servers
        if config:
            params["config"] = config
        if self.settings.backend_session_id:
            # Its messages are this session's from the start (MCP start-up states).
            self.host.claim(self.settings.backend_session_id, self)
        result = await self._open_thread(params)
        thread = (result or {}).get("thread") or {}
        self.codex_thread_id = str(thread.get("id") or self.settings.backend_session_id)
        self.host.claim(self.codex_thread_id, self)
        if self.settings.backend_session_id:
            # A thread still loaded in the process (left by an earlier session of this
            # thread) keeps the settings it had: the first turn sends them again.
            self._pending |= {"approvalPolicy", "sandboxPolicy", "cwd"}
            if own_model(self.settings) is not None:
                self._pending.add("model")
        if own_model(self.settings) is None:
            self._default_model = (result or {}).get("model")
        self._logged_out = await self._no_login()

    async def _open_thread(self, params: dict[str, Any]) -> Any:
        """Resume the thread's Codex thread, fork the source's (`thread/fork`: a new Codex
        thread with its history, the source untouched), or start one."""
        s = self.settings
        try:
            if s.backend_session_id:
                # Codex does not keep sandbox/approval policy across resume: send them again.
                return await self.request(
                    "thread/resume",
                    {**params, "threadId": s.backend_session_id, "excludeTurns": True},
                )
            if s.fork_of:
                result = await self.request(
                    "thread/fork", {**params, "threadId": s.fork_of, "excludeTurns": True}
                )
                # From now on this thread resumes its own Codex thread, never forks again.
                s.backend_session_id = str(((result or {}).get("thread") or {}).get("id"))
                return result
            return await self.request("thread/start", params)
        except ResponseError as exc:
            raise b.BackendError(
                f"codex refused to open the thread: {exc.message}", codex_error_info="other"
            ) from None

    async def _no_login(self) -> bool:
        """Whether the model provider needs an OpenAI login and Codex has none: it would send
        its requests without credentials (`account/read`)."""
        try:
            account = await self.request("account/read", {}, timeout=10) or {}
        except (ResponseError, b.BackendError):
            return False
        return bool(account.get("requiresOpenaiAuth")) and account.get("account") is None

    async def detach(self) -> None:
        """Leave the process: a Codex turn the engine gave up on is interrupted (and its
        commands killed) first; a process that does not end it in time is retired, as hung.
        Then `thread/unsubscribe`; the process itself stays up for its other threads."""
        host, thread_id = self.host, self.codex_thread_id
        try:
            if host.alive and thread_id is not None and not self.exited.is_set():
                if self._open_turn is not None:
                    await self._abandon_turn(thread_id, self._open_turn)
                if host.retired:
                    return  # (hung: no answer to wait for)
                try:
                    await self.request("thread/unsubscribe", {"threadId": thread_id}, timeout=5)
                except (ResponseError, b.BackendError) as exc:
                    log.info("codex thread/unsubscribe: %s", exc)
        finally:
            host.release(self)
            self.healthy = False
            self.exited.set()
            self._events_send.close()

    async def _abandon_turn(self, thread_id: str, turn_id: str) -> None:
        """End a Codex turn no threadline turn follows any more (see `detach`)."""
        self.stop_commands(self._turn_began)
        try:
            params = {"threadId": thread_id, "turnId": turn_id}
            await self.request("turn/interrupt", params, timeout=_ABANDON_WAIT)
        except ResponseError:
            return  # no such turn running: it has ended
        except b.BackendError as exc:
            self.host.retire(f"turn/interrupt of an abandoned turn: {exc.message}")
            return
        with trio.move_on_after(_ABANDON_WAIT):
            while (msg := await receive_ready_or_none(self._events)) is not None:
                if msg.id is not None:
                    await self._respond(msg, None, RpcError(METHOD_NOT_FOUND, "turn is over"))
                elif msg.method == "turn/completed":
                    return
            return
        self.host.retire(f"turn {turn_id} did not end after turn/interrupt")

    # -- turns -----------------------------------------------------------------------------------

    async def interrupt(self) -> None:
        if self._turn_id is None or self.codex_thread_id is None or self.exited.is_set():
            return
        params = {"threadId": self.codex_thread_id, "turnId": self._turn_id}
        # Return once the request is out, not when Codex answers it (its turn/completed ends
        # the turn either way): the engine then kills the running command at once.
        sent = trio.Event()
        if not self.host.start_soon(self._interrupt, params, sent):
            return
        await sent.wait()

    async def _interrupt(self, params: dict[str, Any], sent: trio.Event | None = None) -> None:
        try:
            await self.request("turn/interrupt", params, timeout=10, sent=sent)
        except ResponseError as exc:
            log.info("codex turn/interrupt: %s", exc.message)
        except b.BackendError as exc:
            log.warning("codex turn/interrupt: %s", exc.message)
        finally:
            if sent is not None:
                sent.set()

    def stop_commands(self, since: float) -> None:
        """Kill the commands Codex started for this thread since `since` (the engine calls
        this right after `interrupt`): Codex leaves an interrupted one running. Only this
        thread's (`commands.kill_thread_commands`): other threads' turns on the same
        process go on."""
        proc, thread_id = self.proc, self.codex_thread_id
        if proc is None or thread_id is None or self.exited.is_set():
            return
        killed = kill_thread_commands(proc.pid, thread_id, since)
        if killed:
            self._stopped.update(killed)
            self.host.start_soon(escalate, killed, _KILL_GRACE)

    async def _commands_stopped(self) -> bool:
        """Whether `stop_commands` killed something and all of it is gone (given up to
        `_STOP_WAIT` s to go): then the interrupted turn left nothing running."""
        if not self._stopped:
            return False
        with trio.move_on_after(_STOP_WAIT):
            while not processes_gone(self._stopped):  # noqa: ASYNC110 - polling /proc
                await trio.sleep(0.002)
            return True
        return False

    async def _ready(self, ctx: b.TurnContext) -> str:
        """Check the app-server can take a turn now; its Codex thread id."""
        if self.codex_thread_id is None or self.exited.is_set():
            raise _exit_error(self.proc, "is not running")
        # Drop what arrived for the thread between turns.
        if drain(self._events)[1]:
            raise _exit_error(self.proc, "exited between turns")
        await ctx.set_backend_session_id(self.codex_thread_id)
        if self._logged_out and await self._no_login():
            detail = "codex is not logged in (`account/read`: no account)"
            raise b.BackendError.of(no_credentials(SPEC, detail))
        self._logged_out = False
        return self.codex_thread_id

    async def run_turn(self, turn: b.TurnInput, ctx: b.TurnContext) -> b.TurnOutcome | None:
        self._started = trio.Event()
        self._turn_began = time.monotonic()
        try:
            params = await self._turn_params(turn, ctx)
            result = await self.request("turn/start", params)
        except ResponseError as exc:
            raise b.BackendError(
                f"codex rejected the turn: {exc.message}", codex_error_info="other"
            ) from None
        finally:
            self._started.set()
        self._pending.clear()
        self._turn_id = str(((result or {}).get("turn") or {}).get("id") or "")
        self._open_turn = self._turn_id or None
        return await self._follow(ctx)

    async def _turn_params(self, turn: b.TurnInput, ctx: b.TurnContext) -> dict[str, Any]:
        """Get the app-server ready for the turn; the turn's `turn/start` params."""
        thread_id = await self._ready(ctx)
        if turn.bootstrap:
            # Codex takes the role natively as developer instructions (thread/start).
            await ctx.mark_role_bootstrap_applied()
        await self._servers_started(ctx)
        params: dict[str, Any] = {
            "threadId": thread_id,
            "input": app_server_input(turn.input, self.settings.cwd),
            **await self._overrides(),
        }
        if turn.output_schema is not None:
            params["outputSchema"] = turn.output_schema  # this turn only (Codex's rule)
        return params

    async def _overrides(self) -> dict[str, Any]:
        """The `turn/start` overrides pending (see `_pending`)."""
        reset = "model" in self._pending and own_model(self.settings) is None
        if reset and self._default_model is None:
            # The thread opened with a model of its own: the default is Codex's configured one.
            try:
                read = await self.request("config/read", {"cwd": self.settings.cwd}, timeout=10)
                self._default_model = ((read or {}).get("config") or {}).get("model")
            except ResponseError as exc:
                log.info("codex config/read: %s", exc.message)
        return turn_overrides(self.settings, self._pending, self._default_model)

    async def reconfigure(self, changed: frozenset[str]) -> frozenset[str]:
        """Every override is a `turn/start` param of Codex's: sent with the next turn."""
        self._pending |= changed
        return frozenset()

    async def steer(self, turn: b.TurnInput) -> None:
        """Codex's `turn/steer`: the input joins the running turn (Codex drops the response
        in flight and samples again with it)."""
        if self._compacting:
            raise b.BackendError("codex cannot add input to a compaction")
        with trio.move_on_after(_STEER_WAIT):
            await self._started.wait()  # a turn being started has its id soon
        if self._turn_id is None or self.codex_thread_id is None:
            raise b.BackendError("codex has no running turn to steer")
        params = {
            "threadId": self.codex_thread_id,
            "expectedTurnId": self._turn_id,
            "input": app_server_input(turn.input, self.settings.cwd),
        }
        try:
            await self.request("turn/steer", params, timeout=10)
        except ResponseError as exc:
            raise b.BackendError(f"codex refused to steer the turn: {exc.message}") from None

    async def compact(self, ctx: b.TurnContext) -> b.TurnOutcome | None:
        """Codex's `thread/compact/start`: a turn of Codex's own, followed to its end (its
        `contextCompaction` item is the engine's, not shown twice)."""
        thread_id = await self._ready(ctx)
        self._compacting, self._turn_id = True, None
        self._turn_began = time.monotonic()
        try:
            await self.request("thread/compact/start", {"threadId": thread_id})
            return await self._follow(ctx)
        except ResponseError as exc:
            raise b.BackendError(
                f"codex refused to compact the thread: {exc.message}", codex_error_info="other"
            ) from None
        finally:
            self._compacting = False

    async def inject_items(self, items: list[Any]) -> bool:
        """Codex's `thread/inject_items`: the items join the thread's model context as they
        are. Refused by Codex: False (the engine sends them as a transcript instead)."""
        if self.codex_thread_id is None or self.exited.is_set():
            raise _exit_error(self.proc, "is not running")
        params = {"threadId": self.codex_thread_id, "items": items}
        try:
            await self.request("thread/inject_items", params, timeout=10)
        except ResponseError as exc:
            log.warning("codex thread/inject_items refused (%s): sent as text", exc.message)
            return False
        return True

    async def list_models(self) -> list[p.Model] | None:
        """Codex's `model/list` (its visible models, every page); None when it fails."""
        models: list[p.Model] = []
        cursor = None
        try:
            while True:
                page = await self.request("model/list", {"cursor": cursor}, timeout=10) or {}
                models += codex_models(page.get("data"))
                cursor = page.get("nextCursor")
                if not cursor:
                    return models
        except (ResponseError, b.BackendError) as exc:
            log.info("codex model/list: %s", exc)
            return None

    async def _follow(self, ctx: b.TurnContext) -> b.TurnOutcome:
        """Follow the running turn (`_turn_id`; a compaction's comes with `turn/started`) to
        its `turn/completed`, translating its events and answering Codex's requests."""
        in_flight_commands: set[str] = set()
        self._not_running = set()
        self._stopped = {}
        self._mcp_calls, self._hidden = {}, set()
        final_error: p.TurnError | None = None
        watch = ConnectionWatch()
        self._gave_up = None
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    msg = await self._next_event()
                    if msg.id is not None:
                        nursery.start_soon(self._server_request, msg, ctx)
                        continue
                    method = msg.method
                    params = _params(msg)
                    if params.get("threadId") not in (None, self.codex_thread_id):
                        continue
                    if method == "turn/started" and self._turn_id is None:
                        self._turn_id = str((params.get("turn") or {}).get("id") or "") or None
                        self._open_turn = self._turn_id
                    if params.get("turnId") not in (None, self._turn_id) and method != "error":
                        continue
                    if method == "turn/completed":
                        self._open_turn = None
                        outcome = self._outcome(params.get("turn") or {}, final_error)
                        if self._gave_up is not None:
                            nursery.cancel_scope.cancel()
                            return b.TurnOutcome("failed", self._gave_up)
                        if (
                            outcome.status == "interrupted"
                            and (in_flight_commands - self._not_running)
                            and not await self._commands_stopped()
                        ):
                            # Codex leaves an interrupted command running (not one still
                            # waiting for its approval: it never started).
                            await self._kill_leftovers()
                        nursery.cancel_scope.cancel()
                        return outcome
                    if method == "error":
                        final_error = await self._error(params, ctx, watch) or final_error
                        continue
                    if method.startswith("item/"):
                        watch.progress()  # the model answers
                    await self._translate(method, params, ctx, in_flight_commands)
        finally:
            self._turn_id = None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _kill_leftovers(self) -> None:
        """An interrupted turn's commands that `stop_commands` did not kill: this thread's
        commands of the turn get SIGKILL. Any that still runs then (unkillable): the process
        is retired (it stops once its last thread left; its process group dies with it) and
        this thread resumes on another one."""
        proc, thread_id = self.proc, self.codex_thread_id
        if proc is None or thread_id is None:
            return
        left = kill_thread_commands(proc.pid, thread_id, self._turn_began)
        await escalate(left, 0)
        self._stopped = left
        if left and not await self._commands_stopped():
            self.healthy = False
            self.host.retire(f"an interrupted command of thread {thread_id} does not stop")

    async def _error(
        self, params: dict[str, Any], ctx: b.TurnContext, watch: ConnectionWatch
    ) -> p.TurnError | None:
        """An `error` notification: a retry notice goes out (and may end the turn), a final
        error is returned."""
        err: p.TurnError | None = _convert(params.get("error"), _ERROR_DECODER)
        if err is None or not params.get("willRetry"):
            return err
        await ctx.emit(b.RetryableError(err))
        self._check_retry(err, watch)
        return None

    def _check_retry(self, err: p.TurnError, watch: ConnectionWatch) -> None:
        """A retry notice: once retrying cannot help (a 401 again, or no connection for the
        budget), interrupt the turn; it then ends with `_gave_up`."""
        if self._gave_up is not None or self._turn_id is None:
            return
        status = retry_status(err)
        text = err.additional_details or err.message
        give_up = watch.refused() if status == 401 else None
        if status is None and is_connection_failure(text):
            give_up = watch.failed()
        if not give_up:
            return
        url = provider_url(self.settings.env, self.settings.config.get("codexConfig"))
        after = watch.elapsed() if status is None else None
        self._gave_up = api_failure(text, status, url, after=after)
        if self._gave_up is not None:
            params = {"threadId": self.codex_thread_id, "turnId": self._turn_id}
            self.host.start_soon(self._interrupt, params)

    async def _next_event(self) -> Incoming:
        msg = await receive_ready_or_none(self._events)
        if msg is None:
            self.healthy = False
            raise _exit_error(self.proc, "exited in the middle of a turn")
        return msg

    def _outcome(self, turn: dict[str, Any], final_error: p.TurnError | None) -> b.TurnOutcome:
        status = turn.get("status")
        if status == "completed":
            return b.TurnOutcome("completed")
        if status == "interrupted":
            return b.TurnOutcome("interrupted")
        error = _convert(turn.get("error"), _ERROR_DECODER) or final_error
        if error is not None:
            url = provider_url(self.settings.env, self.settings.config.get("codexConfig"))
            error = api_failure(error.message, retry_status(error), url) or error
        return b.TurnOutcome(
            "failed",
            error or p.TurnError(message="codex reported a failed turn", codex_error_info="other"),
        )

    async def _translate(
        self, method: str, params: dict[str, Any], ctx: b.TurnContext, in_flight: set[str]
    ) -> None:
        item_id = str(params.get("itemId") or "")
        match method:
            case "item/started" | "item/completed":
                item = _convert(params.get("item"), _ITEM_DECODER)
                if item is None:
                    log.info(
                        "skipping a codex item this protocol does not model: %s",
                        (params.get("item") or {}).get("type"),
                    )
                    return
                if isinstance(item, p.UserMessageItem):
                    return  # the engine reports the turn's input (and steered input) itself
                if isinstance(item, p.ContextCompactionItem) and self._compacting:
                    return  # the engine reports the compaction it asked for
                if isinstance(item, p.CommandExecutionItem):
                    (in_flight.add if method == "item/started" else in_flight.discard)(item.id)
                if isinstance(item, p.McpToolCallItem):
                    if self._mcp_item(item, method):
                        return
                    item = with_error(item)
                await ctx.emit(
                    b.ItemStarted(item) if method == "item/started" else b.ItemCompleted(item)
                )
            case "item/agentMessage/delta":
                await ctx.emit(b.AgentMessageDelta(item_id, str(params.get("delta", ""))))
            case "item/plan/delta":
                await ctx.emit(b.PlanDelta(item_id, str(params.get("delta", ""))))
            case "item/reasoning/summaryPartAdded":
                await ctx.emit(
                    b.ReasoningSummaryPartAdded(item_id, int(params.get("summaryIndex", 0)))
                )
            case "item/reasoning/summaryTextDelta":
                await ctx.emit(
                    b.ReasoningSummaryDelta(
                        item_id, str(params.get("delta", "")), int(params.get("summaryIndex", 0))
                    )
                )
            case "item/reasoning/textDelta":
                await ctx.emit(
                    b.ReasoningTextDelta(
                        item_id, str(params.get("delta", "")), int(params.get("contentIndex", 0))
                    )
                )
            case "item/commandExecution/outputDelta":
                await ctx.emit(b.CommandOutputDelta(item_id, str(params.get("delta", ""))))
            case "item/fileChange/outputDelta":
                await ctx.emit(b.FileChangeOutputDelta(item_id, str(params.get("delta", ""))))
            case "item/mcpToolCall/progress":
                if item_id not in self._hidden:
                    await ctx.emit(b.McpProgress(item_id, str(params.get("message", ""))))
            case "turn/plan/updated":
                steps = _convert(params.get("plan"), _STEP_DECODER)
                if steps is not None:
                    await ctx.emit(b.PlanUpdated(steps, params.get("explanation")))
            case "turn/diff/updated":
                await ctx.emit(b.DiffUpdated(str(params.get("diff", ""))))
            case "thread/tokenUsage/updated":
                usage = _convert(params.get("tokenUsage"), _USAGE_DECODER)
                if usage is not None:
                    await ctx.emit(b.TokenUsageUpdated(usage))
            case "warning":
                await ctx.emit(b.Warning(str(params.get("message", ""))))
            case _:
                pass  # status changes, rate limits, read state: ours are computed by the engine

    async def _server_request(self, request: Incoming, ctx: b.TurnContext) -> None:
        try:
            result, error = await self._answer(request, ctx), None
        except RpcError as exc:
            result, error = None, exc
        await self._respond(request, result, error)

    async def _answer(self, request: Incoming, ctx: b.TurnContext) -> dict[str, Any]:
        """The result for a request of codex's (raises `RpcError` for one not handled)."""
        method = request.method
        params = _params(request)
        item_id = str(params.get("itemId") or "")
        if method == "item/commandExecution/requestApproval":
            self._not_running.add(item_id)
            decision = await ctx.request_approval(
                b.ApprovalRequest(
                    kind="command",
                    item_id=item_id,
                    command=params.get("command"),
                    cwd=params.get("cwd") or self.settings.cwd,
                    reason=params.get("reason"),
                    # Codex's own parse of the command (read/search/...), as on its item;
                    # (was always `unknown` with the whole `bash -lc` line)
                    command_actions=_convert(params.get("commandActions"), _ACTIONS_DECODER)
                    or [p.UnknownAction(command=str(params.get("command") or ""))],
                )
            )
            if decision in ("accept", "acceptForSession"):
                self._not_running.discard(item_id)
            return {"decision": decision}
        if method == "item/fileChange/requestApproval":
            decision = await ctx.request_approval(
                b.ApprovalRequest(
                    kind="fileChange",
                    item_id=item_id,
                    reason=params.get("reason"),
                    grant_root=params.get("grantRoot"),
                )
            )
            return {"decision": decision}
        if method == "item/tool/requestUserInput":
            questions = (
                _convert(
                    params.get("questions"),
                    msgspec.json.Decoder(list[p.ToolRequestUserInputQuestion]),
                )
                or []
            )
            answers = await ctx.request_user_input(item_id, questions)
            return {"answers": {k: {"answers": v} for k, v in (answers or {}).items()}}
        if method == "item/permissions/requestApproval":
            return {"permissions": {}}  # fail closed: grant nothing
        if method == "mcpServer/elicitation/request":
            return await self._elicitation(params, ctx)
        raise RpcError(METHOD_NOT_FOUND, f"threadline does not handle {method}")

    def _mcp_item(self, item: p.McpToolCallItem, method: str) -> bool:
        """Track an MCP tool item; whether it is hidden (a tool of the client's own, reported
        by threadline's tool host)."""
        if is_dynamic(item.server):
            self._hidden.add(item.id)
            return True
        if method == "item/started":
            self._mcp_calls[item.id] = (item.server, item.tool)
        else:
            self._mcp_calls.pop(item.id, None)
        return False

    async def _elicitation(self, params: dict[str, Any], ctx: b.TurnContext) -> dict[str, Any]:
        """Codex asks before an MCP tool call by an elicitation: the client gets it as
        `item/tool/requestApproval` for the call's item. Any other elicitation is declined."""
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        server = str(params.get("serverName") or "")
        if meta.get("codex_approval_kind") != APPROVAL_KIND:
            return {"action": "decline"}
        if is_dynamic(server):
            return {"action": "accept"}
        tool = str(meta.get("tool_name") or "")
        # The call's item was announced just before (Codex: item/started, then the request).
        item_id = next(
            (i for i, st in reversed(self._mcp_calls.items()) if st == (server, tool)), None
        )
        if item_id is None:
            log.warning("codex asked about an MCP call without an item (%s): declined", server)
            return {"action": "decline"}
        del self._mcp_calls[item_id]  # asked once
        decision = await ctx.request_approval(
            b.ApprovalRequest(
                kind="tool",
                item_id=item_id,
                tool=approval_name(server, tool),
                arguments=meta.get("tool_params"),
                reason=str(params.get("message") or "") or None,
            )
        )
        if decision in ("accept", "acceptForSession"):
            return {"action": "accept"}
        return {"action": "decline" if decision == "decline" else "cancel"}


def _params(message: Incoming) -> dict[str, Any]:
    """A message's params when they are an object (else none)."""
    params = message.json_params()
    return params if isinstance(params, dict) else {}
