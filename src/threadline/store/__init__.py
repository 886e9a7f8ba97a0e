"""Persistence of threads under platformdirs' user data dir (override: $THREADLINE_HOME):
an atomically replaced metadata record and an append-only JSONL log per thread."""

from threadline.store.paths import default_root
from threadline.store.records import (
    ItemEntry,
    LogEntry,
    ThreadRecord,
    TurnCompletedEntry,
    TurnStartedEntry,
    TurnView,
    turns_from_log,
)
from threadline.store.store import StoreCorrupt, ThreadStore

__all__ = [
    "ItemEntry",
    "LogEntry",
    "StoreCorrupt",
    "ThreadRecord",
    "ThreadStore",
    "TurnCompletedEntry",
    "TurnStartedEntry",
    "TurnView",
    "default_root",
    "turns_from_log",
]
