"""The failed API attempts of an interactive claude, from its debug log (tui mode).

An interactive claude 2.1.332 retries a refused (401) or unreachable API 10 times over
minutes, and its session transcript records only that a request was made (`api-request`
lines), not why it failed. Its debug log (`--debug-file`) has a line per failed attempt:

    2026-11-27T22:23:13.944Z [ERROR] API error (attempt 1/3): undefined Connection error.
    2026-11-27T22:23:14.481Z [ERROR] API error (attempt 2/3): 401 {"type":"error",...}

(the HTTP status, `undefined` when nothing answered). Each such line becomes stream-json's
`system/api_retry` message, so the turn gives up exactly as stream mode does
(`ClaudeTurnMapper.give_up`). The log lives in a 0700 directory of the session's, deleted
with it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from ..kit.file_tail import LineTail

__all__ = ["ApiAttempt", "DebugTail", "parse_attempt"]

_ATTEMPT = re.compile(
    r"^(?P<at>\S+) \[ERROR\] API error \(attempt (?P<n>\d+)/(?P<of>\d+)\): (?P<status>\S+) ?"
    r"(?P<text>.*)$"
)


@dataclass(frozen=True)
class ApiAttempt:
    """A failed API attempt claude is retrying: when (epoch seconds), and as `api_retry`."""

    at: float
    message: dict[str, Any]


def parse_attempt(line: str) -> ApiAttempt | None:
    match = _ATTEMPT.match(line)
    if match is None:
        return None
    try:
        at = dt.datetime.fromisoformat(match["at"].replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
    status = match["status"]
    message = {
        "type": "system",
        "subtype": "api_retry",
        "attempt": int(match["n"]),
        "max_retries": int(match["of"]),
        "error_status": int(status) if status.isdigit() else None,
        "error": match["text"].strip()[:500] or None,
    }
    return ApiAttempt(at, message)


class DebugTail:
    """The failed API attempts logged to `path` since the last `read()`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._tail = LineTail(path)

    def read(self) -> list[ApiAttempt]:
        found = (parse_attempt(line.decode(errors="replace")) for line in self._tail.read())
        return [a for a in found if a is not None]
