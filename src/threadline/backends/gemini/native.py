"""Gemini CLI's own sessions: `~/.gemini/tmp/<project>/chats/session-*.jsonl`, the project's
directory named in `~/.gemini/tmp/<project>/.project_root`. A file starts with a header
(`sessionId`, `startTime`, `lastUpdated`, `kind`); a session can span several files (see
`sessions.py`): their listing is merged."""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Mapping
from typing import Any

from ..kit.native import (
    NativeMessage,
    NativeSession,
    iso_seconds,
    jsonl_records,
    mtime,
    newest_first,
    preview_of,
)

__all__ = ["gemini_sessions"]

_CONTEXT = "<session_context>"
#: Records read from a file's start to find its first prompt and model.
_HEAD = 200


def _project_root(project: str) -> str | None:
    try:
        with open(os.path.join(project, ".project_root"), encoding="utf-8") as source:
            root = source.read().strip()
    except OSError:
        return None
    return root or None


def _messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    listed = (record.get("$set") or {}).get("messages")
    found = listed if isinstance(listed, list) else [record]
    return [m for m in found if isinstance(m, dict)]


def _prompt(message: dict[str, Any]) -> str | None:
    if message.get("type") != "user":
        return None
    parts = message.get("content")
    texts = [p.get("text") for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
    text = "\n".join(t for t in texts if isinstance(t, str))
    return None if not text.strip() or text.lstrip().startswith(_CONTEXT) else text


def _conversation(paths: list[str]) -> list[NativeMessage]:
    """The messages of a session's files, each once (by id; a later record of a message
    replaces an earlier one), in time order."""
    found: dict[str, NativeMessage] = {}
    for path in paths:
        for record in jsonl_records(path):
            for message in _messages(record):
                kind, key = message.get("type"), message.get("id")
                at = iso_seconds(message.get("timestamp"), 0)
                if (prompt := _prompt(message)) is not None:
                    said = NativeMessage("user", prompt, at)
                elif kind == "gemini" and isinstance(message.get("content"), str):
                    said = NativeMessage("agent", message["content"], at)
                else:
                    continue
                found[key if isinstance(key, str) else f"{path}:{len(found)}"] = said
    return sorted((m for m in found.values() if m.text.strip()), key=lambda m: m.at)


def _read(path: str, cwd: str) -> NativeSession | None:
    records = jsonl_records(path, _HEAD)
    header = next(records, None)
    if header is None or header.get("kind", "main") != "main":
        return None
    sid = header.get("sessionId")
    if not isinstance(sid, str):
        return None
    preview, model = "", None
    for record in records:
        for message in _messages(record):
            if not preview and (prompt := _prompt(message)) is not None:
                preview = preview_of(prompt)
            if model is None and message.get("type") == "gemini":
                found = message.get("model")
                model = found if isinstance(found, str) else None
    updated = mtime(path, 0)
    return NativeSession(
        id=sid,
        cwd=cwd,
        created_at=iso_seconds(header.get("startTime"), updated),
        updated_at=updated,
        preview=preview,
        path=path,
        model=model,
        source="unknown",
    )


def _merge(into: NativeSession, other: NativeSession) -> None:
    if other.created_at < into.created_at:
        into.created_at, into.path = other.created_at, other.path
    into.updated_at = max(into.updated_at, other.updated_at)
    into.preview = into.preview or other.preview
    into.model = into.model or other.model


def gemini_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in gemini's store, newest first: those of project `cwd`, or all."""
    home = env.get("HOME") or os.path.expanduser("~")
    found: dict[str, NativeSession] = {}
    files: dict[str, list[str]] = {}
    for project in glob.glob(os.path.join(glob.escape(home), ".gemini", "tmp", "*")):
        root = _project_root(project)
        if root is None or (cwd is not None and root != cwd):
            continue
        for path in glob.glob(os.path.join(glob.escape(project), "chats", "session-*.jsonl")):
            session = _read(path, root)
            if session is None:
                continue
            if session.id in found:
                _merge(found[session.id], session)
            else:
                found[session.id] = session
            files.setdefault(session.id, []).append(path)
    for sid, session in found.items():
        session.messages = functools.partial(_conversation, files[sid])
    return newest_first(list(found.values()))
