"""Where the store lives on disk.

    <root>/threads/<thread_id>/meta.json    metadata record, replaced atomically
    <root>/threads/<thread_id>/log.jsonl    append-only log of turns and completed items

root = $THREADLINE_HOME if set and non-empty, else platformdirs' user_data_dir.
"""

from __future__ import annotations

from pathlib import Path

from threadline.home import APP_NAME, ENV_HOME, default_root
from threadline.ids import InvalidId, is_valid_id, validate_id

__all__ = [
    "APP_NAME",
    "ENV_HOME",
    "LOG_NAME",
    "META_NAME",
    "THREADS_DIR",
    "TRASH_DIR",
    "checked_thread_id",
    "default_root",
    "is_thread_id",
    "log_path",
    "meta_path",
    "thread_dir",
]

THREADS_DIR = "threads"
META_NAME = "meta.json"
LOG_NAME = "log.jsonl"
# Deleted threads are first renamed in here (one atomic step), then removed. Starts with a dot
# so it can never be mistaken for a thread id.
TRASH_DIR = ".trash"


# A canonical UUID string is 36 characters. The length check backs up ids.validate_id, whose
# regex ends in `$` and so also accepts "<uuid>\n": that must not name a second directory.
_ID_LEN = 36


def is_thread_id(name: object) -> bool:
    return isinstance(name, str) and len(name) == _ID_LEN and is_valid_id(name)


def checked_thread_id(thread_id: object) -> str:
    value = validate_id(thread_id)
    if len(value) != _ID_LEN:
        raise InvalidId(f"invalid thread id: {value!r} (expected a lowercase UUID)")
    return value


def thread_dir(root: Path, thread_id: str) -> Path:
    # The only way a thread id becomes a path: validated first, so `../x`, `/abs`, `a/b` or a
    # NUL byte raise InvalidId before any file is touched.
    return root / THREADS_DIR / checked_thread_id(thread_id)


def meta_path(root: Path, thread_id: str) -> Path:
    return thread_dir(root, thread_id) / META_NAME


def log_path(root: Path, thread_id: str) -> Path:
    return thread_dir(root, thread_id) / LOG_NAME
