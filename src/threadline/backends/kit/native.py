"""Sessions a CLI keeps in its own store, whoever started them (`thread/list` with `source:
"native"`, `thread/resume` adopting one): what a listing knows of each, and the small readers
the backends' store parsers share. Reading is synchronous file work: call it in a worker
thread."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["PREVIEW_CHARS", "NativeSession", "iso_seconds", "jsonl_records", "newest_first"]

#: A preview is the first user text, cut to this many characters.
PREVIEW_CHARS = 200


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


def mtime(path: str, default: int) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return default


def newest_first(sessions: list[NativeSession]) -> list[NativeSession]:
    return sorted(sessions, key=lambda s: (s.updated_at, s.created_at, s.id), reverse=True)


def preview_of(text: str) -> str:
    return " ".join(text.split())[:PREVIEW_CHARS]
