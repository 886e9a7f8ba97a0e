"""Gemini CLI's tui mode end to end: the real interactive `gemini` in a tmux session that
threadline owns, driven through the protocol, against the scripted fake Gemini API.

What a client sees (items, approvals, turn status), what a person attached to the tmux session
sees (`capture-pane`), and what really happened (files, processes, what the model was sent).
The fixture's orphan check covers the tmux server and every process in its panes (they carry
the test's marker variable).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from tests.e2e.gemini_env import GeminiEnv
from tests.fakes.gemini import HttpError, Rule, ShellCommand, Step, Text, Thought
from tests.support.cli_env import cmdline
from tests.support.client import Message, ServerProcess, assert_items_balanced, notifications
from tests.support.events import (
    agent_text,
    items_completed,
    items_started,
    no_requests,
    requests_in,
    status,
    turn,
)
from tests.support.tui import answer, screen, tmux, tmux_servers

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("tmux")]


ROLE = "ROLE-MARKER-7: you are the reviewer; answer in one line."
SLEEPER = "touch sleeper-started.txt && sleep 300 && touch sleeper-finished.txt"


async def open_tui_thread(env: GeminiEnv, srv: ServerProcess, **params: Any) -> tuple[str, str]:
    """A tui thread; (its id, the tmux socket it runs on)."""
    await srv.initialize()
    result = await srv.call(
        "thread/start",
        {"cwd": str(env.work), "modelProvider": "gemini", "config": {"mode": "tui"}, **params},
    )
    tid = result["thread"]["id"]
    return tid, f"threadline-{srv.pid}"


def gemini_argv(env: GeminiEnv) -> list[str] | None:
    """The argv of the test's running gemini (by the marker in its environment)."""
    for pid in env.leftovers():
        argv = cmdline(pid)
        if "--approval-mode" in argv and any("gemini" in a for a in argv[:2]):
            return argv
    return None


# -- a turn, what the pane shows, the role; approvals -----------------------------------------


async def test_turn_text_role_and_approvals(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    env = gemini_env
    env.script(
        Rule(
            "first question",
            [
                Step(
                    [
                        Thought("**Weighing it**\n\nSix times seven."),
                        Text("The answer is forty-two."),
                    ]
                )
            ],
        ),
        Rule(
            "please accept",
            [
                Step(
                    [
                        Text("Creating it."),
                        ShellCommand("touch accepted.txt && echo made-it ci=$CI"),
                    ]
                ),
                "Created it.",
            ],
        ),
        Rule("please decline", [ShellCommand("touch declined.txt"), "Understood, not created."]),
    )
    seen: list[Message] = []
    # (gemini takes CI=true as headless: the tui mode still runs it interactive, CI still set)
    async with env.server(nursery, CI="true", GITHUB_ACTIONS="true") as srv:
        t0 = time.monotonic()
        tid, socket = await open_tui_thread(env, srv, developerInstructions=ROLE)
        env.timings["thread/start (gemini in tmux, ready)"] = time.monotonic() - t0
        t1, events = await turn(srv, tid, "first question")
        assert status(t1) == "completed", t1.get("error")
        assert agent_text(events) == "The answer is forty-two."
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["**Weighing it** Six times seven."], reasoning
        [usage] = notifications(events, "thread/tokenUsage/updated")
        last = usage["params"]["tokenUsage"]["last"]
        assert last["inputTokens"] > 0 and last["outputTokens"] > 0, usage
        shown = screen(socket, tid)
        assert "first question" in shown and "forty-two" in shown, shown
        assert env.thread_record(tid)["role_bootstrap_applied"] is True

        t, events = await turn(srv, tid, "please accept", answer("accept", seen))
        assert status(t) == "completed", t
        [request] = requests_in(events)
        assert request["method"] == "item/commandExecution/requestApproval", request
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed", cmd
        assert "made-it ci=1" in (cmd.get("aggregatedOutput") or ""), cmd
        assert (env.work / "accepted.txt").exists()
        # a message comes when its model response ends, before the calls it announced
        kinds = [i["type"] for i in items_started(events)]
        assert kinds == ["userMessage", "agentMessage", "commandExecution", "agentMessage"], kinds
        [before, after] = items_completed(events, "agentMessage")
        assert (before["text"], after["text"]) == ("Creating it.", "Created it."), events

        t, events = await turn(srv, tid, "please decline", answer("decline", seen))
        assert status(t) == "completed", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (env.work / "declined.txt").exists()
        assert_items_balanced(events)
    assert ROLE in str(env.fake.model_requests[0].body)


# -- interrupt; a prompt typed in the tmux session ---------------------------------------------


async def test_interrupt_and_typed_prompt(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    env = gemini_env
    env.script(
        Rule("run the sleeper", [ShellCommand(SLEEPER), "Not reached."]),
        Rule("typed by a person", ["Answered in the TUI."]),
    )
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv, approvalPolicy="never")
        turn_id = await srv.start_turn(tid, "run the sleeper")
        await env.wait_until(
            lambda: (env.work / "sleeper-started.txt").exists(), "the sleeper", timeout=30
        )
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        seen: list[Any] = []
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        await env.wait_until(lambda: not env.sleepers(300), "the sleeper gone", timeout=5)

        await trio.sleep(1.0)
        tmux(socket, "send-keys", "-t", tid, "-l", "typed by a person")
        await env.wait_until(lambda: "typed by a person" in screen(socket, tid), "typing")
        await trio.sleep(0.3)
        tmux(socket, "send-keys", "-t", tid, "Enter")
        seen = []
        await srv.wait_for(lambda e: e.get("method") == "turn/started", seen=seen)
        done = await srv.wait_for(lambda e: e.get("method") == "turn/completed", seen=seen)
        assert done["params"]["turn"]["status"] == "completed", done
        assert agent_text(seen) == "Answered in the TUI."


async def test_api_error_fails_the_turn(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """gemini ends a turn whose API call failed as any other (its `AfterAgent`); the error it
    recorded in its chat record fails the turn, with what to do, and the next turn runs."""
    env = gemini_env
    env.script(
        Rule("refused please", [HttpError(401, "invalid key (injected)")]),
        Rule("afterwards", ["Fine again."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        t, events = await turn(srv, tid, "refused please")
        assert status(t) == "failed", t
        assert t["error"]["codexErrorInfo"] == "unauthorized", t["error"]
        assert "refused the credentials (HTTP 401" in t["error"]["message"], t["error"]
        assert agent_text(events) == ""
        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed", t.get("error")
        assert agent_text(events) == "Fine again."


# -- resume after a restart; nothing left behind ---------------------------------------------


async def test_resume_after_restart(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    env = gemini_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert status(t1) == "completed"
    assert await env.wait_no_leftovers() == []
    assert tmux_servers(socket) == []
    sid = env.thread_record(tid)["backend_session_id"]
    env.age_session(sid)  # (resumed in a later minute: gemini must not delete it)
    async with env.server(nursery) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        t2, events = await turn(srv, tid, "which word was it?")
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA.", (
            t2.get("error") or {}
        ).get("additionalDetails")
        argv = gemini_argv(env)
        assert argv is not None and argv[argv.index("--resume") + 1] == sid, argv
    assert "remember the word PAPAYA" in str(env.fake.model_requests[-1].body)
