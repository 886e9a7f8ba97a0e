"""`ServerHost`: one `threadline app-server` child over stdio, driven from plain threads.

The server runs as a child process (not inside the host's process), in a session of its own:
a crash or leak of the engine or of a CLI stays out of the host, the child is the same program
users run, and when the host dies (even with its process group) the child's stdin reaches
EOF, so it ends its turns, kills its CLIs and exits. The
Python client (trio) runs in a thread of its own; every public method is a blocking call into
it, safe from any number of threads (a Ray threaded actor's).

A turn's messages — notifications and the server's requests — are queued in order on one
channel and read in batches (`next_batch`). A server request waits for `answer()`; no answer
within `approval_timeout`, the turn ending, the caller closing the stream or the host closing
all decline it (fail closed).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from ..client import Client, ServerClosed, ServerRequest, spawn
from .wire import failed_turn, refusal

__all__ = ["HostClosed", "ServerHost", "TurnRefused"]

#: Messages handed over per `next_batch` at most.
MAX_BATCH = 512

#: How long a new turn waits for the thread's abandoned turn to end (seconds).
ABANDONED_GRACE = 5.0

#: A JSON-RPC request id, as the server wrote it.
RequestId = int | str

#: What is handed over per message: the line as the server wrote it.
Line = bytes


class _HeadTurn(msgspec.Struct):
    id: str | None = None


class _HeadParams(msgspec.Struct, rename="camel"):
    thread_id: str | None = None
    request_id: int | str | None = None
    turn: _HeadTurn | None = None


class _Head(msgspec.Struct):
    """What routes a line: its method, its id (a request) and its thread."""

    method: str | None = None
    id: int | str | None = None
    params: _HeadParams | None = None


_decode_head = msgspec.json.Decoder(_Head).decode


class TurnRefused(Exception):
    """The server refused `turn/start` (unknown thread, a turn already running, bad input)."""


class HostClosed(Exception):
    """The host's threadline server is gone (it exited, or the host was closed)."""


@dataclass
class _Turn:
    thread_id: str
    send: trio.MemorySendChannel[Line]
    receive: trio.MemoryReceiveChannel[Line]
    turn_id: str | None = None
    abandoned: bool = False
    ended: trio.Event = field(default_factory=trio.Event)
    #: The ids of its server requests still waiting for an answer.
    pending: set[RequestId] = field(default_factory=set)


@dataclass
class _Pending:
    method: str
    turn: _Turn
    answered: trio.Event = field(default_factory=trio.Event)
    result: Any = None


class ServerHost:
    """A threadline server in a child process and the trio thread that talks to it."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        argv: Sequence[str] | None = None,
        approval_timeout: float = 600.0,
        start_timeout: float = 60.0,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        """`on_exit` is called (in the host's thread) when the server exits by itself, after
        its running turns were ended `failed`."""
        self.approval_timeout = approval_timeout
        self._on_exit = on_exit
        self._env = dict(env or {})
        self._argv = list(argv) if argv is not None else None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        #: The running turns, by thread id (one per thread, as the server allows).
        self._turns: dict[str, _Turn] = {}
        self._pending: dict[RequestId, _Pending] = {}
        self._thread = threading.Thread(target=self._main, name="threadline-host", daemon=True)
        self._thread.start()
        if not self._started.wait(start_timeout):
            raise HostClosed(f"the threadline server did not start within {start_timeout} s")
        if self._start_error is not None:
            raise HostClosed(f"the threadline server did not start: {self._start_error}")

    # -- the trio side ---------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:
            self._start_error = exc
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            # Leaving `spawn` closes the server's stdin and waits for it to exit; the turns it
            # ends meanwhile still reach their streams.
            # A session of its own: a kill of the host's process group (Ray kills an actor's
            # worker with its group) leaves the server to see stdin EOF and shut down in
            # order — record its turns' end, kill its CLIs' groups — not die with them.
            async with spawn(
                self._argv,
                env=self._env,
                approval_handler=self._ask,
                trace=self._route,
                start_new_session=True,
            ) as client:
                self._client = client
                self._token = trio.lowlevel.current_trio_token()
                nursery.start_soon(self._watch_server, client)
                self._started.set()
                await self._stop.wait()
            nursery.cancel_scope.cancel()
        self._fail_turns("the threadline server was stopped")

    async def _watch_server(self, client: Client) -> None:
        """The server's output ending (it exited) fails the running turns. The subscription
        only shows that end: it is drained a few times a second, not woken per message."""
        with client.subscribe() as updates, suppress(trio.EndOfChannel):
            while True:
                await updates.receive()
                await trio.sleep(0.2)
                with suppress(trio.WouldBlock):
                    while True:
                        updates.receive_nowait()
        by_itself = not self._stop.is_set()  # else `close()` stopped it
        self._fail_turns("the threadline server exited")
        self._stop.set()
        if by_itself and self._on_exit is not None:
            self._on_exit()

    def _fail_turns(self, why: str) -> None:
        for turn in list(self._turns.values()):
            message = f"{why}; resume the thread on another server"
            failed = failed_turn(turn.thread_id, turn.turn_id, message)
            turn.send.send_nowait(msgspec.json.encode(failed))
            self._end(turn)

    def _route(self, direction: str, line: bytes) -> None:
        """Every line the server writes, in order: a running turn's notifications and
        server requests go onto its channel as the bytes the server wrote. Only the fields
        that route a line are decoded here; the caller decodes the rest (`wire.decode`)."""
        if direction != "receive":
            return
        try:
            head = _decode_head(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return  # not a message of a thread (or not one threadline writes)
        params = head.params
        if head.method is None or params is None or params.thread_id is None:
            return  # a response, or a message of no thread
        turn = self._turns.get(params.thread_id)
        if turn is None:
            return
        if head.id is not None:
            if turn.abandoned:
                return  # declined by _ask
            self._pending[head.id] = _Pending(head.method, turn)
            turn.pending.add(head.id)
        elif head.method == "serverRequest/resolved":
            self._resolve(params.request_id, None)
        turn.send.send_nowait(line)
        turn_id = params.turn.id if params.turn is not None else None
        if head.method == "turn/started" and turn.turn_id is None:
            turn.turn_id = turn_id
        elif head.method == "turn/completed" and turn.turn_id in (None, turn_id):
            self._end(turn)

    def _end(self, turn: _Turn) -> None:
        if self._turns.get(turn.thread_id) is turn:
            del self._turns[turn.thread_id]
        for request_id in list(turn.pending):
            self._resolve(request_id, None)
        turn.send.close()
        turn.ended.set()

    def _call(self, fn: Any, *args: Any) -> Any:
        if not self._thread.is_alive():
            raise HostClosed("the threadline server of this host has exited")
        try:
            return trio.from_thread.run(fn, *args, trio_token=self._token)
        except (trio.RunFinishedError, trio.Cancelled):  # the run ended meanwhile
            raise HostClosed("the threadline server of this host has exited") from None

    # -- requests --------------------------------------------------------------------------------

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Any request; the result as wire JSON (a JSON-RPC error raises `RpcError`)."""
        return self._call(self._request, method, params)

    async def _request(self, method: str, params: Mapping[str, Any] | None) -> Any:
        try:
            result = await self._client.request(method, dict(params or {}))
        except ServerClosed as exc:
            raise HostClosed(f"the threadline server exited: {exc}") from None
        return msgspec.to_builtins(result)

    def start_turn(
        self, thread_id: str, prompt: str | Sequence[Any], params: Mapping[str, Any]
    ) -> _Turn:
        """`turn/start` (`params`: its other wire fields: `model`, `effort`, ...); the turn's
        messages are then read with `next_batch`."""
        turn: _Turn = self._call(self._start_turn, thread_id, prompt, params)
        return turn

    async def _start_turn(
        self, thread_id: str, prompt: str | Sequence[Any], params: Mapping[str, Any]
    ) -> _Turn:
        running = self._turns.get(thread_id)
        if running is not None and running.abandoned:
            # Its caller left; its last messages may still be on their way.
            with trio.move_on_after(ABANDONED_GRACE):
                await running.ended.wait()
        if thread_id in self._turns:
            raise TurnRefused(f"turn/start on {thread_id} refused: a turn is running")
        inputs = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else list(prompt)
        send, receive = trio.open_memory_channel[Line](math.inf)
        # Registered before the request: the turn's first notifications are not missed.
        turn = self._turns[thread_id] = _Turn(thread_id, send, receive)
        try:
            response = await self._client.request(
                "turn/start", {**params, "threadId": thread_id, "input": inputs}
            )
        except BaseException as exc:
            if self._turns.get(thread_id) is turn:
                del self._turns[thread_id]
            if isinstance(exc, ServerClosed):
                raise HostClosed(f"the threadline server exited: {exc}") from None
            if isinstance(exc, Exception):
                raise TurnRefused(f"turn/start on {thread_id} refused: {exc}") from None
            raise
        if turn.turn_id is None:
            turn.turn_id = response.turn.id
        return turn

    async def _ask(self, request: ServerRequest) -> Any:
        """The client's handler of every server request: wait for the caller's answer (the
        request is on its turn's stream already); decline when none comes."""
        pending = self._pending.get(request.id)
        if pending is None:
            return refusal(request.method)
        try:
            with trio.move_on_after(self.approval_timeout):
                await pending.answered.wait()
        finally:
            self._pending.pop(request.id, None)
            pending.turn.pending.discard(request.id)
        return pending.result if pending.result is not None else refusal(request.method)

    def _resolve(self, request_id: Any, result: Any) -> bool:
        pending = self._pending.get(request_id)
        if pending is None or pending.answered.is_set():
            return False
        pending.result = result if isinstance(result, dict) else None
        pending.answered.set()
        return True

    def answer(self, request_id: RequestId, result: Any) -> bool:
        """Answer a server request of a running turn; False when it is no longer waiting
        (answered, timed out, withdrawn). A result that is not an object declines."""
        answered: bool = self._call(self._answer, request_id, result)
        return answered

    async def _answer(self, request_id: RequestId, result: Any) -> bool:
        return self._resolve(request_id, result)

    def next_batch(self, turn: _Turn, limit: int = MAX_BATCH) -> list[Line]:
        """The turn's next messages in order (waits for at least one); [] once it ended."""
        try:
            batch: list[Line] = self._call(self._next_batch, turn, limit)
        except HostClosed:
            return _drain(turn, limit)  # what the server's end queued is still to be read
        return batch

    async def _next_batch(self, turn: _Turn, limit: int) -> list[Line]:
        try:
            batch = [await turn.receive.receive()]
        except trio.EndOfChannel:
            return []
        while len(batch) < limit:
            try:
                batch.append(turn.receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel):
                break
        return batch

    def abandon(self, turn: _Turn) -> None:
        """The caller stopped reading the turn: its pending and later requests decline."""
        with suppress(HostClosed):
            self._call(self._abandon, turn)

    def abandon_thread(self, thread_id: str, turn_id: str | None) -> None:
        """`abandon` the thread's running turn, if it is `turn_id` (any, for None)."""
        with suppress(HostClosed):
            self._call(self._abandon_thread, thread_id, turn_id)

    async def _abandon_thread(self, thread_id: str, turn_id: str | None) -> None:
        turn = self._turns.get(thread_id)
        if turn is not None and turn_id in (None, turn.turn_id):
            await self._abandon(turn)

    async def _abandon(self, turn: _Turn) -> None:
        turn.abandoned = True
        for request_id in list(turn.pending):
            self._resolve(request_id, None)

    def close(self, timeout: float = 10.0) -> None:
        """Close the server's stdin (it ends its turns and exits) and wait for it."""
        if self._thread.is_alive():
            with suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(timeout)


def _drain(turn: _Turn, limit: int) -> list[Line]:
    """The turn's queued messages once the trio run is over (nothing more can come)."""
    batch: list[Line] = []
    with suppress(trio.WouldBlock, trio.EndOfChannel):
        while len(batch) < limit:
            batch.append(turn.receive.receive_nowait())
    return batch
