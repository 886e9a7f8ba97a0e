"""Decoding what a threadline server writes into the protocol Structs.

The endpoint hands over each message's params as raw JSON; they are decoded here by method,
so each message is parsed once. A message this client version does not know (a newer method, a
new item kind) is not an error: it arrives as `UnknownNotification` / an untyped request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ..protocol import NOTIFICATIONS, SERVER_REQUESTS, Base

__all__ = [
    "Notification",
    "ServerRequest",
    "UnknownNotification",
    "decode_notification",
    "decode_request_params",
]


@dataclass(frozen=True)
class UnknownNotification:
    """A notification this client cannot type (a newer method or item kind)."""

    method: str
    params: Any


#: What a turn stream yields: a typed notification Struct (`AgentMessageDeltaNotification`,
#: `ItemCompletedNotification`, ...) or `UnknownNotification`.
Notification = Base | UnknownNotification


@dataclass(frozen=True)
class ServerRequest:
    """A request from the server (an approval or a question) that the client must answer.

    `params` is the typed Struct (e.g. `CommandExecutionRequestApprovalParams`) or, for a
    method this client does not know, the decoded JSON."""

    id: int | str
    method: str
    params: Any

    @property
    def thread_id(self) -> str | None:
        value = getattr(self.params, "thread_id", None)
        if value is None and isinstance(self.params, dict):
            value = self.params.get("threadId")
        return value if isinstance(value, str) else None


_Decoders = dict[str, msgspec.json.Decoder[Base]]
_NOTIFICATION_DECODERS: _Decoders = {m: msgspec.json.Decoder(t) for m, t in NOTIFICATIONS.items()}
_REQUEST_DECODERS: _Decoders = {
    m: msgspec.json.Decoder(p) for m, (p, _r) in SERVER_REQUESTS.items()
}


def _decode_typed(decoders: _Decoders, method: str, params: msgspec.Raw) -> Base | None:
    """The params as their method's Struct; None for a method this client does not know or a
    shape its Struct rejects (a newer server's: handed over untyped rather than dropped)."""
    decoder = decoders.get(method)
    if decoder is not None:
        try:
            return decoder.decode(params)
        except msgspec.ValidationError:
            pass
    return None


def _decode_untyped(params: msgspec.Raw) -> Any:
    return msgspec.json.decode(params) if params else None


def decode_notification(method: str, params: msgspec.Raw) -> Notification:
    typed = _decode_typed(_NOTIFICATION_DECODERS, method, params)
    return typed if typed is not None else UnknownNotification(method, _decode_untyped(params))


def decode_request_params(method: str, params: msgspec.Raw) -> Any:
    typed = _decode_typed(_REQUEST_DECODERS, method, params)
    return typed if typed is not None else _decode_untyped(params)
