"""Gemini CLI's own files of a session: `~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-
<id[:8]>.jsonl`, each starting with a header naming the session. For `thread/delete` with
`deleteBackendSession`, and to keep gemini from deleting a session's history (`prune_empty`).

gemini 0.61's `session/load` in a later minute than the session's file starts a new file for
the session holding only its `<session_context>` message; its messages go there from the next
prompt on. If no prompt comes (a thread resumed, then released or closed), that file has no
resumable content, and the session-retention cleanup of the next gemini started in the
project (on by default) deletes every file whose name ends in that session's short id, the
one with the whole conversation included: the next `session/load` fails with "Invalid session
identifier". So before an agent starts, such empty duplicates are removed first."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
from collections.abc import Mapping

__all__ = ["prune_empty", "session_files"]

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")


def _names(path: str, session_id: str) -> bool:
    """Whether the file's first record is the header of `session_id`."""
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            header = json.loads(source.readline() or "{}")
    except (OSError, ValueError):
        return False
    return isinstance(header, dict) and header.get("sessionId") == session_id


def session_files(env: Mapping[str, str], session_id: str) -> list[str]:
    if not _SAFE_ID.match(session_id):
        return []
    home = env.get("HOME") or os.path.expanduser("~")
    chats = os.path.join(glob.escape(home), ".gemini", "tmp", "*", "chats")
    pattern = os.path.join(chats, f"session-*-{glob.escape(session_id[:8])}*.jsonl")
    return [path for path in glob.glob(pattern) if _names(path, session_id)]


_CONTEXT = "<session_context>"


def _records(path: str) -> tuple[str | None, bool]:
    """(the file's session id, whether it holds anything but the session context)."""
    sid: str | None = None
    content = False
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for n, line in enumerate(source):
                try:
                    record = json.loads(line)
                except ValueError:
                    return sid, True  # unreadable: not ours to judge
                if not isinstance(record, dict):
                    continue
                if n == 0:
                    found = record.get("sessionId")
                    sid = found if isinstance(found, str) else None
                messages = (record.get("$set") or {}).get("messages")
                for message in messages if isinstance(messages, list) else [record]:
                    if isinstance(message, dict) and _is_content(message):
                        content = True
    except OSError:
        return None, True
    return sid, content


def _is_content(message: dict[str, object]) -> bool:
    """A message gemini would resume: the user's (but the session context) or the model's."""
    kind = message.get("type")
    if kind == "user":
        parts = message.get("content")
        texts = (
            [p.get("text") for p in parts if isinstance(p, dict)]
            if isinstance(parts, list)
            else [parts]
        )
        return not all(isinstance(t, str) and t.lstrip().startswith(_CONTEXT) for t in texts)
    return kind is not None and kind != "info"


def prune_empty(env: Mapping[str, str]) -> list[str]:
    """Remove the session files that hold nothing but a session context while another file of
    the same session holds its conversation (see above); the paths removed."""
    home = env.get("HOME") or os.path.expanduser("~")
    pattern = os.path.join(glob.escape(home), ".gemini", "tmp", "*", "chats", "session-*.jsonl")
    by_session: dict[str, list[tuple[str, bool]]] = {}
    for path in glob.glob(pattern):
        sid, content = _records(path)
        if sid is not None:
            by_session.setdefault(sid, []).append((path, content))
    removed = []
    for files in by_session.values():
        if len(files) > 1 and any(content for _, content in files):
            for path, content in files:
                if not content:
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                        removed.append(path)
    return removed
