"""The CLIs' own sessions, whoever started them: listing them (`thread/list` with `source:
"native"`) and finding the one a `thread/resume` adopts (`backendSessionId`, `latest`,
`path`). Reading a store is file work, done in a worker thread."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

import msgspec
import trio

from ..backends.base import Backend
from ..backends.kit.native import NativeMessage, NativeSession
from ..ids import new_id
from ..protocol import (
    AgentMessageItem,
    TextInput,
    Thread,
    ThreadItem,
    ThreadNotLoaded,
    ThreadResumeParams,
    UserMessageItem,
)
from ..rpc.errors import INVALID_PARAMS, INVALID_REQUEST, RpcError
from ..store import ItemEntry, LogEntry, TurnCompletedEntry, TurnStartedEntry

__all__ = ["history", "native_sessions", "native_view", "wanted_session"]


async def _listing(
    backend: Backend, env: Mapping[str, str], cwd: str | None
) -> list[NativeSession] | None:
    return await trio.to_thread.run_sync(backend.native_sessions, env, cwd)


async def native_sessions(
    backends: Iterable[Backend], env: Mapping[str, str], cwds: Sequence[str] | None
) -> list[tuple[Backend, NativeSession]]:
    """The sessions of every backend that can list its CLI's store, in `cwds` (or all)."""
    found = []
    targets: Sequence[str | None] = cwds or [None]
    for backend in backends:
        for cwd in targets:
            listed = await _listing(backend, env, cwd)
            found += [(backend, session) for session in listed or ()]
    return found


def native_view(backend: Backend, session: NativeSession) -> Thread:
    return Thread(
        id=session.id,
        session_id=session.id,
        preview=session.preview,
        ephemeral=False,
        model_provider=backend.id,
        created_at=session.created_at,
        updated_at=session.updated_at,
        status=ThreadNotLoaded(),
        cwd=session.cwd,
        cli_version=session.cli_version,
        source=session.source,
        project_id=None,
        turns=[],
        model=session.model,
        path=session.path,
    )


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


async def _by_path(
    backends: Iterable[Backend], env: Mapping[str, str], path: str
) -> tuple[Backend, NativeSession]:
    if not os.path.isabs(path):
        raise RpcError(INVALID_PARAMS, f"Invalid params: path must be absolute: {path!r}")
    for backend, session in await native_sessions(backends, env, None):
        if session.path is not None and _same_file(session.path, path):
            return backend, session
    raise RpcError(INVALID_REQUEST, f"no CLI session is kept in {path}")


async def wanted_session(
    p: ThreadResumeParams,
    backend: Backend,
    backends: Sequence[Backend],
    env: Mapping[str, str],
    cwd: str,
) -> tuple[Backend, NativeSession]:
    """The session `p` adopts: by `path` (in the store of `p.modelProvider`'s backend, else
    of any), `backendSessionId` or `latest` (in `backend`'s store; `cwd` is `p.cwd` or the
    server's). RpcError naming what was looked for when there is none."""
    if p.path:
        return await _by_path([backend] if p.model_provider else backends, env, p.path)
    listed = await _listing(backend, env, None if p.backend_session_id else cwd)
    if listed is None:
        if p.latest:
            raise RpcError(
                INVALID_REQUEST, f"the {backend.id} backend cannot list its CLI's sessions"
            )
        # Bound as given: the CLI itself says at the first turn whether it has the session.
        assert p.backend_session_id is not None
        return backend, NativeSession(id=p.backend_session_id, cwd=cwd, created_at=0, updated_at=0)
    if p.latest:
        if not listed:
            raise RpcError(INVALID_REQUEST, f"no {backend.id} session was begun in {cwd}")
        return backend, listed[0]
    for session in listed:
        if session.id == p.backend_session_id:
            if p.cwd is not None and session.cwd != cwd:
                raise RpcError(
                    INVALID_REQUEST,
                    f"{backend.id} session {session.id} was begun in {session.cwd}, not {cwd}",
                )
            return backend, session
    raise RpcError(INVALID_REQUEST, f"no {backend.id} session {p.backend_session_id} found")


def _turns(messages: list[NativeMessage]) -> list[list[NativeMessage]]:
    """A turn per thing the person said, with the agent's answers to it (anything the agent
    said before the first prompt opens a turn of its own)."""
    turns: list[list[NativeMessage]] = []
    for message in messages:
        if message.role == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


def _entry(turn_id: str, item: ThreadItem, at: int) -> ItemEntry:
    return ItemEntry(
        turn_id=turn_id, item=msgspec.Raw(msgspec.json.encode(item)), completed_at_ms=at * 1000
    )


async def history(session: NativeSession) -> list[LogEntry]:
    """The session's conversation as threadline's log of completed turns: a user message
    and the agent's messages per turn (tools and reasoning are the CLI's to keep)."""
    if session.messages is None:
        return []
    messages = await trio.to_thread.run_sync(session.messages)
    entries: list[LogEntry] = []
    for turn in _turns(messages):
        turn_id, start, end = new_id(), turn[0].at, turn[-1].at
        entries.append(TurnStartedEntry(turn_id=turn_id, started_at=start))
        for message in turn:
            item: ThreadItem
            if message.role == "user":
                item = UserMessageItem(id=new_id(), content=[TextInput(text=message.text)])
            else:
                item = AgentMessageItem(id=new_id(), text=message.text)
            entries.append(_entry(turn_id, item, message.at))
        entries.append(TurnCompletedEntry(turn_id=turn_id, status="completed", completed_at=end))
    return entries
