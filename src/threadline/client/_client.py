"""`Client`: one JSON-RPC connection to a threadline server, over any pair of trio streams.

The connection is a `threadline.rpc.endpoint.Endpoint`: responses go to the request that waits
for them, notifications to the turn running on their thread (and to `subscribe()`rs), and every
server request is answered by a handler in its own task, so a slow approval never stalls the
stream.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Any, TypedDict, TypeVar, Unpack

import trio

from ..protocol import (
    CLIENT_METHODS,
    SERVER_REQUESTS,
    AgentMessageItem,
    AskForApproval,
    Base,
    ClientInfo,
    InitializeParams,
    InitializeResponse,
    ItemCompletedNotification,
    ModelListResponse,
    SandboxPolicy,
    ThreadArchiveResponse,
    ThreadCompactStartParams,
    ThreadForkParams,
    ThreadForkResponse,
    ThreadItem,
    ThreadListResponse,
    ThreadReadResponse,
    ThreadResumeResponse,
    ThreadStartResponse,
    Turn,
    TurnCompletedNotification,
    TurnStartedNotification,
    TurnStartParams,
    TurnStartResponse,
    TurnSteerParams,
    TurnSteerResponse,
)
from ..rpc import errors
from ..rpc.endpoint import Endpoint, Incoming, PeerClosed, ResponseError
from ..rpc.framing import DEFAULT_MAX_LINE
from ..rpc.transport import StreamTransport, Trace, TracedTransport
from ._inputs import Prompt, to_inputs
from ._mail import MailRequests
from ._messages import (
    Notification,
    ServerRequest,
    UnknownNotification,
    decode_notification,
    decode_request_params,
)
from ._requests import ThreadRequests
from ._tools import Tool, answer_tool_call, handles, specs

__all__ = [
    "ApprovalHandler",
    "Client",
    "RpcError",
    "ServerClosed",
    "TurnOverrides",
    "TurnStream",
    "connect",
    "connected",
]

log = logging.getLogger("threadline.client")
_R = TypeVar("_R", bound=Base)

#: Answers a server request: return the result (a protocol Struct such as
#: `CommandExecutionRequestApprovalResponse(decision="accept")`, or a plain dict). Raising
#: answers with a decline: threadline fails closed, and so does this client.
ApprovalHandler = Callable[[ServerRequest], Awaitable[Any]]

_DECLINE = {"decision": "decline"}


class TurnOverrides(TypedDict, total=False):
    """`turn/start`'s per-turn settings. Each sticks for the thread's later turns, except
    `output_schema` (this turn's final message only) and `client_user_message_id` (the id
    of this turn's user message); how each reaches a backend is its mode's
    `capabilities.overrides` (a `warning` names one it cannot apply)."""

    model: str
    effort: str
    summary: str
    approval_policy: AskForApproval
    sandbox_policy: SandboxPolicy
    cwd: str
    output_schema: Any
    client_user_message_id: str


#: The server answered a request with a JSON-RPC error (`method`, `code`, `message`, `data`).
RpcError = ResponseError


class ServerClosed(PeerClosed):
    """The server's output ended (it exited or the connection closed)."""


class TurnStream:
    """The notifications of one turn, in order, ending with its `TurnCompletedNotification`.

    Iterate it (`async for n in turn`) or `await turn.wait()`; notifications are buffered until
    read, so reading late loses nothing."""

    def __init__(self, client: Client, thread_id: str, handler: ApprovalHandler | None) -> None:
        self._client = client
        self.thread_id = thread_id
        self.handler = handler
        #: The turn as `turn/start` answered it (status `inProgress`); for a compaction, as
        #: its `turn/started` announced it.
        self.turn: Turn | None = None
        #: Set once the turn's `turn/completed` arrived.
        self.completed: TurnCompletedNotification | None = None
        #: Items completed so far, in order.
        self.items: list[ThreadItem] = []
        self._send, self._recv = trio.open_memory_channel[Notification | ServerClosed](math.inf)

    @property
    def turn_id(self) -> str:
        assert self.turn is not None, "turn/start has not answered yet"
        return self.turn.id

    @property
    def text(self) -> str:
        """The text of the turn's agent messages completed so far, one line break between
        two messages."""
        return "\n".join(item.text for item in self.items if isinstance(item, AgentMessageItem))

    def _deliver(self, notification: Notification) -> bool:
        """Route a notification here; True when it completed the turn."""
        if isinstance(notification, ItemCompletedNotification):
            self.items.append(notification.item)
        elif isinstance(notification, TurnStartedNotification) and self.turn is None:
            self.turn = notification.turn
        done = isinstance(notification, TurnCompletedNotification) and (
            self.turn is None or notification.turn.id == self.turn.id
        )
        if done:
            assert isinstance(notification, TurnCompletedNotification)
            self.completed = notification
        self._send.send_nowait(notification)
        if done:
            self._send.close()
        return done

    def _abort(self, error: ServerClosed) -> None:
        if self.completed is None:
            self._send.send_nowait(error)
            self._send.close()

    def __aiter__(self) -> AsyncIterator[Notification]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Notification]:
        async for message in self._recv:
            if isinstance(message, ServerClosed):
                raise message
            yield message

    async def wait(self) -> TurnCompletedNotification:
        """Read (and drop) the rest of the turn; return its `turn/completed`."""
        async for _ in self:
            pass
        assert self.completed is not None
        return self.completed

    async def cancel(self) -> None:
        """`turn/cancel` this turn; its stream then ends with status `interrupted`."""
        await self._client.cancel_turn(self.thread_id, self.turn_id)

    async def steer(self, prompt: Prompt) -> TurnSteerResponse:
        """`turn/steer`: add input to this turn while it runs (see `Client.steer_turn`)."""
        return await self._client.steer_turn(self.thread_id, self.turn_id, prompt)


class Client(ThreadRequests, MailRequests):
    """A connection to a threadline server. Create it with `spawn()` or `connect()`."""

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        approval_handler: ApprovalHandler | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        trace: Trace | None = None,
    ) -> None:
        """`trace` sees every line both ways, without its newline: ("send" | "receive",
        line)."""
        self._transport = StreamTransport(send, receive, max_line)
        self._endpoint = Endpoint(
            self._transport if trace is None else TracedTransport(self._transport, trace),
            name="the server",
            on_message=self._on_notification,
            on_request=self._answer,
        )
        self.approval_handler = approval_handler
        #: The handlers of client-defined tools, by (namespace, name) (see `start_thread`).
        self.tools: dict[tuple[str | None, str], Tool] = {}
        self._turns: dict[str, TurnStream] = {}
        self._subscribers: list[trio.MemorySendChannel[Notification]] = []
        #: The `initialize` result, once `initialize()` ran.
        self.server_info: InitializeResponse | None = None

    # -- requests --------------------------------------------------------------------------------

    async def request(self, method: str, params: Base | dict[str, Any] | None = None) -> Any:
        """Send a request and return its result: the protocol Struct for methods threadline
        defines (e.g. `ThreadStartResponse`), the decoded JSON otherwise. Raises `RpcError`."""
        result_type = CLIENT_METHODS[method][1] if method in CLIENT_METHODS else Any
        try:
            return await self._endpoint.request(method, params, result_type=result_type)
        except PeerClosed as exc:
            raise ServerClosed(str(exc)) from None

    async def _call(self, method: str, params: Base, result_type: type[_R]) -> _R:
        """A request of a method threadline defines, its result checked to be `result_type`."""
        result = await self.request(method, params)
        assert isinstance(result, result_type), (method, type(result))
        return result

    async def notify(self, method: str, params: Base | dict[str, Any] | None = None) -> None:
        try:
            await self._endpoint.notify(method, params)
        except PeerClosed as exc:
            raise ServerClosed(str(exc)) from None

    async def send_line(self, line: bytes) -> None:
        """Write one line as it is (without its newline): e.g. to see how the server answers
        a malformed message."""
        try:
            await self._endpoint.send_line(line)
        except PeerClosed as exc:
            raise ServerClosed(str(exc)) from None

    async def initialize(
        self, name: str = "threadline.client", version: str = "0", title: str | None = None
    ) -> InitializeResponse:
        params = InitializeParams(client_info=ClientInfo(name=name, version=version, title=title))
        result = await self._call("initialize", params, InitializeResponse)
        await self.notify("initialized")
        self.server_info = result
        return result

    async def start_thread(
        self, *, tools: Sequence[Tool] = (), **fields: Any
    ) -> ThreadStartResponse:
        """`thread/start`; `fields` are `ThreadStartParams` fields (`model_provider`, `cwd`,
        `model`, `approval_policy`, `developer_instructions`, `config`, ...). `tools` are
        offered to the agent (`dynamicTools`); their handlers answer its calls."""
        from ..protocol import ThreadStartParams

        if tools:
            fields["dynamic_tools"] = [*(fields.get("dynamic_tools") or []), *specs(tools)]
            self.tools.update((t.key, t) for t in tools)
        return await self._call("thread/start", ThreadStartParams(**fields), ThreadStartResponse)

    async def resume_thread(self, thread_id: str, **fields: Any) -> ThreadResumeResponse:
        from ..protocol import ThreadResumeParams

        params = ThreadResumeParams(thread_id=thread_id, **fields)
        return await self._call("thread/resume", params, ThreadResumeResponse)

    async def adopt_session(
        self,
        model_provider: str,
        backend_session_id: str | None = None,
        *,
        latest: bool = False,
        path: str | None = None,
        inject_role: bool = False,
        **fields: Any,
    ) -> ThreadResumeResponse:
        """`thread/resume` of a session of the CLI's own (`list_threads(source="native")`
        lists them): by id, the newest in `cwd` (`latest`), or by the file it is kept in
        (`path`); a new thread is bound to it, or the one bound to it already resumed.
        `fields` are the other `ThreadResumeParams` fields (`cwd`, `config`, ...)."""
        from ..protocol import ThreadResumeParams

        params = ThreadResumeParams(
            model_provider=model_provider,
            backend_session_id=backend_session_id,
            latest=latest,
            path=path,
            inject_role=inject_role,
            **fields,
        )
        return await self._call("thread/resume", params, ThreadResumeResponse)

    async def read_thread(self, thread_id: str, include_turns: bool = True) -> ThreadReadResponse:
        from ..protocol import ThreadReadParams

        params = ThreadReadParams(thread_id=thread_id, include_turns=include_turns)
        return await self._call("thread/read", params, ThreadReadResponse)

    async def list_threads(self, **fields: Any) -> ThreadListResponse:
        from ..protocol import ThreadListParams

        return await self._call("thread/list", ThreadListParams(**fields), ThreadListResponse)

    async def archive_thread(self, thread_id: str) -> ThreadArchiveResponse:
        from ..protocol import ThreadArchiveParams

        params = ThreadArchiveParams(thread_id=thread_id)
        return await self._call("thread/archive", params, ThreadArchiveResponse)

    async def list_models(self, model_provider: str | None = None) -> ModelListResponse:
        from ..protocol import ModelListParams

        params = ModelListParams(model_provider=model_provider)
        return await self._call("model/list", params, ModelListResponse)

    async def start_turn(
        self,
        thread_id: str,
        prompt: Prompt,
        *,
        on_request: ApprovalHandler | None = None,
        **overrides: Unpack[TurnOverrides],
    ) -> TurnStream:
        """`turn/start`; returns the turn's stream of notifications. `prompt` is text or a
        list of text and input items (`image(...)`); `overrides` (`model`, `effort`, ...)
        stick for later turns, except `output_schema`. `on_request` answers this turn's
        approvals and questions (default: the client's `approval_handler`)."""
        params = TurnStartParams(thread_id=thread_id, input=to_inputs(prompt), **overrides)
        return await self._open_turn(thread_id, on_request, "turn/start", params)

    async def run_turn(
        self,
        thread_id: str,
        prompt: Prompt,
        *,
        on_request: ApprovalHandler | None = None,
        **overrides: Unpack[TurnOverrides],
    ) -> TurnStream:
        """Start a turn and wait for it to complete; the returned stream has `completed`,
        `items` and `text` filled in."""
        stream = await self.start_turn(thread_id, prompt, on_request=on_request, **overrides)
        await stream.wait()
        return stream

    async def compact_thread(
        self, thread_id: str, *, on_request: ApprovalHandler | None = None
    ) -> TurnStream:
        """`thread/compact/start`: the CLI compacts its context in a turn of its own (a
        `contextCompaction` item); returns that turn's stream. Its `turn` is known once its
        `turn/started` has been read."""
        params = ThreadCompactStartParams(thread_id=thread_id)
        return await self._open_turn(thread_id, on_request, "thread/compact/start", params)

    async def _open_turn(
        self,
        thread_id: str,
        on_request: ApprovalHandler | None,
        method: str,
        params: TurnStartParams | ThreadCompactStartParams,
    ) -> TurnStream:
        stream = TurnStream(self, thread_id, on_request)
        if thread_id in self._turns:
            # The server allows one turn per thread; let it give the error, keep the live one.
            await self.request(method, params)
            raise AssertionError(f"unreachable: {method} on a busy thread succeeded")
        # Registered before sending: the turn's first notifications can be read before the
        # response has reached this task.
        self._turns[thread_id] = stream
        try:
            response = await self.request(method, params)
        except BaseException:
            if self._turns.get(thread_id) is stream:
                del self._turns[thread_id]
            raise
        if isinstance(response, TurnStartResponse):
            stream.turn = response.turn
        return stream

    async def steer_turn(self, thread_id: str, turn_id: str, prompt: Prompt) -> TurnSteerResponse:
        """`turn/steer`: add input to the running turn `turn_id` (refused when another turn,
        or none, runs, and on backends whose capabilities say `steer: false`)."""
        params = TurnSteerParams(
            thread_id=thread_id, input=to_inputs(prompt), expected_turn_id=turn_id
        )
        return await self._call("turn/steer", params, TurnSteerResponse)

    async def fork_thread(
        self,
        thread_id: str,
        *,
        last_turn_id: str | None = None,
        exclude_turns: bool = False,
        ephemeral: bool = False,
        **fields: Any,
    ) -> ThreadForkResponse:
        """`thread/fork`: a new thread with this one's history (this one is left as it is).
        `last_turn_id`, when given, must be the thread's last turn; `fields` are
        `ThreadForkParams` settings for the fork (`model`, `approval_policy`, ...)."""
        params = ThreadForkParams(
            thread_id=thread_id,
            last_turn_id=last_turn_id,
            exclude_turns=exclude_turns,
            ephemeral=ephemeral,
            **fields,
        )
        return await self._call("thread/fork", params, ThreadForkResponse)

    async def cancel_turn(self, thread_id: str, turn_id: str) -> None:
        from ..protocol import TurnInterruptParams

        await self.request("turn/cancel", TurnInterruptParams(thread_id=thread_id, turn_id=turn_id))

    def subscribe(self) -> trio.MemoryReceiveChannel[Notification]:
        """Every notification from now on (all threads), unbounded: read it or close it."""
        send, recv = trio.open_memory_channel[Notification](math.inf)
        self._subscribers.append(send)
        return recv

    # -- plumbing --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the sending side: the server sees EOF, ends its turns and exits."""
        await self._transport.aclose()

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._endpoint.run(task_status=task_status)
        finally:
            self._shut(ServerClosed(str(self._endpoint.closed or "the connection closed")))

    async def _on_notification(self, incoming: Incoming) -> None:
        notification = decode_notification(incoming.method, incoming.params)
        if isinstance(notification, UnknownNotification):
            params = notification.params
            thread_id = params.get("threadId") if isinstance(params, dict) else None
        else:
            thread_id = getattr(notification, "thread_id", None)
        stream = self._turns.get(thread_id) if isinstance(thread_id, str) else None
        if stream is not None and stream._deliver(notification):
            del self._turns[stream.thread_id]
        for subscriber in list(self._subscribers):
            try:
                subscriber.send_nowait(notification)
            except trio.ClosedResourceError:
                self._subscribers.remove(subscriber)

    async def _answer(self, incoming: Incoming) -> Any:
        assert incoming.id is not None
        params = decode_request_params(incoming.method, incoming.params)
        if incoming.method == "item/tool/call" and handles(self.tools, params):
            return await answer_tool_call(self.tools, params)
        request = ServerRequest(incoming.id, incoming.method, params)
        thread_id = request.thread_id
        stream = self._turns.get(thread_id) if thread_id else None
        handler = (stream.handler if stream else None) or self.approval_handler
        approval = "Approval" in request.method
        if handler is None:
            if approval and request.method in SERVER_REQUESTS:
                return _DECLINE
            raise errors.RpcError(errors.METHOD_NOT_FOUND, "this client has no handler")
        try:
            return await handler(request)
        except Exception as exc:  # fail closed: a broken handler is a decline
            log.exception("approval handler failed for %s; declining", request.method)
            if approval:
                return _DECLINE
            raise errors.RpcError(-32000, f"client handler failed: {exc}") from None

    def _shut(self, error: ServerClosed) -> None:
        for stream in list(self._turns.values()):
            stream._abort(error)
        self._turns.clear()
        for subscriber in self._subscribers:
            subscriber.close()


def connect(
    send: trio.abc.SendStream,
    receive: trio.abc.ReceiveStream,
    *,
    approval_handler: ApprovalHandler | None = None,
    trace: Trace | None = None,
) -> AbstractAsyncContextManager[Client]:
    """Attach to a server that is already running, over its stdin (`send`) and stdout
    (`receive`) or any other pair of byte streams. Leaving the block closes `send`."""
    client = Client(send, receive, approval_handler=approval_handler, trace=trace)
    return connected(client)


@asynccontextmanager
async def connected(
    client: Client,
    *,
    initialize: bool = False,
    client_name: str = "threadline.client",
    wind_down: Callable[[], Awaitable[None]] | None = None,
    background: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Client]:
    """Run `client`'s reader (and `background`, e.g. the server it talks to) for the block,
    after the handshake if `initialize`. Leaving it closes the client's sending side, awaits
    `wind_down` (the server's exit) and cancels what still runs. An exception of the block
    is re-raised as it is, not wrapped in an exception group."""
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        if background is not None:
            nursery.start_soon(background)
        await nursery.start(client._run)
        try:
            if initialize:
                await client.initialize(client_name)
            yield client
        except BaseException as exc:
            body_error = exc
        finally:
            with trio.CancelScope(shield=True):
                # The reader keeps draining the server's output meanwhile, so the server
                # never blocks on a full pipe while it winds down.
                with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await client.aclose()
                if wind_down is not None:
                    await wind_down()
            nursery.cancel_scope.cancel()
    if body_error is not None:
        raise body_error
