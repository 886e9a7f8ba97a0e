"""Reading a thread while one of its turns runs: the running turn is `inProgress`, not
`interrupted`. (A turn without a completion entry in the log reads back `interrupted`, which is
right after a crash — nothing will ever finish it — but not for the turn this very server is
still running.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.support.inproc import inproc_server
from threadline.backends.mock.backend import MockBackend
from threadline.server.config import ServerConfig


@pytest.mark.parametrize("method", ["thread/read", "thread/resume"])
async def test_a_running_turn_reads_as_in_progress(tmp_path: Path, method: str) -> None:
    config = ServerConfig(default_backend="mock", interrupt_grace=0.2)
    async with inproc_server({"mock": MockBackend()}, tmp_path, config=config) as c:
        tid = await c.start_thread(modelProvider="mock", cwd=str(tmp_path))
        done, _ = await c.run_turn(tid, "/text first")
        first = done["params"]["turn"]["id"]
        running = (await c.start_turn(tid, "/text before\n/sleep 30\n/text after"))["turn"]["id"]
        # Its first answer is completed (and so queued for the log) before the sleep.
        await c.wait_for(
            lambda e: (
                e.get("method") == "item/completed" and e["params"]["item"].get("text") == "before"
            )
        )
        params = {"threadId": tid, "includeTurns": True}
        for _ in range(50):  # until the background flush has written the turn's start
            turns = (await c.call(method, params))["thread"]["turns"]
            if len(turns) == 2:
                break
            await trio.sleep(0.01)
        assert [t["id"] for t in turns] == [first, running]
        assert [t["status"] for t in turns] == ["completed", "inProgress"]

        await c.call("turn/interrupt", {"threadId": tid, "turnId": running})
        done, _ = await c.collect_turn(running)
        assert done["params"]["turn"]["status"] == "interrupted"
        turns = (await c.call(method, params))["thread"]["turns"]
        assert [t["status"] for t in turns] == ["completed", "interrupted"]
