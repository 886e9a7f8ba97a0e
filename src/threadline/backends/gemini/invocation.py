"""How gemini is run: environment, model flags, the model API it calls, what its failures mean."""

from __future__ import annotations

import re

from ...protocol import TurnError
from .. import base as b
from ..kit.api_errors import is_connection_failure, refused, unreachable
from .spec import SPEC

__all__ = ["PROBE_BUDGET", "api_url"]

#: What to check when the API cannot be reached.
_CHECK = "GOOGLE_GEMINI_BASE_URL"


#: Seconds of failed connections (probed, or the CLI's own attempts) before a turn is failed.
PROBE_BUDGET = 5.0


#: headless: "Attempt 1 failed. Retrying with backoff... Error: <why>" on stderr.
_ATTEMPT_FAILED = re.compile(r"^Attempt \d+ failed")


_EXIT_MEANING = {
    41: ("authentication is not configured for gemini", "unauthorized"),
    42: ("gemini rejected its input (bad --resume or --session-id)", "badRequest"),
    55: (
        "gemini refuses to run in an untrusted folder (set GEMINI_CLI_TRUST_WORKSPACE=true)",
        "other",
    ),
    145: ("the Gemini API answered 401 Unauthorized", "unauthorized"),
    173: ("the Gemini API answered 429 Too Many Requests", "rateLimitExceeded"),
    244: ("the Gemini API answered 500 Internal Server Error", "internalServerError"),
    144: ("the Gemini API answered 400 Bad Request", "badRequest"),
}


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env["PWD"] = settings.cwd
    # One process instead of a relaunched child: faster start, signals reach the worker.
    env.setdefault("GEMINI_CLI_NO_RELAUNCH", "1")
    return env


def api_url(env: dict[str, str]) -> str:
    """The Gemini API the CLI calls (GOOGLE_GEMINI_BASE_URL, else Google's)."""
    return env.get("GOOGLE_GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com"


def _api_failure(message: str, status: int | None, env: dict[str, str]) -> TurnError | None:
    """The error that says what to do for a refused or unreachable API, else None."""
    if status == 401:
        return refused(SPEC, api_url(env), message)
    if is_connection_failure(message):
        return unreachable(SPEC, api_url(env), _CHECK, message)
    return None


def _model_flags(settings: b.SessionSettings) -> list[str]:
    # An explicit model also skips Gemini's router call (one request per model round).
    if settings.model and settings.model != "default":
        return ["-m", settings.model]
    return []
