"""The engine's side of the control surface, on a scripted backend: how `turn/start` overrides
go by the mode's declared support (live, reopen, warning), injected history delivered once and
kept across a restart until then, and the refusals of steer and fork where a mode cannot."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.inproc import InProcClient, inproc_server
from tests.support.test_backend import ScriptedBackend
from threadline.backends import base as b
from threadline.server.config import ServerConfig

EARLIER = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    {"type": "message", "role": "assistant", "content": "The code name is HERON."},
]


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def config() -> ServerConfig:
    return ServerConfig(default_backend="test", interrupt_grace=0.2)


async def run(c: InProcClient, tid: str, text: str = "hello", **params: Any) -> list[Any]:
    done, events = await c.run_turn(tid, text, **params)
    assert done["params"]["turn"]["status"] == "completed", done
    return events


def warnings(events: list[Any]) -> list[str]:
    return [e["params"]["message"] for e in events if e.get("method") == "warning"]


async def test_unsupported_overrides_warn_and_change_nothing(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        await run(c, tid)
        events = await run(c, tid, effort="high", summary="auto", cwd=str(tmp_path))
        said = warnings(events)
        assert len(said) == 3, said
        assert all("cannot be applied on the test backend (default mode)" in w for w in said)
        assert backend.reconfigured == [] and backend.sessions_opened == 1
        seen = backend.sessions[-1].settings
        assert (seen.effort, seen.summary, seen.cwd) == (None, None, "/tmp")
        read = await c.call("thread/read", {"threadId": tid})
        assert read["thread"]["cwd"] == "/tmp"


async def test_live_overrides_reconfigure_the_session_and_others_reopen_it(
    tmp_path: Path,
) -> None:
    backend = ScriptedBackend()
    backend.overrides = {"effort": "native", "cwd": "restart"}
    backend.live_fields = frozenset({"effort"})
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        await run(c, tid)
        events = await run(c, tid, effort="low")
        assert not warnings(events)
        assert backend.reconfigured == [frozenset({"effort"})]
        assert backend.sessions_opened == 1 and backend.sessions[0].settings.effort == "low"
        await run(c, tid, effort="low", cwd=str(tmp_path))  # the same effort: not a change
        assert backend.reconfigured[-1] == frozenset({"cwd"})
        assert backend.sessions_opened == 2
        reopened = backend.settings_seen[-1]
        assert (reopened.cwd, reopened.effort, reopened.resumed) == (str(tmp_path), "low", True)
    # Stored: a new server resumes the thread with them.
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        await c.call("thread/resume", {"threadId": tid})
        await run(c, tid)
        resumed = backend.settings_seen[-1]
        assert (resumed.cwd, resumed.effort) == (str(tmp_path), "low")


async def test_injected_history_waits_across_a_restart_and_goes_once(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        await c.call("thread/inject_items", {"threadId": tid, "items": EARLIER})
        await c.call("thread/inject_items", {"threadId": tid, "items": EARLIER[:1]})
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        await c.call("thread/resume", {"threadId": tid})
        events = await run(c, tid, "next question")
        first = backend.turn_inputs[-1]
        assert first.text.count("The code name is HERON.") == 1
        assert first.text.count("User: Hi") == 2  # both batches, in order
        assert first.text.endswith("next question")
        [user] = [
            e["params"]["item"]
            for e in events
            if e.get("method") == "item/completed" and e["params"]["item"]["type"] == "userMessage"
        ]
        assert user["content"] == [{"type": "text", "text": "next question"}]
        await run(c, tid, "then")
        assert backend.turn_inputs[-1].text == "then"


async def test_steer_and_fork_are_refused_where_the_mode_cannot(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    started = trio.Event()

    async def script(ctx: b.TurnContext, turn: b.TurnInput, session: Any) -> None:
        started.set()
        await trio.sleep(0.3)

    backend.script = script
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread()
        result = await c.start_turn(tid, "long")
        turn_id = result["turn"]["id"]
        await started.wait()
        params = {
            "threadId": tid,
            "expectedTurnId": turn_id,
            "input": [{"type": "text", "text": "x"}],
        }
        error = await c.call_error("turn/steer", params)
        assert error["code"] == -32600 and "cannot add input to a running turn" in error["message"]
        busy = await c.call_error("thread/fork", {"threadId": tid})
        assert busy["code"] == -32600 and "in progress" in busy["message"]
        await c.collect_turn(turn_id)
        refused = await c.call_error("thread/fork", {"threadId": tid})
        assert refused["code"] == -32600 and "cannot fork" in refused["message"]
        compact = await c.call_error("thread/compact/start", {"threadId": tid})
        assert compact["code"] == -32600 and "cannot compact" in compact["message"]
        listed = await c.call("thread/loaded/list", {})
        assert listed["data"] == [tid]  # nothing was created


async def test_fork_opens_a_fork_of_the_cli_session(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.forkable = True
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        tid = await c.start_thread(model="m")
        await run(c, tid)
        forked = await c.call("thread/fork", {"threadId": tid})
        fork = forked["thread"]["id"]
        backend.session_id = "cli-session-2"
        await run(c, fork)
        opened = backend.settings_seen[-1]
        assert (opened.thread_id, opened.fork_of, opened.backend_session_id) == (
            fork,
            "cli-session-1",
            None,
        )
        assert opened.model == "m" and opened.resumed
    # Once the fork's own session exists, it resumes that one, not another fork.
    async with inproc_server({"test": backend}, tmp_path, config=config()) as c:
        await c.call("thread/resume", {"threadId": fork})
        await run(c, fork)
        again = backend.settings_seen[-1]
        assert (again.fork_of, again.backend_session_id) == (None, "cli-session-2")
