"""Start-up as a client sees it: `initialize` is answered before the engine has loaded
(server/handshake.py), and nothing a client does around that moment may be lost or behave
differently from a server that was already running."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import trio

from tests.support.client import running_server

INIT = {"clientInfo": {"name": "tests", "version": "0"}}


async def test_requests_pipelined_behind_initialize(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    """initialize, initialized, thread/start and thread/list in one write, before the server
    has read anything: every request is answered, and the opt-out given in `initialize`
    already holds for the first thread."""
    async with running_server(nursery, home) as srv:
        waiters = {rid: srv.expect(rid, m) for rid, m in ((1, "initialize"), (2, "thread/start"))}
        list_waiter = srv.expect(3, "thread/list")
        lines = [
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    **INIT,
                    "capabilities": {"optOutNotificationMethods": ["thread/started"]},
                },
            },
            {"method": "initialized"},
            {
                "id": 2,
                "method": "thread/start",
                "params": {"modelProvider": "mock", "cwd": str(workdir)},
            },
            {"id": 3, "method": "thread/list", "params": {}},
        ]
        await srv.send_raw(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
        with trio.fail_after(30):
            init = await waiters[1].receive()
            started = await waiters[2].receive()
            listed = await list_waiter.receive()
        assert init["result"]["serverInfo"]["name"] == "threadline"
        tid = started["result"]["thread"]["id"]
        assert [t["id"] for t in listed["result"]["data"]] == [tid]
        # A turn proves the thread works; thread/started never arrived (opted out).
        turn = await srv.call(
            "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "hi"}]}
        )
        await srv.wait_for(
            lambda e: (
                e.get("method") == "turn/completed"
                and e["params"]["turn"]["id"] == turn["turn"]["id"]
            )
        )
    methods = [m.get("method") for m in srv.all_messages if isinstance(m, dict)]
    assert "thread/started" not in methods
    assert "turn/started" in methods
    # initialize's answer came first (requests after it run concurrently, in any order).
    ids = [m["id"] for m in srv.all_messages if isinstance(m, dict) and "result" in m]
    assert ids[0] == 1 and sorted(ids[:3]) == [1, 2, 3]


async def test_a_bad_first_line_is_answered_by_the_engine(
    nursery: trio.Nursery, home: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.send_raw(b"{not json\n")
        error = await srv.wait_for(lambda e: "error" in e)
        assert error["error"]["code"] == -32700 and error["id"] is None
        assert (await srv.error("thread/list", {}))["message"] == "Not initialized"
        result = await srv.call("initialize", INIT)
        assert result["serverInfo"]["name"] == "threadline"


async def test_signals_before_and_right_after_initialize_exit_cleanly(
    nursery: trio.Nursery, home: Path
) -> None:
    """SIGTERM/SIGINT/SIGHUP while waiting for the first line, or while the engine loads
    after the early answer, end the server cleanly (exit 0), as they do later on."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        async with running_server(nursery, home) as srv:
            await trio.sleep(0.3)  # waiting for its first line
            srv.signal(signum)
            assert await srv.wait(10) == 0, srv.stderr_text[-2000:]
        async with running_server(nursery, home) as srv:
            await srv.initialize()
            srv.signal(signum)  # most likely still loading the engine
            assert await srv.wait(10) == 0, srv.stderr_text[-2000:]
            assert "Traceback" not in srv.stderr_text
