"""Codex's own sessions: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`, each
starting with a `session_meta` record (`id`, `cwd`, `timestamp`, `source`, `cli_version`).
Archived ones (`archived_sessions/`) are not offered. Sub-agent sessions (a `source` that is
an object) belong to their parent and are left out, as Codex's own `thread/list` does."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from ..kit.native import (
    NativeMessage,
    NativeSession,
    iso_seconds,
    jsonl_messages,
    jsonl_records,
    mtime,
    newest_first,
    preview_of,
)

__all__ = ["codex_sessions", "read_rollout"]

#: Records read from a rollout's start to find its first prompt and model.
_HEAD = 200


def _codex_home(env: Mapping[str, str]) -> str:
    home = env.get("HOME") or os.path.expanduser("~")
    return env.get("CODEX_HOME") or os.path.join(home, ".codex")


def _prompt(record: dict[str, Any]) -> str | None:
    """The user's text, when `record` is a user message Codex recorded as such."""
    payload = record.get("payload") or {}
    if record.get("type") == "event_msg" and payload.get("type") == "user_message":
        text = payload.get("message")
        return text if isinstance(text, str) else None
    item = payload.get("item") or {}
    if payload.get("type") == "item_completed" and item.get("type") == "UserMessage":
        texts = [c.get("text") for c in item.get("content") or [] if isinstance(c, dict)]
        return "\n".join(t for t in texts if isinstance(t, str)) or None
    return None


_ROLES: dict[Any, Literal["user", "agent"]] = {"UserMessage": "user", "AgentMessage": "agent"}


def _message(record: dict[str, Any]) -> NativeMessage | None:
    """A user or agent message Codex completed (`item_completed` events)."""
    payload = record.get("payload") or {}
    item = payload.get("item") or {}
    role = _ROLES.get(item.get("type")) if payload.get("type") == "item_completed" else None
    if role is None:
        return None
    texts = [c.get("text") for c in item.get("content") or [] if isinstance(c, dict)]
    text = "\n".join(t for t in texts if isinstance(t, str))
    return NativeMessage(role, text, iso_seconds(record.get("timestamp"), 0))


def read_rollout(path: str) -> NativeSession | None:
    """The session a rollout file holds; None when it starts with no `session_meta`."""
    records = jsonl_records(path, _HEAD)
    first = next(records, None)
    if first is None or first.get("type") != "session_meta":
        return None
    meta = first.get("payload") or {}
    sid, cwd, source = meta.get("id"), meta.get("cwd"), meta.get("source")
    if not isinstance(sid, str) or not isinstance(cwd, str) or not isinstance(source, str):
        return None
    preview, model = "", None
    for record in records:
        if not preview and (prompt := _prompt(record)) is not None:
            preview = preview_of(prompt)
        if model is None and record.get("type") == "turn_context":
            found = (record.get("payload") or {}).get("model")
            model = found if isinstance(found, str) else None
        if preview and model:
            break
    updated = mtime(path, 0)
    version = meta.get("cli_version")
    return NativeSession(
        id=sid,
        cwd=cwd,
        created_at=iso_seconds(meta.get("timestamp"), updated),
        updated_at=updated,
        preview=preview,
        path=path,
        model=model,
        cli_version=version if isinstance(version, str) else "",
        source=source,
        messages=lambda: jsonl_messages(path, _message),
    )


def codex_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in Codex's store, newest first: those begun in `cwd`, or all."""
    sessions = []
    for folder, _dirs, files in os.walk(os.path.join(_codex_home(env), "sessions")):
        for name in files:
            if not (name.startswith("rollout-") and name.endswith(".jsonl")):
                continue
            session = read_rollout(os.path.join(folder, name))
            if session is not None and (cwd is None or session.cwd == cwd):
                sessions.append(session)
    return newest_first(sessions)
