"""Qwen Code's tui mode end to end: the real interactive `qwen` in a tmux session that
threadline owns, driven through the protocol, against the scripted fake Chat Completions API.

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

from tests.e2e.qwen_env import PRINTING_COMMAND, SLEEP_NOTE, QwenEnv, shell_call, write_file_call
from tests.fakes.openai_chat import HttpError, RecordedRequest, Rule, Step, Text
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
SLEEPER = f"touch sleeper-started.txt && sleep 300 && touch sleeper-finished.txt {SLEEP_NOTE}"


async def open_tui_thread(env: QwenEnv, srv: ServerProcess, **params: Any) -> tuple[str, str]:
    """A tui thread; (its id, the tmux socket it runs on)."""
    await srv.initialize()
    result = await srv.call(
        "thread/start",
        {"cwd": str(env.work), "modelProvider": "qwen", "config": {"mode": "tui"}, **params},
    )
    tid = result["thread"]["id"]
    return tid, f"threadline-{srv.pid}"


def human_texts(request: RecordedRequest) -> str:
    """What the user said in the conversation the model was sent (without qwen's own
    `<system-reminder>` parts)."""
    out = []
    for message in request.messages:
        content = message.get("content")
        if message.get("role") != "user":
            continue
        parts = [{"text": content}] if isinstance(content, str) else content or []
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and not text.startswith("<system-reminder>"):
                out.append(text)
    return "\n".join(out)


def qwen_argv(env: QwenEnv) -> list[str] | None:
    """The argv of the test's running qwen (by the marker in its environment)."""
    for pid in env.leftovers():
        argv = cmdline(pid)
        if "--json-file" in argv:
            return argv
    return None


# -- a turn, what the pane shows, the role -----------------------------------------------------


async def test_turn_text_screen_and_role(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    env.script(
        Rule("first question", [Step([Text("The answer is forty-two.")], chunk_size=8)]),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        t0 = time.monotonic()
        tid, socket = await open_tui_thread(env, srv, developerInstructions=ROLE)
        env.timings["thread/start (qwen in tmux, ready)"] = time.monotonic() - t0
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, "first question")
        env.timings["first turn"] = time.monotonic() - t0
        assert status(t1) == "completed", t1.get("error")
        assert agent_text(events) == "The answer is forty-two."
        assert len(notifications(events, "item/agentMessage/delta")) >= 2  # streamed
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == "The answer is forty-two."
        assert notifications(events, "thread/tokenUsage/updated")
        shown = screen(socket, tid)  # what a person attached to the session sees
        assert "first question" in shown and "The answer is forty-two." in shown, shown

        t2, events = await turn(srv, tid, "second question")
        assert status(t2) == "completed" and agent_text(events) == "Second answer."
        assert env.thread_record(tid)["role_bootstrap_applied"] is True

    first, second = env.fake.model_requests
    assert human_texts(first).count(ROLE) == 1  # the bootstrap: in the first prompt only
    assert human_texts(second).count(ROLE) == 1  # (turn 1's, in the history)
    assert "second question" in human_texts(second)
    assert tmux_servers(socket) == []


# -- approvals --------------------------------------------------------------------------------


async def test_command_approval_accept_and_decline(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        Rule("please accept", [shell_call(PRINTING_COMMAND), "Created it."]),
        Rule("please decline", [shell_call("touch declined.txt"), "Not reached."]),
        Rule(
            "please write",
            [write_file_call(env.work / "hello.txt", "hello from the tui\n"), "Wrote it."],
        ),
        Rule("afterwards", ["Still fine."]),
    )
    seen: list[Message] = []
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        t, events = await turn(srv, tid, "please accept", answer("accept", seen))
        assert status(t) == "completed", t
        [request] = requests_in(events)
        assert request["method"] == "item/commandExecution/requestApproval", request
        [started] = items_started(events, "commandExecution")
        assert request["params"]["itemId"] == started["id"]
        assert request["params"]["command"] == PRINTING_COMMAND
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["exitCode"] == 0, cmd
        assert (cmd.get("aggregatedOutput") or "").strip() == "made-it", cmd
        assert (env.work / "accepted.txt").exists()
        assert agent_text(events) == "Created it."

        # a declined command: nothing runs, and qwen ends the turn (it does not ask the model)
        t, events = await turn(srv, tid, "please decline", answer("decline", seen))
        assert status(t) == "completed", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert_items_balanced(events)
        assert not (env.work / "declined.txt").exists()

        # a file write: a fileChange approval, the change as a diff
        t, events = await turn(srv, tid, "please write", answer("accept", seen))
        assert status(t) == "completed" and agent_text(events) == "Wrote it.", t
        [request] = requests_in(events)
        assert request["method"] == "item/fileChange/requestApproval", request
        [change] = items_completed(events, "fileChange")
        assert change["status"] == "completed", change
        assert change["changes"][0]["path"] == str(env.work / "hello.txt")
        assert "+hello from the tui" in change["changes"][0]["diff"], change
        assert (env.work / "hello.txt").read_text() == "hello from the tui\n"

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still fine."


# -- interrupt --------------------------------------------------------------------------------


async def test_interrupt_kills_the_running_command(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        Rule("run the sleeper", [shell_call(SLEEPER), "Not reached."]),
        Rule("afterwards", ["Still working fine."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv, approvalPolicy="never")
        turn_id = await srv.start_turn(tid, "run the sleeper")
        await env.wait_until(
            lambda: (env.work / "sleeper-started.txt").exists(), "the sleeper", timeout=30
        )
        await env.wait_until(lambda: bool(env.sleepers(300)), "the sleep runs")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        seen: list[Any] = []
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        env.timings["turn/interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        await env.wait_until(lambda: not env.sleepers(300), "the sleeper gone", timeout=5)
        assert not (env.work / "sleeper-finished.txt").exists()

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine."


# -- interrupts while the model answers and while an approval waits --------------------------


async def test_interrupt_while_answering_and_while_approval_waits(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        Rule(
            "stream",
            [Step([Text("Part one of a long answer.")], stall_after_first_delta_ms=60_000)],
        ),
        Rule("approve", [shell_call("touch never-approved.txt"), "Not reached."]),
        Rule("afterwards", ["Still working fine."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        # -- while the model's answer streams
        turn_id = await srv.start_turn(tid, "stream something")
        await env.wait_until(lambda: len(env.fake.model_requests) == 1, "the model request", 30)
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        seen: list[Any] = []
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        env.timings["turn/interrupt while streaming"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)

        # -- while an approval waits (never answered): declined, nothing runs
        turn_id = await srv.start_turn(tid, "approve this")
        seen = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        assert request["method"] == "item/commandExecution/requestApproval", request
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        [cmd] = items_completed(seen, "commandExecution")
        assert cmd["status"] == "declined", cmd
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})  # too late

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine."
    assert not (env.work / "never-approved.txt").exists()


# -- a turn a person starts in the tmux session ----------------------------------------------


async def test_prompt_typed_in_the_tui_is_a_turn(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    env.script(Rule("typed by a person", ["Answered in the TUI."]))
    async with env.server(nursery) as srv:
        await srv.initialize()
        result = await srv.call(
            "thread/start",
            {"cwd": str(env.work), "modelProvider": "qwen", "config": {"mode": "tui"}},
        )
        tid, tui = result["thread"]["id"], result["thread"]["tui"]
        assert tui["session"] == tid and tui["attach"] == (
            f"tmux -L {tui['socket']} attach -t {tid}"
        ), tui
        # (a person types once the prompt shows: keys sent while qwen still starts are lost)
        await env.wait_until(
            lambda: "Type your message" in screen(tui["socket"], tid), "the prompt", timeout=15
        )
        await trio.sleep(1.0)
        tmux(tui["socket"], "send-keys", "-t", tid, "-l", "typed by a person")
        await env.wait_until(lambda: "typed by a person" in screen(tui["socket"], tid), "typing")
        tmux(tui["socket"], "send-keys", "-t", tid, "Enter")
        seen: list[Any] = []
        started = await srv.wait_for(lambda e: e.get("method") == "turn/started", seen=seen)
        done = await srv.wait_for(lambda e: e.get("method") == "turn/completed", seen=seen)
        assert done["params"]["turn"]["status"] == "completed", done
        assert done["params"]["turn"]["id"] == started["params"]["turn"]["id"]
        assert_items_balanced(seen)
        [user] = items_completed(seen, "userMessage")
        assert "typed by a person" in str(user["content"]), user
        assert agent_text(seen) == "Answered in the TUI."


# -- resume after a restart; nothing left behind ---------------------------------------------


async def test_resume_after_restart_and_nothing_left(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv, developerInstructions=ROLE)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert status(t1) == "completed"
        first_argv = qwen_argv(env)
        assert first_argv is not None and "--session-id" in first_argv, first_argv
    # EOF: the tmux server, qwen and everything it ran are gone
    assert await env.wait_no_leftovers() == []
    assert tmux_servers(socket) == []

    sid = env.thread_record(tid)["backend_session_id"]
    assert first_argv[first_argv.index("--session-id") + 1] == sid
    async with env.server(nursery) as srv:
        await srv.initialize()
        resumed = await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        assert resumed["thread"]["id"] == tid
        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "which word was it?")
        env.timings["first turn after resume (qwen start + --resume)"] = time.monotonic() - t0
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA."
        argv = qwen_argv(env)
        assert argv is not None and argv[argv.index("--resume") + 1] == sid, argv

    _, after = env.fake.model_requests
    assert "remember the word PAPAYA" in human_texts(after)
    assert "Noted: PAPAYA." in str(after.messages)
    assert human_texts(after).count(ROLE) == 1  # the bootstrap is not sent again


# -- a changed model restarts qwen, resuming its conversation; an API error fails the turn ---


async def test_model_change_restarts_qwen_and_api_error_fails(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(
        Rule("first", ["One."]),
        Rule("second", ["Two."]),
        # (first: the next request may carry the failed prompt too)
        Rule("afterwards", ["Fine again."]),
        Rule("auth please", [HttpError(401, "bad fake key")]),
    )
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv)
        t, _ = await turn(srv, tid, "first")
        assert status(t) == "completed"
        sid = env.thread_record(tid)["backend_session_id"]
        params = {
            "threadId": tid,
            "input": [{"type": "text", "text": "second"}],
            "model": "other-model",
        }
        result = await srv.call("turn/start", params)
        done, events = await srv.collect_turn(result["turn"]["id"], timeout=60)
        assert done["params"]["turn"]["status"] == "completed", done
        assert agent_text(events) == "Two."
        argv = qwen_argv(env)
        assert argv is not None and argv[argv.index("--resume") + 1] == sid, argv
        assert argv[argv.index("--model") + 1] == "other-model", argv
        assert tmux(socket, "list-sessions", "-F", "#{session_name}").split() == [tid]

        t, events = await turn(srv, tid, "auth please")
        assert status(t) == "failed", t
        assert t["error"]["codexErrorInfo"] == "unauthorized", t["error"]
        assert items_completed(events, "agentMessage") == []
        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Fine again.", t.get("error")
    second = env.fake.model_requests[1]
    assert "first" in human_texts(second) and second.body.get("model") == "other-model"
