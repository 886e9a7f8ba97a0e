"""The hooks an interactive claude reports a turn through (tui mode), and their transport.

Transport (claude 2.1.332): `"type": "http"` hooks, given with `--settings <json>`: claude
POSTs each hook's JSON input to threadline's endpoint on 127.0.0.1 (kit/hook_http.py) with
`Authorization: Bearer $THREADLINE_HOOK_TOKEN`, a header claude fills from its environment
(`allowedEnvVars`), so the settings on its command line hold no secret. No process starts per
hook. (claude skips HTTP hooks for SessionStart and Setup; none is needed.)

The hooks used, as measured: `UserPromptSubmit` (`prompt`, `prompt_id`, `session_id`,
`transcript_path`) when a prompt is submitted, threadline's paste or a person's typing;
`PreToolUse` (`tool_name`, `tool_input`, `tool_use_id`) before each tool call;
`PermissionRequest` (the same, without `tool_use_id`) only where claude would ask a person,
answered `{"behavior": "allow"|"deny", ...}` like stream mode's `can_use_tool`; `Stop`
(`last_assistant_message`) when a turn completes, often before the transcript holds that
message; `StopFailure` (`error`, `error_details`, `last_assistant_message`) when it fails on an
API error. An interrupt (Escape) fires none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import trio

__all__ = ["TOKEN_VARIABLE", "Entry", "Hook", "HookReply", "hook_settings"]

#: The variable claude reads the hook token from (it is in the pane's environment only).
TOKEN_VARIABLE = "THREADLINE_HOOK_TOKEN"
#: Seconds claude waits for a hook's answer: a permission waits for the client's decision
#: (threadline's approval timeout, if any, is shorter), the others are answered at once.
_PERMISSION_TIMEOUT = 7 * 24 * 3600
_TIMEOUT = 60
_EVENTS = ("UserPromptSubmit", "PreToolUse", "PermissionRequest", "Stop", "StopFailure")
_TOOL_EVENTS = ("PreToolUse", "PermissionRequest")


def hook_settings(url: str) -> str:
    """claude's `--settings` JSON: every hook threadline needs, POSTed to `url`/<event>."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event in _EVENTS:
        hook = {
            "type": "http",
            "url": f"{url}/{event}",
            "headers": {"Authorization": f"Bearer ${TOKEN_VARIABLE}"},
            "allowedEnvVars": [TOKEN_VARIABLE],
            "timeout": _PERMISSION_TIMEOUT if event == "PermissionRequest" else _TIMEOUT,
        }
        entry: dict[str, Any] = {"hooks": [hook]}
        if event in _TOOL_EVENTS:
            entry["matcher"] = "*"
        hooks[event] = [entry]
    return json.dumps({"hooks": hooks}, separators=(",", ":"))


@dataclass(eq=False)
class HookReply:
    """The answer to a `PermissionRequest`, once `done` is set. Fail closed: a deny unless
    a decision was given."""

    decision: dict[str, Any] = field(
        default_factory=lambda: {"behavior": "deny", "message": "Not approved."}
    )
    done: trio.Event = field(default_factory=trio.Event)

    def give(self, decision: dict[str, Any]) -> None:
        if not self.done.is_set():
            self.decision = decision
            self.done.set()

    def deny(self) -> None:
        self.done.set()

    def answer(self) -> dict[str, Any]:
        return {
            "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": self.decision}
        }


@dataclass(frozen=True)
class Hook:
    """A hook claude sent (`reply`: a permission request's answer, else None)."""

    name: str
    payload: dict[str, Any]
    reply: HookReply | None = None


@dataclass(frozen=True)
class Entry:
    """A line claude appended to the session's transcript."""

    data: dict[str, Any]
