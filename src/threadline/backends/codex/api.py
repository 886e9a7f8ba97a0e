"""Codex's model-API failures, made to say what to do (measured on codex 0.169.0).

- A 401 reads ``unexpected status 401 Unauthorized: <body>, url: <url>, ...`` (info
  `httpConnectionFailed {httpStatusCode: 401}`), after 5 quick stream retries.
- An unset `env_key` of a custom provider: ``Missing environment variable: `X`.`` before any
  request. With the built-in OpenAI provider and no `codex login`, Codex sends its requests
  without credentials; the app-server's `account/read` says so up front (`requiresOpenaiAuth`
  and no account). `OPENAI_API_KEY` in the environment is not used by 0.169.0 for that
  provider (only `codex login --with-api-key` is).
- An unreachable API: ``Reconnecting... N/5`` notices about 3 s apart with ``Connection failed:
  error sending request`` (or ``failed to lookup address information``) as their details, for
  ~25 s (~31 s when it first tries WebSockets), then ``Connection failed: ...`` (info
  `httpConnectionFailed {httpStatusCode: null}`). `unbounded_connection_retries` is off.
"""

from __future__ import annotations

import os
import re
import tomllib
from typing import Any

from ...protocol import TurnError
from ..kit.api_errors import no_credentials, refused_or_unreachable
from .spec import SPEC

__all__ = ["CHECK", "STATUS_TEXT", "api_failure", "provider_url", "retry_status"]

#: What to check when the API cannot be reached.
CHECK = "the model provider's base_url in Codex's config.toml"
_URL = re.compile(r"\burl: (\S+?),? ")
STATUS_TEXT = re.compile(r"(?:unexpected status|last status:) (\d{3})\b")


def _config(env: dict[str, str]) -> dict[str, Any]:
    home = env.get("CODEX_HOME") or os.path.join(env.get("HOME") or "~", ".codex")
    try:
        with open(os.path.join(os.path.expanduser(home), "config.toml"), "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def provider_url(env: dict[str, str], overrides: Any = None) -> str:
    """The Responses API URL of the model provider Codex uses (config.toml in CODEX_HOME, with
    the thread's `codexConfig` overrides; best effort)."""
    config = _config(env)
    if isinstance(overrides, dict):
        config.update({k: v for k, v in overrides.items() if "." not in k})
    provider = config.get("model_provider") or "openai"
    if provider == "openai":
        base = config.get("openai_base_url") or "https://api.openai.com/v1"
    else:
        entry = (config.get("model_providers") or {}).get(provider)
        base = entry.get("base_url") if isinstance(entry, dict) else None
        if not isinstance(base, str) or not base:
            return f"the base_url of its model provider `{provider}`"
    return str(base).rstrip("/") + "/responses"


def retry_status(error: TurnError) -> int | None:
    """The HTTP status of a retried failure (None: nothing answered)."""
    info = error.codex_error_info
    if isinstance(info, dict):
        for value in info.values():
            if isinstance(value, dict) and isinstance(value.get("httpStatusCode"), int):
                return int(value["httpStatusCode"])
    found = STATUS_TEXT.search(f"{error.message} {error.additional_details or ''}")
    return int(found.group(1)) if found else None


def api_failure(
    text: str, status: int | None, fallback_url: str, *, after: float | None = None
) -> TurnError | None:
    """The error that says what to do for a refused, missing or unreachable API (`text`:
    Codex's own words; `after`: the seconds of retries threadline stopped), else None."""
    found = _URL.search(text + " ")
    url = found.group(1) if found else fallback_url
    if status != 401 and "Missing environment variable" in text:
        return no_credentials(SPEC, text)
    return refused_or_unreachable(SPEC, status, text, url, CHECK, after=after)
