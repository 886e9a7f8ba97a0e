"""Thread management requests (Codex 0.169.0): names, archive/unarchive, delete, Git metadata,
and the paged history lists (`thread/turns/list`, `thread/items/list`)."""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType

from .base import Base, TypeTagged
from .common import Thread, Turn, TurnItemsView
from .items import ThreadItem

__all__ = [
    "ItemAnchor",
    "ThreadDeleteParams",
    "ThreadDeleteResponse",
    "ThreadItemEntry",
    "ThreadItemsListParams",
    "ThreadItemsListResponse",
    "ThreadMetadataGitInfoUpdate",
    "ThreadMetadataUpdateParams",
    "ThreadMetadataUpdateResponse",
    "ThreadSetNameParams",
    "ThreadSetNameResponse",
    "ThreadTurnsListParams",
    "ThreadTurnsListResponse",
    "ThreadUnarchiveParams",
    "ThreadUnarchiveResponse",
]

SortDirection = Literal["asc", "desc"]


class ThreadSetNameParams(Base, kw_only=True):
    thread_id: str
    name: str


class ThreadSetNameResponse(Base, kw_only=True):
    pass


class ThreadUnarchiveParams(Base, kw_only=True):
    thread_id: str


class ThreadUnarchiveResponse(Base, kw_only=True):
    thread: Thread


class ThreadDeleteParams(Base, kw_only=True):
    thread_id: str
    #: threadline extension: also remove the CLI's own session files where the backend
    #: knows them (default: only threadline's record and log go).
    delete_backend_session: bool = False
    #: threadline extension: also remove the thread's mailbox (default: it is kept).
    delete_mailbox: bool = False


class ThreadDeleteResponse(Base, kw_only=True):
    pass


class ThreadMetadataGitInfoUpdate(Base, kw_only=True):
    """Each field: absent leaves it, null clears it, a string replaces it."""

    branch: str | UnsetType | None = UNSET
    origin_url: str | UnsetType | None = UNSET
    sha: str | UnsetType | None = UNSET


class ThreadMetadataUpdateParams(Base, kw_only=True):
    thread_id: str
    git_info: ThreadMetadataGitInfoUpdate | None = None


class ThreadMetadataUpdateResponse(Base, kw_only=True):
    thread: Thread


class ThreadTurnsListParams(Base, kw_only=True):
    thread_id: str
    cursor: str | None = None
    limit: int | None = None
    #: Newest first by default, as in Codex.
    sort_direction: SortDirection | None = None
    items_view: TurnItemsView | None = None


class ThreadTurnsListResponse(Base, kw_only=True):
    data: list[Turn]
    next_cursor: str | None = None
    backwards_cursor: str | None = None


class ItemAnchor(TypeTagged, tag="item", kw_only=True):
    """An exclusive position: the items after (ascending) or before (descending) `itemId`."""

    item_id: str


class ThreadItemsListParams(Base, kw_only=True):
    thread_id: str
    turn_id: str | None = None
    cursor: str | ItemAnchor | None = None
    limit: int | None = None
    #: Oldest first by default, as in Codex.
    sort_direction: SortDirection | None = None


class ThreadItemEntry(Base, kw_only=True):
    item: ThreadItem
    turn_id: str
    started_at_ms: int | None = None
    completed_at_ms: int | None = None


class ThreadItemsListResponse(Base, kw_only=True):
    data: list[ThreadItemEntry]
    next_cursor: str | None = None
    backwards_cursor: str | None = None
