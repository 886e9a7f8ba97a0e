"""Qwen Code's own record of a session's model-API calls, followed while a turn runs.

`qwen --acp` (0.24.4) retries a model API that answers 5xx or 429, or whose host does not
resolve, 7 times over ~80 s, and says nothing over ACP or on stderr meanwhile; no setting
changes the count. It does write each attempt at once to the session's chat record
(`<runtime dir>/projects/<project>/chats/<session id>.jsonl`): a failed one as a `ui_telemetry`
entry `qwen-code.api_error` (`status_code` when the API answered, `error_message`), a
successful one as `qwen-code.api_response`. `watch_api_records` follows that file during a
turn and returns the error to fail the turn with once qwen's retries cannot help:

- connection failures for the `ConnectionWatch` budget (as on every backend);
- `SERVER_ERROR_ATTEMPTS` attempts answered 5xx in a row.

A 429 is left to qwen (it waits as the API's Retry-After says); a 401 qwen fails at once. With
no record to follow (chat recording turned off, a runtime dir set in qwen's settings) the turn
takes qwen's own time.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from ...protocol import TurnError
from ..kit.acp import error_info_for_code
from ..kit.api_errors import ConnectionWatch, unreachable
from .invocation import CHECK, api_url, is_connection_error
from .spec import SPEC

__all__ = [
    "SERVER_ERROR_ATTEMPTS",
    "ApiAttempt",
    "AttemptWatch",
    "RecordTail",
    "attempt_of",
    "watch_api_records",
]

#: Attempts answered 5xx in a row after which the turn fails (~7 s with qwen's defaults: each
#: attempt is up to 3 requests, the OpenAI client's own retries).
SERVER_ERROR_ATTEMPTS = 2
#: Seconds between two looks at the record.
POLL = 0.5


@dataclass(frozen=True)
class ApiAttempt:
    """One call of the model API, as qwen recorded it."""

    ok: bool
    status: int | None = None
    message: str = ""


def runtime_dir(env: dict[str, str]) -> str:
    """Where qwen keeps its sessions: QWEN_RUNTIME_DIR, else QWEN_HOME, else ~/.qwen."""
    for var in ("QWEN_RUNTIME_DIR", "QWEN_HOME"):
        if env.get(var):
            return os.path.expanduser(env[var])
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".qwen")


def record_path(env: dict[str, str], session_id: str) -> str | None:
    """The chat record of `session_id`, if qwen has written one."""
    root = glob.escape(runtime_dir(env))
    found = glob.glob(os.path.join(root, "projects", "*", "chats", f"{session_id}.jsonl"))
    return found[0] if found else None


def attempt_of(line: str) -> ApiAttempt | None:
    """The API call a record line reports, else None."""
    try:
        entry: Any = json.loads(line)
    except ValueError:
        return None
    event = (
        ((entry or {}).get("systemPayload") or {}).get("uiEvent")
        if isinstance(entry, dict)
        else None
    )
    if not isinstance(event, dict):
        return None
    name = event.get("event.name")
    if name == "qwen-code.api_response":
        return ApiAttempt(ok=True)
    if name != "qwen-code.api_error":
        return None
    status = event.get("status_code")
    return ApiAttempt(
        ok=False,
        status=status if isinstance(status, int) else None,
        message=str(event.get("error_message") or ""),
    )


class AttemptWatch:
    """One turn's API calls: `see` each; it returns the turn's error once retrying cannot help."""

    def __init__(self, env: dict[str, str], clock: Callable[[], float] = time.monotonic) -> None:
        self.url = api_url(env)
        self.connection = ConnectionWatch(clock=clock)
        self.server_errors = 0

    def see(self, attempt: ApiAttempt) -> TurnError | None:
        if attempt.ok:
            self.connection.progress()
            self.server_errors = 0
            return None
        if attempt.status is not None and attempt.status >= 500:
            self.server_errors += 1
            if self.server_errors < SERVER_ERROR_ATTEMPTS:
                return None
            return TurnError(
                message=f"{SPEC.display_name}'s model API at {self.url} keeps failing with HTTP "
                f"{attempt.status}: threadline stopped qwen's retries after "
                f"{self.server_errors} failed attempts",
                codex_error_info=error_info_for_code(attempt.status, attempt.message),
                additional_details=attempt.message or None,
            )
        connection = attempt.status is None and is_connection_error(attempt.message)
        if connection and self.connection.failed():
            after = self.connection.elapsed()
            return unreachable(SPEC, self.url, CHECK, attempt.message, after=after)
        return None


class RecordTail:
    """The lines a growing file gains from the moment it is first seen (all of it when it did
    not exist yet)."""

    def __init__(self, env: dict[str, str], session_id: str) -> None:
        self.env, self.session_id = env, session_id
        self.path = record_path(env, session_id)
        self.offset = os.path.getsize(self.path) if self.path else 0
        self.partial = b""

    def read(self) -> list[str]:
        if self.path is None:
            self.path = record_path(self.env, self.session_id)
            if self.path is None:
                return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        return [line.decode(errors="replace") for line in lines]


async def watch_api_records(session_id: str, env: dict[str, str]) -> TurnError:
    """Follow the session's record from now on; return once its API calls show the turn
    cannot succeed (never, otherwise: cancel it with the turn)."""
    tail = await trio.to_thread.run_sync(RecordTail, env, session_id)
    watch = AttemptWatch(env)
    while True:
        await trio.sleep(POLL)
        for line in await trio.to_thread.run_sync(tail.read):
            attempt = attempt_of(line)
            error = watch.see(attempt) if attempt is not None else None
            if error is not None:
                return error
