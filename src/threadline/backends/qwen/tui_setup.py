"""How an interactive qwen reports to threadline (tui mode): its hooks, its command line and
environment, and the directory that holds its side channel.

Hooks (qwen 0.24.4, measured): `"type": "http"` hooks POST each hook's JSON input to
threadline's endpoint on 127.0.0.1 (kit/hook_http.py) with `Authorization: Bearer
$THREADLINE_HOOK_TOKEN`, a header qwen fills from its environment (`allowedEnvVars`): no
process starts per hook and no file holds the token. qwen takes no settings on its command
line; the hooks come in a settings file of the "system defaults" scope
(`QWEN_CODE_SYSTEM_DEFAULTS_PATH`), whose hooks qwen adds to those of the user's and the
project's settings (`mergeStrategy: concat`). What the real system defaults file says is kept
in it. A failed or refused HTTP hook does not stop qwen (it carries on as if it had answered
`{}`).

The hooks used: `SessionStart` (qwen is up), `UserPromptSubmit` (`prompt`, `prompt_id`,
`session_id`) when a prompt is submitted, threadline's or a person's; `Stop`
(`last_assistant_message`, `prompt_id`) when a turn completes; `StopFailure` (`error`,
`error_details`) when an API error ends it; `Notification` `idle_prompt` when qwen waits for
input again: after `Stop`, and also after a turn that ended without one (a declined tool, an
Escape).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import base as b

__all__ = [
    "TOKEN_VARIABLE",
    "SideChannel",
    "hook_settings",
    "qwen_argv",
    "qwen_env",
    "side_channel",
    "write_settings",
]

log = logging.getLogger("threadline.backend.qwen")

#: The variable qwen reads the hook token from (it is in the pane's environment only).
TOKEN_VARIABLE = "THREADLINE_HOOK_TOKEN"
_DEFAULTS_VARIABLE = "QWEN_CODE_SYSTEM_DEFAULTS_PATH"
_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "StopFailure", "Notification")
_TIMEOUT = 60


@dataclass(frozen=True)
class SideChannel:
    """A 0700 directory of the session's: qwen's stream-json output (`--json-file`), its
    input commands (`--input-file`) and the hooks' settings file."""

    directory: str

    @property
    def events(self) -> str:
        return os.path.join(self.directory, "events.jsonl")

    @property
    def input(self) -> str:
        return os.path.join(self.directory, "input.jsonl")

    @property
    def settings(self) -> str:
        return os.path.join(self.directory, "system-defaults.json")

    def send(self, command: dict[str, Any]) -> None:
        """Append one input command (qwen polls the file and tracks what it read)."""
        line = json.dumps(command, ensure_ascii=False, separators=(",", ":")) + "\n"
        fd = os.open(self.input, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _real_defaults(env: Mapping[str, str]) -> str:
    """The system defaults file qwen reads when threadline does not name one."""
    if env.get(_DEFAULTS_VARIABLE):
        return env[_DEFAULTS_VARIABLE]
    system = env.get("QWEN_CODE_SYSTEM_SETTINGS_PATH") or "/etc/qwen-code/settings.json"
    return os.path.join(os.path.dirname(system), "system-defaults.json")


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning(
            "qwen's system defaults %s are not read (%s): tui mode leaves them out", path, exc
        )
        return {}
    return data if isinstance(data, dict) else {}


def hook_settings(url: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The system defaults qwen runs with: the real ones plus threadline's hooks, each
    POSTed to `url`/<event>."""
    data = _load(_real_defaults(env))
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        hooks = data["hooks"] = {}
    for event in _EVENTS:
        hook = {
            "type": "http",
            "url": f"{url}/{event}",
            "headers": {"Authorization": f"Bearer ${TOKEN_VARIABLE}"},
            "allowedEnvVars": [TOKEN_VARIABLE],
            "timeout": _TIMEOUT,
        }
        entries = hooks.get(event)
        hooks[event] = [*(entries if isinstance(entries, list) else []), {"hooks": [hook]}]
    return data


@contextmanager
def side_channel() -> Iterator[SideChannel]:
    """A fresh side channel directory (its files created empty), removed afterwards."""
    channel = SideChannel(tempfile.mkdtemp(prefix="threadline-qwen-"))
    try:
        for path in (channel.events, channel.input):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        yield channel
    finally:
        shutil.rmtree(channel.directory, ignore_errors=True)


def write_settings(channel: SideChannel, url: str, env: Mapping[str, str]) -> None:
    fd = os.open(channel.settings, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(hook_settings(url, env), f)


def qwen_argv(binary: str, settings: b.SessionSettings, channel: SideChannel) -> list[str]:
    """The interactive qwen's command line: approvals asked (`default`: qwen's TUI would
    otherwise start in `auto`, an LLM classifier), the side channel, the model, and the
    session (resumed, or a new one under an id threadline picks)."""
    argv = [binary, "--approval-mode", "default"]
    argv += ["--json-file", channel.events, "--input-file", channel.input]
    if settings.model and settings.model != "default":
        argv += ["--model", settings.model]
    if settings.backend_session_id:
        argv += ["--resume", settings.backend_session_id]
    else:
        argv += ["--session-id", str(uuid.uuid4())]
    return argv


def qwen_env(settings: b.SessionSettings, channel: SideChannel, token: str) -> dict[str, str]:
    return {**settings.env, _DEFAULTS_VARIABLE: channel.settings, TOKEN_VARIABLE: token}
