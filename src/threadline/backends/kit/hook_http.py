"""A CLI's HTTP hooks reaching threadline: a minimal HTTP/1.1 endpoint on 127.0.0.1.

Each request is one `POST /<name>` with a JSON body and `Authorization: Bearer <token>`, the
token a per-session secret (the CLI reads it from its environment; it is in no file and no
argv). Anything else (another method, a wrong or missing token, a body that is not a JSON
object, a request over `_MAX_REQUEST`) is refused without calling the handler. The handler's
answer goes back as the JSON body; the connection closes after each answer.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

__all__ = ["HookHandler", "new_token", "serve_hooks"]

log = logging.getLogger("threadline.hooks")

#: (hook name: the last segment of the path, JSON body) -> the JSON answer
HookHandler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

_MAX_REQUEST = 64 * 1024 * 1024
_HEAD_TIMEOUT = 30.0


def new_token() -> str:
    return secrets.token_urlsafe(32)


class _BadRequest(Exception):
    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


async def _read_request(stream: trio.SocketStream) -> tuple[str, str, dict[str, str], bytes]:
    """(method, path, lower-cased headers, body) of one request."""
    data = bytearray()
    with trio.fail_after(_HEAD_TIMEOUT):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk or len(data) > 65536:
                raise _BadRequest("400 Bad Request")
            data += chunk
    head, _, body = bytes(data).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise _BadRequest("400 Bad Request")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise _BadRequest("400 Bad Request") from None
    if length > _MAX_REQUEST:
        raise _BadRequest("413 Content Too Large")
    while len(body) < length:
        chunk = await stream.receive_some(min(65536, length - len(body)))
        if not chunk:
            raise _BadRequest("400 Bad Request")
        body += chunk
    return parts[0], parts[1], headers, body[:length]


async def _respond(stream: trio.SocketStream, status: str, answer: dict[str, Any]) -> None:
    body = json.dumps(answer).encode()
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    await stream.send_all(head.encode() + body)


async def _connection(handler: HookHandler, token: str, stream: trio.SocketStream) -> None:
    async with stream:
        try:
            method, path, headers, body = await _read_request(stream)
            expected = f"Bearer {token}".encode()
            given = headers.get("authorization", "").encode("latin-1", errors="replace")
            if not hmac.compare_digest(given, expected):
                raise _BadRequest("401 Unauthorized")
            if method != "POST":
                raise _BadRequest("405 Method Not Allowed")
            try:
                payload = json.loads(body)
            except ValueError:
                raise _BadRequest("400 Bad Request") from None
            if not isinstance(payload, dict):
                raise _BadRequest("400 Bad Request")
            answer = await handler(path.rstrip("/").rsplit("/", 1)[-1], payload)
            await _respond(stream, "200 OK", answer)
        except _BadRequest as exc:
            log.warning("refused a hook request: %s", exc.status)
            await _respond(stream, exc.status, {})
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            pass
        except Exception:  # a handler's bug fails this hook (the CLI's own rule), not the server
            log.exception("a hook handler failed")
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await _respond(stream, "500 Internal Server Error", {})


async def serve_hooks(
    handler: HookHandler,
    token: str,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve hook requests on 127.0.0.1 (a free port, given to `task_status`) until
    cancelled."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    task_status.started(port)
    await trio.serve_listeners(partial(_connection, handler, token), listeners)
