"""Gemini CLI's own files of a session, for `thread/delete` with `deleteBackendSession`:
`~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<id[:8]>.jsonl` (a session loaded in
a later minute has one file per minute), each starting with a header naming the session."""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping

__all__ = ["session_files"]

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
