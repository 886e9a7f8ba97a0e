"""How qwen is run: its command line, the model API it calls, what its API errors mean."""

from __future__ import annotations

import re

from ...protocol import TurnError
from .. import base as b
from ..kit.acp import error_info_for_code
from ..kit.api_errors import is_connection_failure, refused_or_unreachable
from .spec import SPEC

__all__ = [
    "CHECK",
    "acp_argv",
    "api_failure",
    "api_url",
    "is_connection_error",
    "prompt_failure",
]

#: What to check when the API cannot be reached.
CHECK = "OPENAI_BASE_URL"
#: qwen's API when OPENAI_BASE_URL is unset (its `openai` auth type).
DEFAULT_API = "https://api.openai.com/v1"
#: qwen's words for a failed API call: "<HTTP status> <the API's message>".
_STATUS = re.compile(r"(\d{3}) (.*)", re.DOTALL)
#: qwen's words for an answer whose stream was cut off (node's fetch: "terminated").
_CUT = "terminated"
#: How qwen refuses a prompt that does not fit the model's context window.
_TOO_LARGE = "Context is too large"


def acp_argv(binary: str, settings: b.SessionSettings) -> list[str]:
    argv = [binary, "--acp"]
    if settings.model and settings.model != "default":
        argv += ["--model", settings.model]
    return argv


def api_url(env: dict[str, str]) -> str:
    """The chat-completions API qwen calls (OPENAI_BASE_URL, else OpenAI's)."""
    return env.get("OPENAI_BASE_URL") or DEFAULT_API


def is_connection_error(text: str) -> bool:
    """Whether qwen's error text says no connection was made ("Connection error. (cause:
    getaddrinfo ENOTFOUND …)", or just "Connection error." for a refused connection)."""
    return text.startswith("Connection error") or is_connection_failure(text)


def status_of(text: str) -> int | None:
    """The HTTP status qwen's error text starts with, if any."""
    match = _STATUS.fullmatch(text.strip())
    return int(match[1]) if match else None


def api_failure(text: str, env: dict[str, str]) -> TurnError | None:
    """The error a user sees for qwen's words about a failed API call, None if they are not
    about one."""
    status = status_of(text)
    failure = refused_or_unreachable(
        SPEC, status, text, api_url(env), CHECK, no_connection=is_connection_error
    )
    if failure is not None:
        return failure
    if text.strip() == _CUT:
        return TurnError(
            message=f"{SPEC.display_name} lost the model's answer: the API's stream was cut off",
            codex_error_info={"responseStreamDisconnected": {"httpStatusCode": None}},
            additional_details=text,
        )
    if status is None:
        return None
    return TurnError(
        message=f"{SPEC.display_name}'s model API answered HTTP {status}: "
        f"{text.strip()[4:] or 'no message'}",
        codex_error_info=error_info_for_code(status, text),
    )


def prompt_failure(details: str, env: dict[str, str]) -> TurnError:
    """The error a user sees for qwen's answer to a prompt that failed: -32603 "Internal error"
    with qwen's own words in `data.details`."""
    failure = api_failure(details, env)
    if failure is not None:
        return failure
    info = "contextWindowExceeded" if details.startswith(_TOO_LARGE) else "other"
    return TurnError(message=f"{SPEC.display_name}: {details}", codex_error_info=info)
