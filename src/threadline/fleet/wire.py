"""The Codex wire shapes the fleet hands to its callers: a turn's messages as plain dicts, as
a stdio client reads them — notifications (`method`, `params`) and server requests (`id`,
`method`, `params`) — the fail-closed answer to a request nobody answered, and the
`turn/completed` (status `failed`) that ends a turn whose actor or server went away."""

from __future__ import annotations

from typing import Any

import msgspec

from ..protocol import SERVER_REQUESTS

__all__ = ["Message", "decode", "failed_turn", "is_server_request", "refusal"]

#: One message of a turn's stream, as the server wrote it (without `jsonrpc`).
Message = dict[str, Any]

_decode_message = msgspec.json.Decoder(Message).decode


def decode(lines: list[bytes]) -> list[Message]:
    """Lines the server wrote (a batch from an actor) as messages."""
    messages = [_decode_message(line) for line in lines]
    for message in messages:
        message.pop("jsonrpc", None)
    return messages


def is_server_request(message: Message) -> bool:
    return "id" in message and "method" in message


def refusal(method: str) -> dict[str, Any]:
    """The fail-closed answer to a server request nobody answered: a decline for approvals,
    no answers for questions."""
    if method == "item/tool/requestUserInput":
        return {"answers": {}}
    if method in SERVER_REQUESTS and "Approval" in method:
        return {"decision": "decline"}
    # Anything else (a client tool call) fails: the client's handler raising answers an error.
    raise ValueError(f"no answer for {method}")


def failed_turn(thread_id: str, turn_id: str | None, message: str) -> Message:
    """The `turn/completed` (status `failed`, `error.message`) that ends a turn the server
    can no longer finish itself."""
    turn = {"id": turn_id or "", "items": [], "status": "failed", "error": {"message": message}}
    return {"method": "turn/completed", "params": {"threadId": thread_id, "turn": turn}}
