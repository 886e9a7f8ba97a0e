"""The thread management and history requests of `Client`, one typed method each: names,
unarchive, delete, Git metadata, injected history and the paged turn and item lists."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, TypeVar

from msgspec import UNSET, UnsetType

from ..protocol import (
    Base,
    ItemAnchor,
    ThreadDeleteParams,
    ThreadDeleteResponse,
    ThreadInjectItemsParams,
    ThreadInjectItemsResponse,
    ThreadItemEntry,
    ThreadItemsListParams,
    ThreadItemsListResponse,
    ThreadMetadataGitInfoUpdate,
    ThreadMetadataUpdateParams,
    ThreadMetadataUpdateResponse,
    ThreadSetNameParams,
    ThreadSetNameResponse,
    ThreadTurnsListParams,
    ThreadTurnsListResponse,
    ThreadUnarchiveParams,
    ThreadUnarchiveResponse,
    Turn,
    TurnItemsView,
)

__all__ = ["ThreadRequests"]

_R = TypeVar("_R", bound=Base)
SortDirection = Literal["asc", "desc"]


class ThreadRequests:
    """Mixed into `Client`, which supplies `_call`."""

    async def _call(self, method: str, params: Base, result_type: type[_R]) -> _R:
        raise NotImplementedError

    async def set_thread_name(self, thread_id: str, name: str) -> ThreadSetNameResponse:
        """`thread/name/set` (trimmed by the server; `thread/name/updated` follows)."""
        params = ThreadSetNameParams(thread_id=thread_id, name=name)
        return await self._call("thread/name/set", params, ThreadSetNameResponse)

    async def unarchive_thread(self, thread_id: str) -> ThreadUnarchiveResponse:
        params = ThreadUnarchiveParams(thread_id=thread_id)
        return await self._call("thread/unarchive", params, ThreadUnarchiveResponse)

    async def delete_thread(
        self, thread_id: str, *, delete_backend_session: bool = False
    ) -> ThreadDeleteResponse:
        """`thread/delete`: threadline's record and log go; the CLI's own session files too
        only with `delete_backend_session`."""
        params = ThreadDeleteParams(
            thread_id=thread_id, delete_backend_session=delete_backend_session
        )
        return await self._call("thread/delete", params, ThreadDeleteResponse)

    async def update_thread_metadata(
        self,
        thread_id: str,
        *,
        branch: str | UnsetType | None = UNSET,
        origin_url: str | UnsetType | None = UNSET,
        sha: str | UnsetType | None = UNSET,
    ) -> ThreadMetadataUpdateResponse:
        """`thread/metadata/update` of the thread's Git info: a field left out stays, `None`
        clears it, a string replaces it."""
        git = ThreadMetadataGitInfoUpdate(branch=branch, origin_url=origin_url, sha=sha)
        params = ThreadMetadataUpdateParams(thread_id=thread_id, git_info=git)
        return await self._call("thread/metadata/update", params, ThreadMetadataUpdateResponse)

    async def inject_items(
        self, thread_id: str, items: Sequence[dict[str, Any]]
    ) -> ThreadInjectItemsResponse:
        """`thread/inject_items`: earlier conversation (Responses API items, e.g. from
        `message_item()`) for the model to see before the thread's next turn."""
        params = ThreadInjectItemsParams(thread_id=thread_id, items=list(items))
        return await self._call("thread/inject_items", params, ThreadInjectItemsResponse)

    async def list_turns(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int | None = None,
        sort_direction: SortDirection | None = None,
        items_view: TurnItemsView | None = None,
    ) -> ThreadTurnsListResponse:
        """One page of `thread/turns/list` (newest first unless `sort_direction="asc"`)."""
        params = ThreadTurnsListParams(
            thread_id=thread_id,
            cursor=cursor,
            limit=limit,
            sort_direction=sort_direction,
            items_view=items_view,
        )
        return await self._call("thread/turns/list", params, ThreadTurnsListResponse)

    async def list_items(
        self,
        thread_id: str,
        *,
        turn_id: str | None = None,
        cursor: str | ItemAnchor | None = None,
        limit: int | None = None,
        sort_direction: SortDirection | None = None,
    ) -> ThreadItemsListResponse:
        """One page of `thread/items/list` (oldest first unless `sort_direction="desc"`);
        `cursor` is a page's `next_cursor` or `ItemAnchor(item_id=...)`."""
        params = ThreadItemsListParams(
            thread_id=thread_id,
            turn_id=turn_id,
            cursor=cursor,
            limit=limit,
            sort_direction=sort_direction,
        )
        return await self._call("thread/items/list", params, ThreadItemsListResponse)

    async def all_turns(
        self, thread_id: str, *, sort_direction: SortDirection | None = None, page: int = 50
    ) -> AsyncIterator[Turn]:
        """Every turn of the thread, fetched `page` at a time."""
        cursor: str | None = None
        while True:
            got = await self.list_turns(
                thread_id, cursor=cursor, limit=page, sort_direction=sort_direction
            )
            for turn in got.data:
                yield turn
            if not got.next_cursor:
                return
            cursor = got.next_cursor

    async def all_items(
        self, thread_id: str, *, turn_id: str | None = None, page: int = 100
    ) -> AsyncIterator[ThreadItemEntry]:
        """Every item of the thread (or of one turn), oldest first, `page` at a time."""
        cursor: str | None = None
        while True:
            got = await self.list_items(thread_id, turn_id=turn_id, cursor=cursor, limit=page)
            for entry in got.data:
                yield entry
            if not got.next_cursor:
                return
            cursor = got.next_cursor
