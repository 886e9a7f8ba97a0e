"""Adopting sessions started outside threadline: the real CLI is run directly (`claude -p`,
`codex exec`, `gemini -p`) against its fake model server, then threadline lists it (`thread/list`
with `source: "native"`) and binds a thread to it (`thread/resume` by `backendSessionId`,
`latest` or `path`); the next turn's model request carries the earlier conversation, and the
role bootstrap is not sent into a chat that has one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.codex_env import CodexEnv
from tests.e2e.gemini_env import MODEL, GeminiEnv
from tests.e2e.opencode_env import OpenCodeEnv
from tests.e2e.qwen_env import QwenEnv
from tests.fakes.anthropic import Rule
from tests.fakes.gemini import Rule as GeminiRule
from tests.fakes.openai_chat import Rule as ChatRule
from tests.fakes.openai_responses import Rule as CodexRule
from tests.support.cli_env import CliEnv
from tests.support.events import agent_text, status, turn
from threadline.client import spawn

pytestmark = pytest.mark.e2e

ROLE = "You are the ADOPTER-3 role: answer in one line."


async def run_cli(env: CliEnv[Any], *args: str) -> None:
    """Run the CLI itself in the work dir, as a person would (a shell sets PWD)."""
    shell_env = {**os.environ, **env.env(), "PWD": str(env.work)}
    result = await trio.run_process(
        [str(env.cli), *args], cwd=env.work, env=shell_env, capture_stdout=True
    )
    assert result.returncode == 0


async def native(srv: Any, env: CliEnv[Any], **params: Any) -> list[dict[str, Any]]:
    listed = await srv.call(
        "thread/list",
        {"source": "native", "modelProviders": [env.backend], "cwd": str(env.work), **params},
    )
    return listed["data"]  # type: ignore[no-any-return]


def said(response: dict[str, Any]) -> list[list[str]]:
    """The turns an adopted thread was answered with: the text of each message item."""
    return [
        [i["content"][0]["text"] if i["type"] == "userMessage" else i["text"] for i in t["items"]]
        for t in response["thread"]["turns"]
    ]


async def test_claude_sessions_are_listed_and_adopted(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("a second chat", ["Second chat here."]),
        Rule("which word", ["It was PAPAYA."]),
        Rule("still there", ["Yes."]),
    )
    await run_cli(env, "-p", "remember the word PAPAYA")
    await trio.sleep(1.1)  # (the listing is newest first, to the second)
    await run_cli(env, "-p", "a second chat")
    async with env.server(nursery) as srv:
        await srv.initialize()
        second, first = await native(srv, env)
        assert [first["preview"], second["preview"]] == [
            "remember the word PAPAYA",
            "a second chat",
        ]
        assert first["modelProvider"] == "claude" and first["cwd"] == str(env.work)
        assert first["source"] == "exec" and Path(first["path"]).is_file()
        assert first["status"] == {"type": "notLoaded"}
        # a filter that matches nothing, and the search term
        assert await native(srv, env, searchTerm="PAPAYA") == [first]
        assert await native(srv, env, archived=True) == []

        # `latest`: the session of the cwd used last (the second chat)
        latest = await srv.call(
            "thread/resume",
            {
                "modelProvider": "claude",
                "latest": True,
                "cwd": str(env.work),
                "developerInstructions": ROLE,
                "injectRole": True,
            },
        )
        assert latest["thread"]["preview"] == "a second chat"
        t1, events = await turn(srv, latest["thread"]["id"], "still there?")
        assert status(t1) == "completed"

        adopted = await srv.call(
            "thread/resume",
            {
                "modelProvider": "claude",
                "backendSessionId": first["id"],
                "cwd": str(env.work),
                "developerInstructions": ROLE,
            },
        )
        tid = adopted["thread"]["id"]
        assert tid != first["id"] and adopted["thread"]["preview"] == first["preview"]
        # the chat so far is the thread's history
        assert said(adopted) == [["remember the word PAPAYA", "Noted: PAPAYA."]]
        t2, events = await turn(srv, tid, "which word was it?")
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA."
        # binding the same session again resumes the same thread
        again = await srv.call(
            "thread/resume", {"modelProvider": "claude", "backendSessionId": first["id"]}
        )
        assert again["thread"]["id"] == tid
    assert env.thread_record(tid)["backend_session_id"] == first["id"]

    requests = env.fake.model_requests
    [adopted_request] = [r for r in requests if "which word was it?" in r.user_texts]
    # the model sees the chat begun outside threadline, and no role bootstrap was sent into it
    # (claude 2.1.332 resumes a session with the system prompt it began with: the role
    # given to a thread that adopts it does not reach that either)
    assert "remember the word PAPAYA" in adopted_request.user_texts
    assert ROLE not in str(adopted_request.body)
    # injectRole: the bootstrap goes with the adopted chat's first turn
    [latest_request] = [r for r in requests if "still there?" in r.user_texts]
    assert "a second chat" in latest_request.user_texts
    assert "remember the word PAPAYA" not in latest_request.user_texts
    assert sum(ROLE in text for text in latest_request.user_texts) == 1


async def test_python_client_adopts_the_latest_session(claude_env: ClaudeEnv) -> None:
    env = claude_env
    env.script(Rule("remember the word", ["Noted: QUINCE."]), Rule("which word", ["QUINCE."]))
    await run_cli(env, "-p", "remember the word QUINCE")
    server_env = {**env.env(), "THREADLINE_HOME": str(env.home)}
    async with spawn(env=server_env, stderr=subprocess.DEVNULL) as client:
        listed = await client.list_threads(source="native", cwd=str(env.work))
        [session] = listed.data
        adopted = await client.adopt_session("claude", latest=True, cwd=str(env.work))
        done = await client.run_turn(adopted.thread.id, "which word was it?")
    assert done.text == "QUINCE."
    record = env.thread_record(adopted.thread.id)
    assert record["backend_session_id"] == session.id


async def test_adoption_errors_say_what_was_looked_for(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    async with env.server(nursery) as srv:
        await srv.initialize()
        missing = "0e5a3c1d-0000-4000-8000-000000000000"
        err = await srv.error(
            "thread/resume", {"modelProvider": "claude", "backendSessionId": missing}
        )
        assert missing in err["message"], err
        err = await srv.error(
            "thread/resume", {"modelProvider": "claude", "latest": True, "cwd": str(env.work)}
        )
        assert str(env.work) in err["message"], err
        err = await srv.error("thread/resume", {"modelProvider": "claude"})
        assert err["code"] == -32602 and "backendSessionId" in err["message"], err
        # the server keeps serving
        assert await native(srv, env) == []


async def test_codex_exec_session_adopted_by_rollout_path(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        CodexRule("remember the word", ["Noted: GUAVA."]),
        CodexRule("which word", ["It was GUAVA."]),
    )
    await run_cli(env, "exec", "--skip-git-repo-check", "remember the word GUAVA")
    async with env.server(nursery) as srv:
        await srv.initialize()
        [session] = await native(srv, env)
        assert session["source"] == "exec" and session["preview"] == "remember the word GUAVA"
        # Codex's own way: `path`, the rollout file (modelProvider found from it)
        adopted = await srv.call("thread/resume", {"threadId": "", "path": session["path"]})
        tid = adopted["thread"]["id"]
        assert adopted["modelProvider"] == "codex"
        assert said(adopted) == [["remember the word GUAVA", "Noted: GUAVA."]]
        t1, events = await turn(srv, tid, "which word was it?")
        assert status(t1) == "completed" and agent_text(events) == "It was GUAVA."
    last = env.fake.model_requests[-1]
    assert "remember the word GUAVA" in last.user_texts and "which word was it?" in last.user_texts


async def test_gemini_headless_session_adopted_as_latest(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    env.script(
        GeminiRule("remember the word", ["Noted: LYCHEE."]),
        GeminiRule("which word", ["It was LYCHEE."]),
    )
    await run_cli(env, "-p", "remember the word LYCHEE", "-m", MODEL)
    async with env.server(nursery) as srv:
        await srv.initialize()
        [session] = await native(srv, env)
        assert session["preview"] == "remember the word LYCHEE"
        # (gemini wipes a session loaded in the minute its file was begun: reference §7.6)
        env.age_session(session["id"])
        adopted = await srv.call(
            "thread/resume",
            {"modelProvider": "gemini", "latest": True, "cwd": str(env.work)},
        )
        assert said(adopted) == [["remember the word LYCHEE", "Noted: LYCHEE."]]
        t1, events = await turn(srv, adopted["thread"]["id"], "which word was it?")
        assert status(t1) == "completed" and agent_text(events) == "It was LYCHEE."
        # and the turn joins it
        read = await srv.call(
            "thread/read", {"threadId": adopted["thread"]["id"], "includeTurns": True}
        )
        assert said(read)[-1] == ["which word was it?", "It was LYCHEE."]
    last = env.fake.model_requests[-1]
    assert "remember the word LYCHEE" in last.user_texts and "which word was it?" in last.user_texts


async def test_opencode_run_session_adopted_by_id(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    env.script(
        ChatRule("remember the word", ["Noted: FIG."]),
        ChatRule("which word", ["It was FIG."]),
    )
    await run_cli(env, "run", "remember the word FIG")
    async with env.server(nursery) as srv:
        await srv.initialize()
        [session] = await native(srv, env)
        assert session["preview"] == "remember the word FIG"
        adopted = await srv.call(
            "thread/resume", {"modelProvider": "opencode", "backendSessionId": session["id"]}
        )
        assert said(adopted) == [['"remember the word FIG"', "Noted: FIG."]]
        t1, events = await turn(srv, adopted["thread"]["id"], "which word was it?")
        assert status(t1) == "completed" and agent_text(events) == "It was FIG."
    last = env.fake.model_requests[-1]
    # (`opencode run` keeps its message argument in quotes)
    assert any("remember the word FIG" in text for text in last.user_texts[:-1])
    assert last.user_texts[-1] == "which word was it?"


async def test_qwen_headless_session_adopted_by_path(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        ChatRule("remember the word", ["Noted: PLUM."]),
        ChatRule("which word", ["It was PLUM."]),
    )
    await run_cli(env, "-p", "remember the word PLUM")
    async with env.server(nursery) as srv:
        await srv.initialize()
        [session] = await native(srv, env)
        assert session["preview"] == "remember the word PLUM"
        adopted = await srv.call(
            "thread/resume", {"modelProvider": "qwen", "path": session["path"]}
        )
        assert said(adopted) == [["remember the word PLUM", "Noted: PLUM."]]
        t1, events = await turn(srv, adopted["thread"]["id"], "which word was it?")
        assert status(t1) == "completed" and agent_text(events) == "It was PLUM."
    last = env.fake.model_requests[-1]
    assert last.user_texts[0].endswith("remember the word PLUM")  # (after qwen's reminders)
    assert last.user_texts[-1] == "which word was it?"
