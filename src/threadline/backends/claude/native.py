"""Claude Code's own sessions: `<config>/projects/<cwd key>/<session id>.jsonl`, one transcript
per session, its records naming the session's `cwd`, its `entrypoint` (`cli` for the
interactive program, `sdk-cli` for `claude -p` and SDK runs) and `version`."""

from __future__ import annotations

import os
import re
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

__all__ = ["claude_sessions"]

_SESSION_FILE = re.compile(r"[0-9A-Fa-f-]{36}\.jsonl\Z")
_SOURCES = {"cli": "cli", "sdk-cli": "exec", "sdk-ts": "appServer", "sdk-py": "appServer"}


def _config_dir(env: Mapping[str, str]) -> str:
    home = env.get("HOME") or os.path.expanduser("~")
    return env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")


def _prompt(record: dict[str, Any]) -> str | None:
    """The text a person typed, when `record` is such a message (not a tool result, a meta
    message or a command's output)."""
    if record.get("type") != "user" or record.get("isMeta") or record.get("isSidechain"):
        return None
    content = (record.get("message") or {}).get("content")
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        content = "\n".join(t for t in texts if isinstance(t, str))
    if not isinstance(content, str) or not content.strip() or content.lstrip().startswith("<"):
        return None
    return content


def _message(record: dict[str, Any]) -> NativeMessage | None:
    at = iso_seconds(record.get("timestamp"), 0)
    if (prompt := _prompt(record)) is not None:
        return NativeMessage("user", prompt, at)
    if record.get("type") != "assistant" or record.get("isSidechain"):
        return None
    content = (record.get("message") or {}).get("content")
    blocks = content if isinstance(content, list) else []
    texts = [b.get("text") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return NativeMessage("agent", "\n".join(t for t in texts if isinstance(t, str)), at)


def claude_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in claude's store, newest first: those begun in `cwd`, or all."""
    projects = os.path.join(_config_dir(env), "projects")
    sessions = []
    for path in keyed_transcripts(projects, cwd, "*.jsonl"):
        if not _SESSION_FILE.match(os.path.basename(path)):
            continue
        read = read_transcript(path, _prompt, _message)
        if read is not None and (cwd is None or read[0].cwd == cwd):
            session, found = read
            session.source = _SOURCES.get(found.get("entrypoint", ""), "unknown")
            sessions.append(session)
    return newest_first(sessions)
