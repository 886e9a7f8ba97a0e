"""Sessions a CLI keeps in its own store, whoever started them (`thread/list` with `source:
"native"`, `thread/resume` adopting one): what a listing knows of each, and the small readers
the backends' store parsers share. Reading is synchronous file work: call it in a worker
thread."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "PREVIEW_CHARS",
    "NativeMessage",
    "NativeSession",
    "iso_seconds",
    "jsonl_messages",
    "jsonl_records",
    "keyed_transcripts",
    "newest_first",
    "read_transcript",
]

#: A preview is the first user text, cut to this many characters.
PREVIEW_CHARS = 200


@dataclass(frozen=True)
class NativeMessage:
    """A message of a session's conversation: what the person said, or the agent's text."""

    role: Literal["user", "agent"]
    text: str
    #: unix seconds (0: unknown)
    at: int = 0


@dataclass
class NativeSession:
    """One session in a CLI's own store."""

    id: str
    cwd: str
    #: unix seconds
    created_at: int
    updated_at: int
    #: The first thing the user said (empty when the session has no prompt yet).
    preview: str = ""
    #: The file the CLI keeps it in.
    path: str | None = None
    model: str | None = None
    cli_version: str = ""
    #: How it was started, as Codex's `SessionSource` says it: `cli` (the interactive
    #: program), `exec` (a headless run), `appServer` (a program driving it), `unknown`.
    source: str = "unknown"
    #: Reads the session's conversation, oldest first (file work; None: not readable).
    messages: Callable[[], list[NativeMessage]] | None = None


def iso_seconds(stamp: Any, default: int) -> int:
    """Unix seconds of an ISO 8601 time (`2026-11-27T18:40:25.857Z`), else `default`."""
    if not isinstance(stamp, str):
        return default
    try:
        return int(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return default


def jsonl_records(path: str, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSONL file, in order (unreadable lines skipped), at most
    `limit` lines read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as source:
            for n, line in enumerate(source):
                if limit is not None and n >= limit:
                    return
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    yield record
    except OSError:
        return


def jsonl_messages(
    path: str, pick: Callable[[dict[str, Any]], NativeMessage | None]
) -> list[NativeMessage]:
    """The messages `pick` finds in the records of a JSONL file, in order."""
    found = (pick(record) for record in jsonl_records(path))
    return [message for message in found if message is not None and message.text.strip()]


def mtime(path: str, default: int) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return default


def newest_first(sessions: list[NativeSession]) -> list[NativeSession]:
    return sorted(sessions, key=lambda s: (s.updated_at, s.created_at, s.id), reverse=True)


def preview_of(text: str) -> str:
    return " ".join(text.split())[:PREVIEW_CHARS]


def keyed_transcripts(projects: str, cwd: str | None, pattern: str) -> list[str]:
    """The files matching `pattern` in `projects/<key>/`, where a CLI files the sessions begun
    in `cwd` under the key of that directory (every non-alphanumeric character a `-`); every
    project's when `cwd` is None or its key is not there (the records decide then)."""
    key = glob.escape(re.sub(r"[^A-Za-z0-9]", "-", cwd)) if cwd is not None else "*"
    if not os.path.isdir(os.path.join(projects, key)):
        key = "*"
    return glob.glob(os.path.join(glob.escape(projects), key, pattern))


def _model(record: dict[str, Any]) -> Any:
    if isinstance(record.get("model"), str):
        return record["model"]
    return (record.get("message") or {}).get("model") if record.get("type") == "assistant" else None


def read_transcript(
    path: str,
    prompt: Callable[[dict[str, Any]], str | None],
    message: Callable[[dict[str, Any]], NativeMessage | None],
    head: int = 400,
) -> tuple[NativeSession, dict[str, str]] | None:
    """The session of a transcript named `<session id>.jsonl` whose records carry its
    `sessionId`, `cwd`, `timestamp` and `version` (claude's, qwen's), and those records' first
    string values by key (`entrypoint` too); None when no record names a cwd. `prompt` tells
    a person's prompt (the preview), `message` the conversation; `head` records are read."""
    sid = os.path.basename(path)[: -len(".jsonl")]
    found: dict[str, str] = {}
    preview = ""
    for record in jsonl_records(path, head):
        if record.get("sessionId") != sid:
            continue
        for key in ("cwd", "timestamp", "version", "entrypoint"):
            if key not in found and isinstance(record.get(key), str):
                found[key] = record[key]
        model = _model(record)
        if "model" not in found and isinstance(model, str) and not model.startswith("<"):
            found["model"] = model
        if not preview and (said := prompt(record)) is not None:
            preview = preview_of(said)
    if "cwd" not in found:
        return None
    updated = mtime(path, 0)
    session = NativeSession(
        id=sid,
        cwd=found["cwd"],
        created_at=iso_seconds(found.get("timestamp"), updated),
        updated_at=updated,
        preview=preview,
        path=path,
        model=found.get("model"),
        cli_version=found.get("version", ""),
        messages=lambda: jsonl_messages(path, message),
    )
    return session, found
