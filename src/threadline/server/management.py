"""Thread management: names, unarchive, delete, Git metadata, and the paged history lists.
Everything here reads and writes threadline's own store, loaded or not (after restarts too)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import trio

from ..protocol import (
    AgentMessageItem,
    ItemAnchor,
    ThreadDeletedNotification,
    ThreadDeleteParams,
    ThreadDeleteResponse,
    ThreadItem,
    ThreadItemEntry,
    ThreadItemsListParams,
    ThreadItemsListResponse,
    ThreadMetadataUpdateParams,
    ThreadMetadataUpdateResponse,
    ThreadNameUpdatedNotification,
    ThreadNotLoaded,
    ThreadSetNameParams,
    ThreadSetNameResponse,
    ThreadTurnsListParams,
    ThreadTurnsListResponse,
    ThreadUnarchivedNotification,
    ThreadUnarchiveParams,
    ThreadUnarchiveResponse,
    Turn,
    WarningNotification,
)
from ..rpc.errors import INVALID_PARAMS, RpcError
from ..store import ItemEntry, ThreadRecord
from .threads import thread_view

if TYPE_CHECKING:
    from .service import ThreadService

__all__ = ["ThreadAdmin"]

log = logging.getLogger("threadline.management")

_ITEM_DECODER = msgspec.json.Decoder(ThreadItem)
_T = TypeVar("_T")
_MAX_PAGE = 1000


def _page(
    rows: Sequence[_T],
    key: Callable[[_T], str],
    cursor: str | None,
    limit: int | None,
    descending: bool,
) -> tuple[list[_T], str | None, str | None]:
    """One page of `rows` (in their order, reversed when `descending`) after `cursor`, and
    its next and backwards cursors. A cursor names a row: `after:<id>` continues after it,
    `from:<id>` starts at it (what a backwards cursor gives, to see the anchor again)."""
    ordered = list(reversed(rows)) if descending else list(rows)
    start = 0
    if cursor:
        mode, _, anchor = cursor.partition(":")
        ids = [key(r) for r in ordered]
        if mode not in ("after", "from") or anchor not in ids:
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown cursor {cursor!r}")
        start = ids.index(anchor) + (1 if mode == "after" else 0)
    size = max(1, min(limit or 100, _MAX_PAGE))
    page = ordered[start : start + size]
    nxt = f"after:{key(page[-1])}" if page and start + size < len(ordered) else None
    back = f"from:{key(page[0])}" if page else None
    return page, nxt, back


class ThreadAdmin:
    def __init__(self, service: ThreadService) -> None:
        self.service = service

    async def _record(self, thread_id: str) -> ThreadRecord:
        tid = self.service.thread_id(thread_id)
        loaded = self.service.loaded.get(tid)
        return loaded.record if loaded else await self.service.load_record(tid)

    async def _save(self, record: ThreadRecord) -> None:
        loaded = self.service.loaded.get(record.id)
        if loaded is not None:
            await loaded.save_record()
        elif not record.ephemeral:
            await self.service.store.save(record)

    def _view(self, record: ThreadRecord) -> Any:
        loaded = self.service.loaded.get(record.id)
        return loaded.view() if loaded else thread_view(record, ThreadNotLoaded())

    async def name_set(self, p: ThreadSetNameParams) -> ThreadSetNameResponse:
        record = await self._record(p.thread_id)
        name = p.name.strip() or None
        record.name = name
        await self._save(record)
        await self.service.peer.notify(
            "thread/name/updated",
            ThreadNameUpdatedNotification(thread_id=record.id, thread_name=name),
        )
        return ThreadSetNameResponse()

    async def unarchive(self, p: ThreadUnarchiveParams) -> ThreadUnarchiveResponse:
        record = await self._record(p.thread_id)
        if record.archived:
            record.archived = False
            await self._save(record)
            await self.service.peer.notify(
                "thread/unarchived", ThreadUnarchivedNotification(thread_id=record.id)
            )
        return ThreadUnarchiveResponse(thread=self._view(record))

    async def delete(self, p: ThreadDeleteParams) -> ThreadDeleteResponse:
        service = self.service
        record = await self._record(p.thread_id)
        loaded = service.loaded.pop(record.id, None)
        if loaded is not None:
            await loaded.close()
            await loaded.set_status_not_loaded()
        if p.delete_backend_session and record.backend_session_id:
            backend = service.backend_of(record)
            message = await backend.delete_session(
                os.environ, record.cwd, record.backend_session_id
            )
            if message:
                await service.peer.notify(
                    "warning", WarningNotification(message=message, thread_id=record.id)
                )
        if p.delete_mailbox:
            await trio.to_thread.run_sync(service.mail.remove, record.id)
        await service.store.delete(record.id)
        await service.peer.notify("thread/deleted", ThreadDeletedNotification(thread_id=record.id))
        return ThreadDeleteResponse()

    async def metadata_update(self, p: ThreadMetadataUpdateParams) -> ThreadMetadataUpdateResponse:
        record = await self._record(p.thread_id)
        if p.git_info is not None:
            git = dict(record.git_info or {})
            for field, key in (("branch", "branch"), ("origin_url", "originUrl"), ("sha", "sha")):
                value = getattr(p.git_info, field)
                if value is not msgspec.UNSET:
                    git[key] = value
            record.git_info = {k: v for k, v in git.items() if v is not None} or None
            await self._save(record)
        return ThreadMetadataUpdateResponse(thread=self._view(record))

    async def turns_list(self, p: ThreadTurnsListParams) -> ThreadTurnsListResponse:
        record = await self._record(p.thread_id)
        turns = await self.service.turns(record)
        page, nxt, back = _page(turns, lambda t: t.id, p.cursor, p.limit, p.sort_direction != "asc")
        view = p.items_view or "summary"
        shown = [_turn_view(t, view) for t in page]
        return ThreadTurnsListResponse(data=shown, next_cursor=nxt, backwards_cursor=back)

    async def items_list(self, p: ThreadItemsListParams) -> ThreadItemsListResponse:
        record = await self._record(p.thread_id)
        entries = [] if record.ephemeral else await self.service.store.read_log(record.id)
        rows = []
        for entry in entries:
            if not isinstance(entry, ItemEntry) or (p.turn_id and entry.turn_id != p.turn_id):
                continue
            try:
                item = _ITEM_DECODER.decode(entry.item)
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.warning("thread %s: skipping an unreadable item", record.id)
                continue
            rows.append(
                ThreadItemEntry(
                    item=item, turn_id=entry.turn_id, completed_at_ms=entry.completed_at_ms
                )
            )
        cursor = p.cursor
        if isinstance(cursor, ItemAnchor):
            if not p.turn_id:
                raise RpcError(INVALID_PARAMS, "Invalid params: an item anchor needs a turnId")
            cursor = f"after:{cursor.item_id}"
        page, nxt, back = _page(
            rows, lambda e: e.item.id, cursor, p.limit, p.sort_direction == "desc"
        )
        return ThreadItemsListResponse(data=page, next_cursor=nxt, backwards_cursor=back)


def _turn_view(turn: Turn, view: str) -> Turn:
    if view == "full":
        return turn
    if view == "notLoaded":
        return msgspec.structs.replace(turn, items=[], items_view="notLoaded")
    final = [i for i in turn.items if isinstance(i, AgentMessageItem)][-1:]
    return msgspec.structs.replace(turn, items=final, items_view="summary")
