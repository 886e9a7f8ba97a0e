"""Qwen Code's own sessions: `~/.qwen/projects/<cwd key>/chats/<session id>.jsonl`, records
naming the session's `cwd` and `version`; a person's prompts are `user` records with
`provenance: "real_user"`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..kit.native import (
    NativeMessage,
    NativeSession,
    iso_seconds,
    keyed_transcripts,
    newest_first,
    read_transcript,
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


def qwen_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in qwen's store, newest first: those begun in `cwd`, or all."""
    home = env.get("HOME") or os.path.expanduser("~")
    projects = os.path.join(home, ".qwen", "projects")
    sessions = []
    for path in keyed_transcripts(projects, cwd, os.path.join("chats", "*.jsonl")):
        read = read_transcript(path, _prompt, _message, _HEAD)
        if read is not None and (cwd is None or read[0].cwd == cwd):
            sessions.append(read[0])
    return newest_first(sessions)
