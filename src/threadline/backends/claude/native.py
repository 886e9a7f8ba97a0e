"""Claude Code's own sessions: `<config>/projects/<cwd key>/<session id>.jsonl`, one transcript
per session, its records naming the session's `cwd`, its `entrypoint` (`cli` for the
interactive program, `sdk-cli` for `claude -p` and SDK runs) and `version`."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from typing import Any

from ..kit.native import NativeSession, iso_seconds, jsonl_records, mtime, newest_first, preview_of

__all__ = ["claude_sessions"]

_SESSION_FILE = re.compile(r"[0-9A-Fa-f-]{36}\.jsonl\Z")
#: Records read from a transcript's start to find its cwd, first prompt and model.
_HEAD = 400
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


def read_session(path: str) -> NativeSession | None:
    """The session a transcript holds; None when it names none."""
    sid = os.path.basename(path)[: -len(".jsonl")]
    found: dict[str, Any] = {}
    preview = ""
    for record in jsonl_records(path, _HEAD):
        if record.get("sessionId") != sid:
            continue
        for key in ("cwd", "timestamp", "entrypoint", "version"):
            if key not in found and isinstance(record.get(key), str):
                found[key] = record[key]
        if not preview and (prompt := _prompt(record)) is not None:
            preview = preview_of(prompt)
        if "model" not in found and record.get("type") == "assistant":
            model = (record.get("message") or {}).get("model")
            if isinstance(model, str) and not model.startswith("<"):
                found["model"] = model
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
        source=_SOURCES.get(found.get("entrypoint", ""), "unknown"),
    )


def claude_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in claude's store, newest first: those begun in `cwd`, or all."""
    projects = os.path.join(glob.escape(_config_dir(env)), "projects")
    # A session is filed under the key of the cwd it began in (every non-alphanumeric
    # character a `-`), which several directories can share: the records decide.
    key = glob.escape(re.sub(r"[^A-Za-z0-9]", "-", cwd)) if cwd is not None else "*"
    sessions = []
    for path in glob.glob(os.path.join(projects, key, "*.jsonl")):
        if not _SESSION_FILE.match(os.path.basename(path)):
            continue
        session = read_session(path)
        if session is not None and (cwd is None or session.cwd == cwd):
            sessions.append(session)
    return newest_first(sessions)
