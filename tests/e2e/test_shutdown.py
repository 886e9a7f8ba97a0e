"""stdin EOF or SIGTERM in the middle of a streaming turn, with the real CLIs whose process
outlives a turn (claude's stream mode, codex app-server) and a per-turn one (claude's print
mode): threadline exits 0 after telling the client the turn was interrupted, no process
started for the test is left, the turn is stored `interrupted`, and the next server resumes
the thread and carries the conversation on (how fast is benchmarks/p8_shutdown.py's)."""

from __future__ import annotations

import signal
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.codex_env import CodexEnv
from tests.fakes import anthropic, openai_responses
from tests.support.cli_env import CliEnv
from tests.support.client import assert_items_balanced
from tests.support.events import is_method, status, turn

pytestmark = pytest.mark.e2e

STALL_MS = 60_000  # the answer stalls "forever" after its first delta
STALLED = "A partial answer that never ends."
HOWS = ["eof", "sigterm"]


async def stop_mid_turn(env: CliEnv[Any], nursery: trio.Nursery, mode: str, how: str) -> str:
    """A turn streams; the server is stopped by `how`. Returns the thread id."""
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": mode})
        turn_id = await srv.start_turn(tid, "stall here")
        seen: list[Any] = []
        await srv.wait_for(is_method("item/agentMessage/delta"), timeout=60, seen=seen)
        if how == "eof":
            await srv.close_stdin()
        else:
            srv.signal(signal.SIGTERM)
        done = await srv.wait_method("turn/completed", timeout=30, seen=seen)
        assert done["params"]["turn"]["id"] == turn_id
        assert status(done["params"]["turn"]) == "interrupted", done
        assert_items_balanced(seen)
        assert await srv.wait(30) == 0, srv.stderr_text[-2000:]
    assert await env.wait_no_leftovers(10) == [], "processes left after the shutdown"
    return tid


async def resume_after_restart(env: CliEnv[Any], nursery: trio.Nursery, tid: str) -> None:
    """The next server has the interrupted turn on record and continues the thread."""
    async with env.server(nursery) as srv:
        await srv.initialize()
        read = await srv.call("thread/read", {"threadId": tid, "includeTurns": True})
        [stored] = read["thread"]["turns"]
        assert stored["status"] == "interrupted", stored
        await srv.call("thread/resume", {"threadId": tid})
        t, _ = await turn(srv, tid, "after the restart")
        assert status(t) == "completed", t


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("mode", ["stream", "print"])
async def test_claude_shutdown_mid_turn(
    nursery: trio.Nursery, claude_env: ClaudeEnv, mode: str, how: str
) -> None:
    env = claude_env
    stall = anthropic.Step([anthropic.Text(STALLED)], stall_after_first_delta_ms=STALL_MS)
    env.script(
        anthropic.Rule("stall here", [stall]), anthropic.Rule("after the restart", ["Resumed."])
    )
    tid = await stop_mid_turn(env, nursery, mode, how)
    await resume_after_restart(env, nursery, tid)
    # claude resumed its own conversation: the interrupted turn's message is in it
    texts = [
        b.get("text", "") if isinstance(b, dict) else str(b)
        for m in env.fake.messages()
        if m.get("role") == "user"
        for b in (m["content"] if isinstance(m["content"], list) else [m["content"]])
    ]
    assert any("stall here" in t for t in texts), texts


@pytest.mark.parametrize("how", HOWS)
async def test_codex_app_server_shutdown_mid_turn(
    nursery: trio.Nursery, codex_env: CodexEnv, how: str
) -> None:
    env = codex_env
    stall = openai_responses.Step(
        [openai_responses.Text(STALLED)], stall_after_first_delta_ms=STALL_MS
    )
    env.script(
        openai_responses.Rule("stall here", [stall]),
        openai_responses.Rule("after the restart", ["Resumed."]),
    )
    tid = await stop_mid_turn(env, nursery, "app-server", how)
    await resume_after_restart(env, nursery, tid)
