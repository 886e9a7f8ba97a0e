"""Qwen Code's own sessions: `~/.qwen/projects/<cwd key>/chats/<session id>.jsonl`, records
naming the session's `cwd` and `version`; a person's prompts are `user` records with
`provenance: "real_user"`."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from typing import Any

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

__all__ = ["qwen_sessions"]

#: Records read from a file's start to find its cwd, first prompt and model.
_HEAD = 200


def _text(record: dict[str, Any]) -> str:
    parts = (record.get("message") or {}).get("parts")
    found = parts if isinstance(parts, list) else []
    texts = [p.get("text") for p in found if isinstance(p, dict) and not p.get("thought")]
    return "\n".join(t for t in texts if isinstance(t, str))


def _prompt(record: dict[str, Any]) -> str | None:
    if record.get("type") != "user" or record.get("provenance") != "real_user":
        return None
    text = _text(record)
    return text if text.strip() else None


def _message(record: dict[str, Any]) -> NativeMessage | None:
    at = iso_seconds(record.get("timestamp"), 0)
    if (prompt := _prompt(record)) is not None:
        return NativeMessage("user", prompt, at)
    if record.get("type") == "assistant":
        return NativeMessage("agent", _text(record), at)
    return None


def _read(path: str) -> NativeSession | None:
    sid = os.path.basename(path)[: -len(".jsonl")]
    found: dict[str, Any] = {}
    preview = ""
    for record in jsonl_records(path, _HEAD):
        if record.get("sessionId") != sid:
            continue
        for key in ("cwd", "timestamp", "version", "model"):
            if key not in found and isinstance(record.get(key), str):
                found[key] = record[key]
        if not preview and (prompt := _prompt(record)) is not None:
            preview = preview_of(prompt)
    if "cwd" not in found:
        return None
    updated = mtime(path, 0)
    return NativeSession(
        id=sid,
        cwd=found["cwd"],
        created_at=iso_seconds(found.get("timestamp"), updated),
        updated_at=updated,
        preview=preview,
        path=path,
        model=found.get("model"),
        cli_version=found.get("version", ""),
        messages=lambda: jsonl_messages(path, _message),
    )


def qwen_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in qwen's store, newest first: those begun in `cwd`, or all."""
    home = env.get("HOME") or os.path.expanduser("~")
    projects = os.path.join(glob.escape(home), ".qwen", "projects")
    key = glob.escape(re.sub(r"[^A-Za-z0-9]", "-", cwd)) if cwd is not None else "*"
    if not os.path.isdir(os.path.join(projects, key)):
        key = "*"  # (a CLI whose key rule differs: the records decide)
    sessions = []
    for path in glob.glob(os.path.join(projects, key, "chats", "*.jsonl")):
        session = _read(path)
        if session is not None and (cwd is None or session.cwd == cwd):
            sessions.append(session)
    return newest_first(sessions)
