"""OpenCode's model-API failures, made to say what to do (measured on opencode 1.18.33).

OpenCode retries an API it cannot connect to 5 times over ~65 s (2 s backoff, doubling), with
nothing on stdout or over ACP meanwhile and no setting to change it. With `LOG_FLAGS` it logs
each failed attempt on stderr (`message="stream error" ... session.id=... error.error="...
Cannot connect to API ..."`): `stream_failure` reads those lines, and the backend gives up on
the turn once `ConnectionWatch` says so, or at its budget when the next attempt is late. With no
credentials for its provider OpenCode knows no model at all: ACP's `session/new` lists none,
`run` fails "Unexpected server error" after logging `ProviderModelNotFoundError`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from ...protocol import TurnError
from ..kit.api_errors import (
    ConnectionWatch,
    is_connection_failure,
    no_credentials,
    refused_or_unreachable,
    unreachable,
)
from .spec import SPEC

__all__ = [
    "CHECK",
    "LOG_FLAGS",
    "StreamFailure",
    "api_error",
    "give_up_error",
    "model_not_found",
    "no_model",
    "provider_url",
    "stream_failure",
    "unreachable_error",
]

#: Its errors and warnings on stderr (stderr also ends up in failure messages; the warnings
#: say which MCP server did not start).
LOG_FLAGS = ("--print-logs", "--log-level", "WARN")
#: What to check when the API cannot be reached.
CHECK = "the provider's baseURL in OpenCode's config"
#: Base URLs of providers OpenCode ships ("opencode" is the default of a fresh install).
_KNOWN = {
    "opencode": "https://opencode.ai/zen/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "openai": "https://api.openai.com/v1",
}
_FIELD = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S*)')
_NOT_FOUND = re.compile(r"ProviderModelNotFoundError: (Model not found: [^\s?]+)")


@dataclass(frozen=True)
class StreamFailure:
    """One failed attempt to connect to the model API, from a log line."""

    session_id: str
    provider: str
    text: str


def _fields(line: str) -> dict[str, str]:
    out = {}
    for key, value in _FIELD.findall(line):
        if value.startswith('"'):
            try:
                value = json.loads(value)
            except ValueError:
                value = value.strip('"')
        out[key] = value
    return out


def stream_failure(line: str) -> StreamFailure | None:
    """The connection failure a stderr log line reports, else None."""
    if 'message="stream error"' not in line:
        return None
    fields = _fields(line)
    text = fields.get("error.error", "")
    if not is_connection_failure(text):
        return None
    return StreamFailure(fields.get("session.id", ""), fields.get("providerID", ""), text)


def model_not_found(line: str) -> str | None:
    """ "Model not found: provider/model" when a log line reports one, else None."""
    found = _NOT_FOUND.search(line)
    return found.group(1).rstrip(".") if found else None


def _configs(env: dict[str, str], cwd: str) -> list[dict[str, Any]]:
    """OpenCode's config layers, most specific first (best effort: unreadable ones skipped)."""
    texts = [env.get("OPENCODE_CONFIG_CONTENT") or ""]
    config_home = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", "~"), ".config")
    paths = [env.get("OPENCODE_CONFIG") or "", os.path.join(cwd, "opencode.json")]
    paths.append(os.path.join(os.path.expanduser(config_home), "opencode", "opencode.json"))
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                texts.append(fh.read())
        except OSError:
            continue
    configs = []
    for text in texts:
        try:
            config = json.loads(text) if text else None
        except ValueError:
            continue
        if isinstance(config, dict):
            configs.append(config)
    return configs


def provider_url(env: dict[str, str], cwd: str, provider: str) -> str:
    """The base URL OpenCode calls for `provider` (its config, else the shipped default)."""
    for config in _configs(env, cwd):
        entry = (config.get("provider") or {}).get(provider)
        options = entry.get("options") if isinstance(entry, dict) else None
        base = options.get("baseURL") if isinstance(options, dict) else None
        if isinstance(base, str) and base:
            return base
    return _KNOWN.get(provider) or f"the base URL of its provider `{provider}`"


def give_up_error(
    failure: StreamFailure, watch: ConnectionWatch, env: dict[str, str], cwd: str
) -> TurnError | None:
    """The turn's error once the failed attempts have gone on too long, else None."""
    return unreachable_error(failure, watch, env, cwd) if watch.failed() else None


def unreachable_error(
    failure: StreamFailure, watch: ConnectionWatch, env: dict[str, str], cwd: str
) -> TurnError:
    """The turn's error for an API still unreachable at `failure` (the last attempt)."""
    url = provider_url(env, cwd, failure.provider)
    return unreachable(SPEC, url, CHECK, failure.text, after=watch.elapsed())


def api_error(message: str, status: int | None, url: str | None) -> TurnError | None:
    """The error that says what to do for a refused or unreachable API, else None."""
    return refused_or_unreachable(SPEC, status, message, url, CHECK)


def no_model(detail: str) -> TurnError:
    """OpenCode has no usable model: no provider has credentials (or the model is unknown)."""
    return no_credentials(SPEC, detail)
