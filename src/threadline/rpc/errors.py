"""JSON-RPC error codes and the exception handlers raise to answer with an error."""

from __future__ import annotations

from typing import Any

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SERVER_OVERLOADED",
    "RpcError",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_OVERLOADED = -32001


class RpcError(Exception):
    """Raised by a handler: the request is answered with this JSON-RPC error.

    Codex answers state errors (not initialized, unknown thread, stale turn id) with -32600 and
    a fixed message text; clients match on those texts, so handlers reuse them."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
