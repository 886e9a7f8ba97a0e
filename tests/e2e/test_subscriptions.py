"""`thread/unsubscribe` (Codex's statuses): on stdio the thread's notifications stop until the
client resumes it; over a listener the connection is detached — no notifications, no server
requests — while other connections and the turn go on."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.support.client import running_server
from tests.support.ws_client import listening_server, ws_connect

pytestmark = pytest.mark.e2e

UNKNOWN = "00000000-0000-4000-8000-000000000002"


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


async def test_unsubscribe_on_stdio(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        await srv.wait_method("thread/started")
        unsubscribe = {"threadId": tid}
        assert (await srv.call("thread/unsubscribe", unsubscribe))["status"] == "unsubscribed"
        assert (await srv.call("thread/unsubscribe", unsubscribe))["status"] == "notSubscribed"
        gone = {"threadId": UNKNOWN}
        assert (await srv.call("thread/unsubscribe", gone))["status"] == "notLoaded"
        await srv.start_turn(tid, "/text unheard")
        with trio.move_on_after(1):
            event = await srv.next_event()
            raise AssertionError(f"a notification of an unsubscribed thread: {event}")
        read = await srv.call("thread/read", {"threadId": tid, "includeTurns": True})
        assert read["thread"]["turns"][0]["status"] == "completed"
        await srv.call("thread/resume", {"threadId": tid})
        done, _ = await srv.run_turn(tid, "/text heard again")
        assert done["params"]["turn"]["status"] == "completed"


async def test_unsubscribe_detaches_a_connection(home: Path, workdir: Path) -> None:
    async with (
        listening_server(home, "ws://127.0.0.1:0") as srv,
        ws_connect(srv.url) as a,
        ws_connect(srv.url) as b,
    ):
        await a.initialize()
        await b.initialize()
        params = {"modelProvider": "mock", "cwd": str(workdir)}
        tid = (await a.call("thread/start", params))["thread"]["id"]
        await b.call("thread/resume", {"threadId": tid})
        assert (await b.call("thread/unsubscribe", {"threadId": tid}))["status"] == "unsubscribed"
        again = await b.call("thread/unsubscribe", {"threadId": tid})
        assert again["status"] == "notSubscribed"
        prompt = f"/run touch {workdir}/ok\n/text done"
        await a.call("turn/start", {"threadId": tid, "input": text(prompt)})
        request = await a.wait_for("item/commandExecution/requestApproval")
        await a.send({"id": request["id"], "result": {"decision": "accept"}})
        assert (await a.wait_for("turn/completed"))["params"]["turn"]["status"] == "completed"
        with trio.move_on_after(0.5):
            event = await b.events.receive()
            raise AssertionError(f"b unsubscribed, yet got {event}")


UNLOAD = {"THREADLINE_UNLOAD_AFTER": "1"}


async def test_an_unfollowed_thread_is_unloaded_on_stdio(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home, UNLOAD) as srv:
        await srv.initialize()
        kept = await srv.start_thread(workdir)
        tid = await srv.start_thread(workdir)
        done, _ = await srv.run_turn(tid, "/text before")
        assert done["params"]["turn"]["status"] == "completed"
        await srv.call("thread/unsubscribe", {"threadId": tid})
        with trio.fail_after(10):
            closed = await srv.wait_method("thread/closed")
        assert closed["params"] == {"threadId": tid}
        assert (await srv.call("thread/loaded/list", {}))["data"] == [kept]
        read = await srv.call("thread/read", {"threadId": tid})
        assert read["thread"]["status"] == {"type": "notLoaded"}
        assert (await srv.call("thread/unsubscribe", {"threadId": tid}))["status"] == "notLoaded"
        await srv.call("thread/resume", {"threadId": tid})
        done, _ = await srv.run_turn(tid, "/history")
        assert "before" in done["params"]["turn"]["items"][-1]["text"]


async def test_a_thread_stays_loaded_while_followed_or_running(home: Path, workdir: Path) -> None:
    async with (
        listening_server(home, "ws://127.0.0.1:0", env=UNLOAD) as srv,
        ws_connect(srv.url) as a,
        ws_connect(srv.url) as b,
    ):
        await a.initialize()
        await b.initialize()
        params = {"modelProvider": "mock", "cwd": str(workdir)}
        followed = (await a.call("thread/start", params))["thread"]["id"]
        running = (await a.call("thread/start", params))["thread"]["id"]
        await a.call("turn/start", {"threadId": running, "input": text("/sleep 3\n/text late")})
        await a.wait_for("turn/started")
        await a.call("thread/unsubscribe", {"threadId": running})
        # Nobody follows `running` now, but its turn goes on: it is unloaded only after it.
        with trio.fail_after(15):
            closed = await b.wait_for("thread/closed")
        assert closed["params"] == {"threadId": running}
        read = await b.call("thread/read", {"threadId": running, "includeTurns": True})
        assert read["thread"]["turns"][-1]["status"] == "completed"
        async with ws_connect(srv.url) as c:  # a connection that leaves unsubscribes
            await c.initialize()
            left = (await c.call("thread/start", params))["thread"]["id"]
        with trio.fail_after(15):
            closed = await b.wait_for("thread/closed")
        assert closed["params"] == {"threadId": left}
        loaded = (await b.call("thread/loaded/list", {}))["data"]
        assert loaded == [followed]
