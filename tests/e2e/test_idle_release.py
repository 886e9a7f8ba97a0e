"""The idle policy with the real `claude` CLI (against the fake Anthropic API): a thread with no
turn for `THREADLINE_IDLE_TIMEOUT` seconds loses its CLI process but stays loaded; the next
turn reopens the CLI on the same conversation — the model sees the history, the role bootstrap
is not sent again — and an `acceptForSession` grant still holds (threadline decides it: the
new CLI process does not know it)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv, claude_pid, wait_claude_pid
from tests.e2e.qwen_env import QwenEnv
from tests.e2e.qwen_env import acp_pids as qwen_pids
from tests.fakes.anthropic import RecordedRequest, Rule, ToolUse
from tests.fakes.openai_chat import Rule as ChatRule
from tests.support.client import Message, ServerProcess, notifications
from tests.support.events import agent_text, items_completed, status, turn

pytestmark = pytest.mark.e2e

ROLE = "You are the IDLE-9 role: answer in one line."


def user_texts(request: RecordedRequest) -> list[str]:
    out: list[str] = []
    for m in request.messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [b.get("text", "") for b in blocks or [] if b.get("type") == "text"]
    return out


async def wait_released(srv: ServerProcess, pid: int) -> None:
    """Until the thread's claude process `pid` has exited (the idle policy stopped it)."""
    with trio.fail_after(20):
        while os.path.exists(f"/proc/{pid}") and claude_pid(srv) == pid:  # noqa: ASYNC110
            await trio.sleep(0.1)


async def test_an_idle_thread_releases_its_cli_and_resumes(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    bash = ToolUse("Bash", {"command": "touch granted.txt", "description": "Touch the file"})
    env.script(
        Rule("remember the word", [bash, "Noted: PAPAYA."]),
        Rule("which word", [bash, "It was PAPAYA."]),
    )
    asked: list[Message] = []

    def grant(message: Message) -> Any:
        asked.append(message)
        return {"decision": "acceptForSession"}

    on_request: Callable[[Message], Any] = grant
    async with env.server(nursery, THREADLINE_IDLE_TIMEOUT="1") as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA", on_request)
        assert status(t1) == "completed" and len(asked) == 1
        first = await wait_claude_pid(srv)
        await wait_released(srv, first)
        assert claude_pid(srv) is None
        # still loaded, idle, and the next turn needs no thread/resume
        assert tid in (await srv.call("thread/loaded/list", {}))["data"]
        read = await srv.call("thread/read", {"threadId": tid})
        assert read["thread"]["status"] == {"type": "idle"}

        t2, events = await turn(srv, tid, "which word was it?", on_request)
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA."
        assert len(asked) == 1  # the session grant held across the new CLI process
        [decided] = notifications(events, "item/approval/autoDecided")
        assert decided["params"]["decision"] == "accept", decided
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed", cmd
        assert await wait_claude_pid(srv) != first

    after = [r for r in env.fake.model_requests if "which word" in str(r.messages)][-1]
    assert "remember the word PAPAYA" in user_texts(after)  # the conversation went on
    assert ROLE in after.system_text
    assert user_texts(after).count(ROLE) == 1  # turn 1's bootstrap, in the history only


async def test_a_shared_acp_agent_goes_with_its_last_released_thread(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    """Two threads in one directory share one `qwen --acp` agent; once the idle policy has
    released both, the agent stops at once (it does not linger for a next thread), and the
    next turn resumes its thread on a new agent."""
    env = qwen_env
    env.script(
        ChatRule("alpha", ["Alpha."]), ChatRule("beta", ["Beta."]), ChatRule("again", ["Again."])
    )
    async with env.server(nursery, THREADLINE_IDLE_TIMEOUT="1") as srv:
        a = await env.open_thread(srv)
        b = await srv.start_thread(env.work, modelProvider="qwen")
        for tid, word in ((a, "alpha"), (b, "beta")):
            t, _ = await turn(srv, tid, word)
            assert status(t) == "completed", t
        [agent] = qwen_pids(srv)
        await env.wait_until(
            lambda: srv.stderr_text.count("stopping its CLI") == 2, "both threads released"
        )
        await env.wait_until(lambda: not qwen_pids(srv), "the agent gone", timeout=10)
        t, events = await turn(srv, a, "again")
        assert status(t) == "completed" and agent_text(events) == "Again.", t
        assert "alpha" in "\n".join(env.fake.user_texts(-1))
        assert qwen_pids(srv) not in ([], [agent])
