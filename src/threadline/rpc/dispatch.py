"""Request dispatch through jsonrpcserver — the only module that imports it.

jsonrpcserver's async dispatcher is asyncio-only (under trio it answers every request with
-32000), so we use its synchronous `dispatch_to_response` for what it does well — method
lookup, argument binding, and the standard error responses — and keep the async work out of
it: each registered function only decodes and validates the params into the method's msgspec
Struct and parks them in a per-call slot. The caller then awaits the real async handler with
those params (see `Dispatcher.prepare`)."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

with warnings.catch_warnings():
    # jsonrpcserver 5.0.9 uses importlib.resources.read_text (deprecated on 3.11/3.12).
    warnings.simplefilter("ignore", DeprecationWarning)
    from jsonrpcserver import Error, Success, dispatch_to_response
    from jsonrpcserver.result import ErrorResult, SuccessResult  # noqa: F401

from .errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RpcError

__all__ = ["AsyncHandler", "Dispatcher", "PreparedCall"]

AsyncHandler = Callable[[Any], Awaitable[Any]]


class PreparedCall(msgspec.Struct, frozen=True):
    """A validated request, ready to run: `await handler(params)`."""

    method: str
    handler: AsyncHandler
    params: Any


class _Slot:
    """Per-dispatch context: carries the validated call out of the sync dispatcher."""

    __slots__ = ("call",)

    def __init__(self) -> None:
        self.call: PreparedCall | None = None


def _accept_any(request: Any) -> Any:
    # Envelope checks happen before dispatch (Codex clients omit "jsonrpc"); nothing to do here.
    return request


class Dispatcher:
    def __init__(self, methods: Mapping[str, tuple[type[Any], AsyncHandler]]) -> None:
        self._methods = {
            name: self._make_entry(name, ptype, handler)
            for name, (ptype, handler) in methods.items()
        }

    @staticmethod
    def _make_entry(name: str, params_type: type[Any], handler: AsyncHandler) -> Callable[..., Any]:
        # The slot travels as the first positional argument and is not named in the
        # signature: a named parameter would collide with a client field of the same name
        # (`{"slot": 1}` was answered with -32602 "multiple values for argument 'slot'"
        # instead of the unknown field being ignored).
        def entry(*args: Any, **kwargs: Any) -> Any:
            slot: _Slot = args[0]
            args = args[1:]
            if args:
                return Error(INVALID_PARAMS, f"Invalid params for {name}: params must be an object")
            try:
                params = msgspec.convert(kwargs, params_type, str_keys=True)
            except msgspec.ValidationError as exc:
                return Error(INVALID_PARAMS, f"Invalid params for {name}: {exc}")
            slot.call = PreparedCall(name, handler, params)
            return Success(None)

        return entry

    def has_method(self, name: str) -> bool:
        return name in self._methods

    def prepare(self, message: dict[str, Any]) -> PreparedCall:
        """Validate one request or notification object (already decoded, `method` a str).

        Returns the call to await, or raises RpcError with the standard code and a message
        naming the problem (-32601 unknown method, -32602 bad params)."""
        slot = _Slot()
        request = dict(message)
        request["jsonrpc"] = "2.0"
        # jsonrpcserver drops the response for notifications; give it an id so errors surface.
        request["id"] = 0
        response = dispatch_to_response(
            "",
            self._methods,
            context=slot,
            deserializer=lambda _unused: request,
            validator=_accept_any,
        )
        if slot.call is not None:
            return slot.call
        error = getattr(response, "_error", None)
        code = getattr(error, "code", INVALID_REQUEST)
        method = message.get("method")
        if code == METHOD_NOT_FOUND:
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
        if code == INVALID_PARAMS:
            data = getattr(error, "data", None)
            msg = getattr(error, "message", "Invalid params")
            if data and msg == "Invalid params":
                msg = f"Invalid params for {method}: {data}"
            raise RpcError(INVALID_PARAMS, msg)
        raise RpcError(
            code, getattr(error, "message", "Invalid request"), getattr(error, "data", None)
        )
