"""On-disk records of the thread store: the per-thread metadata record, the log entries, and
the pure function that folds a log into turns.

Files are JSON in snake_case. Unknown fields are ignored on decode (msgspec's default), so a
file written by a newer threadline still loads here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec
from msgspec import Raw

__all__ = [
    "NO_ERROR",
    "ItemEntry",
    "LogEntry",
    "ThreadRecord",
    "TurnCompletedEntry",
    "TurnStartedEntry",
    "TurnView",
    "turns_from_log",
]

SCHEMA_VERSION = 1


class ThreadRecord(msgspec.Struct, kw_only=True):
    """Metadata of one persisted thread (`threads/<id>/meta.json`).

    Ephemeral threads are never persisted: the server simply does not call the store for
    them, so the store itself has no special case for `ephemeral=True`.
    """

    id: str
    backend: str  # an id of `threadline.backends.registry.BACKEND_IDS`
    cwd: str
    model: str | None = None
    created_at: int  # unix seconds
    updated_at: int  # unix seconds
    preview: str = ""  # first user text
    name: str | None = None
    archived: bool = False
    ephemeral: bool = False
    backend_session_id: str | None = None
    role_bootstrap_applied: bool = False
    turn_count: int = 0
    #: `thread/fork`: the thread this one was forked from, and the CLI session it forks
    #: (until the fork's own CLI session exists: then `backend_session_id` is set).
    forked_from_id: str | None = None
    fork_of: str | None = None
    #: `thread/metadata/update` gitInfo: branch, originUrl, sha.
    git_info: dict[str, Any] | None = None
    #: `thread/inject_items` batches the next turn has yet to deliver (a transcript block).
    injected: list[list[Any]] = []
    # approvalPolicy, sandbox, developerInstructions, baseInstructions, config, ...
    settings: dict[str, Any] = {}
    schema_version: int = SCHEMA_VERSION


# Log entries: one JSON object per line of `log.jsonl`, tagged on "kind". omit_defaults keeps an
# empty `error` Raw out of the line (an empty Raw would otherwise encode as nothing at all).
# kw_only is not inherited by msgspec subclasses, hence repeated on each.
class _LogEntryBase(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    turn_id: str


class TurnStartedEntry(_LogEntryBase, tag="turnStarted", kw_only=True):
    started_at: int  # unix seconds


class ItemEntry(_LogEntryBase, tag="item", kw_only=True):
    # The encoded protocol ThreadItem (a JSON object), stored verbatim; the store never
    # interprets it so the protocol can evolve without touching the store.
    item: Raw
    completed_at_ms: int


# The default of `error`. omit_defaults compares a Raw default by identity, so an explicit
# empty `Raw()` would encode as `"error":` (invalid JSON); the store swaps it for this object.
NO_ERROR = Raw()


#: How a turn ended; a view of a turn still running is "inProgress".
TurnEnd = Literal["completed", "interrupted", "failed"]
TurnViewStatus = TurnEnd | Literal["inProgress"]


class TurnCompletedEntry(_LogEntryBase, tag="turnCompleted", kw_only=True):
    status: TurnEnd
    completed_at: int  # unix seconds
    duration_ms: int | None = None
    # Encoded TurnError JSON, or empty. Not `Raw | None`: msgspec cannot decode that union.
    error: Raw = NO_ERROR


LogEntry = TurnStartedEntry | ItemEntry | TurnCompletedEntry


class TurnView(msgspec.Struct, kw_only=True):
    """One turn as reconstructed from the log."""

    turn_id: str
    status: TurnViewStatus
    started_at: int | None = None  # None if the start line was lost (torn/corrupt)
    completed_at: int | None = None
    duration_ms: int | None = None
    error: Raw = Raw()
    items: list[Raw] = []


INTERRUPTED: TurnEnd = "interrupted"
IN_PROGRESS: TurnViewStatus = "inProgress"


def turns_from_log(
    entries: Iterable[LogEntry], *, active_turn_id: str | None = None
) -> list[TurnView]:
    """Group log entries into turns, in order of first appearance.

    A turn that has a start (or items) but no completion entry gets status "interrupted":
    completion is always logged by the process that ran the turn, so a missing one means that
    process died mid-turn (crash, kill -9) and nothing will ever finish it. The one exception
    is the turn this very process is still running, which the caller names with
    `active_turn_id` and which is reported as "inProgress".

    If a turn somehow has several completion entries, the first one wins (a turn has exactly
    one terminal status); items are kept in log order.
    """
    turns: dict[str, TurnView] = {}
    completed: set[str] = set()

    def view(turn_id: str) -> TurnView:
        v = turns.get(turn_id)
        if v is None:
            v = turns[turn_id] = TurnView(turn_id=turn_id, status=INTERRUPTED, items=[])
        return v

    for entry in entries:
        v = view(entry.turn_id)
        if isinstance(entry, TurnStartedEntry):
            if v.started_at is None:
                v.started_at = entry.started_at
        elif isinstance(entry, ItemEntry):
            v.items.append(entry.item)
        elif entry.turn_id not in completed:
            completed.add(entry.turn_id)
            v.status = entry.status
            v.completed_at = entry.completed_at
            v.duration_ms = entry.duration_ms
            v.error = entry.error

    if active_turn_id is not None and active_turn_id not in completed and active_turn_id in turns:
        turns[active_turn_id].status = IN_PROGRESS
    return list(turns.values())
