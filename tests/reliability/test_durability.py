"""The durability promise behind the crash suite, checked at the moment it is made.

`turn/completed` goes out only after every log entry of the turn — its items and its completion
entry — is written *and fsynced* (`LoadedThread.persist(..., sync=True)`), so a client that saw
it can read the turn back after a crash of the process or of the machine. A kill -9 cannot tell
"written" from "fsynced" (the page cache survives it), so this is checked in-process: a store
that records what was written and what was fsynced, behind a slow disk so that the background
flushes overlap the end of the turn, and a hook on the server's outgoing `turn/completed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.inproc import inproc_server
from threadline.backends.mock.backend import MockBackend
from threadline.server.config import ServerConfig
from threadline.store import LogEntry, ThreadStore, TurnCompletedEntry


class SpyStore(ThreadStore):
    """A ThreadStore on a slow disk that remembers, per thread, the entries written in order
    and how many of them an fsync covers."""

    def __init__(self, root: Path, delay: float) -> None:
        super().__init__(root)
        self.delay = delay
        self.written: dict[str, list[LogEntry]] = {}
        self.synced: dict[str, int] = {}
        self.appends = 0

    async def append(
        self, thread_id: str, entries: Sequence[LogEntry], *, sync: bool = False
    ) -> None:
        await trio.sleep(self.delay)
        await super().append(thread_id, entries, sync=sync)
        self.appends += 1
        written = self.written.setdefault(thread_id, [])
        written.extend(entries)
        if sync:
            self.synced[thread_id] = len(written)

    def completion_fsynced(self, thread_id: str, turn_id: str) -> bool:
        durable = self.written.get(thread_id, [])[: self.synced.get(thread_id, 0)]
        return any(isinstance(e, TurnCompletedEntry) and e.turn_id == turn_id for e in durable)


def hook_turn_completed(client: Any, check: Any) -> list[str]:
    """Run `check(thread_id, turn_id)` as the server sends each turn/completed."""
    peer = client.server.service.peer
    send = peer.notify
    sent: list[str] = []

    async def notify(method: str, params: Any) -> None:
        if method == "turn/completed":
            check(params.thread_id, params.turn.id)
            sent.append(params.turn.id)
        await send(method, params)

    peer.notify = notify
    return sent


SCRIPT = "\n".join(f"/text message {n} of a turn with many items" for n in range(8))


@pytest.mark.parametrize("delay", [0.0, 0.002, 0.01])
async def test_turn_completed_only_after_the_turn_is_fsynced(tmp_path: Path, delay: float) -> None:
    store = SpyStore(tmp_path / "home", delay)
    config = ServerConfig(default_backend="mock", interrupt_grace=0.2)
    async with inproc_server(
        {"mock": MockBackend()}, tmp_path, config=config, store=store
    ) as client:
        late: list[str] = []

        def check(thread_id: str, turn_id: str) -> None:
            if not store.completion_fsynced(thread_id, turn_id):
                late.append(turn_id)

        sent = hook_turn_completed(client, check)
        tids = [
            await client.start_thread(modelProvider="mock", cwd=str(tmp_path)) for _ in range(3)
        ]

        for _ in range(4):  # the threads' turns run at the same time
            pending = {(await client.start_turn(tid, SCRIPT))["turn"]["id"] for tid in tids}
            while pending:
                event = await client.next_event()
                if event.get("method") == "turn/completed":
                    assert event["params"]["turn"]["status"] == "completed"
                    pending.remove(event["params"]["turn"]["id"])
        assert len(sent) == 12
        assert not late, f"turn/completed sent before its completion entry was fsynced: {late}"
