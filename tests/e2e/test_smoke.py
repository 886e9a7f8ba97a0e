from __future__ import annotations

from pathlib import Path

import trio

from tests.support.client import running_server


async def test_streamed_turn(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        started = await srv.call("thread/start", {"modelProvider": "mock", "cwd": str(workdir)})
        tid = started["thread"]["id"]
        done, events = await srv.run_turn(tid, "/reason hmm\n/text hello world")
        assert done["params"]["turn"]["status"] == "completed", events
        methods = [e["method"] for e in events]
        print(methods)
        deltas = "".join(
            e["params"]["delta"] for e in events if e["method"] == "item/agentMessage/delta"
        )
        assert deltas == "hello world"
