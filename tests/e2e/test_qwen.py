"""The Qwen Code backend end to end: threadline as a subprocess, driving the real `qwen` CLI
(one `qwen --acp` per cwd, shared by its threads), which talks to the scripted fake Chat
Completions API (tests/fakes/openai_chat.py).

Each test asserts what a client sees (notifications, server requests, turn status and error)
and what really happened (files on disk, processes in /proc, what the model was sent). The
fixture checks that no process started for a test survives it. Every message threadline writes
is validated against schemas/ by the test client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.qwen_env import (
    PRINTING_COMMAND,
    SLEEP_NOTE,
    QwenEnv,
    acp_pids,
    shell_call,
    write_file_call,
)
from tests.fakes.openai_chat import HttpError, Reasoning, RecordedRequest, Rule, Step, Text
from tests.support.client import (
    Message,
    assert_items_balanced,
    notifications,
)
from tests.support.events import (
    agent_text,
    answer_by_method,
    is_method,
    items_completed,
    items_started,
    no_requests,
    only_turn,
    requests_in,
    resolved_ids,
    turn,
)
from tests.support.missing_cli import check_missing_cli
from threadline.backends.registry import SPECS

pytestmark = pytest.mark.e2e

ROLE = "ROLE-MARKER-7: you are the reviewer; answer in one line."
STALL_MS = 60_000  # a stream that stalls "forever" after its first delta
SLEEP_S = 300


# -- helpers ---------------------------------------------------------------------------------------


def decide(decision: str, seen: list[Message] | None = None) -> Callable[[Message], Any]:
    def on_request(message: Message) -> Any:
        assert message["method"] in (
            "item/commandExecution/requestApproval",
            "item/fileChange/requestApproval",
        ), message
        if seen is not None:
            seen.append(message)
        return {"decision": decision}

    return on_request


def is_request(e: Any) -> bool:
    return isinstance(e, dict) and "id" in e and "method" in e


def human_texts(request: RecordedRequest) -> list[str]:
    """What the user said in the conversation the model was sent: the text parts of the user
    messages, without qwen's own `<system-reminder>` parts."""
    out = []
    for message in request.messages:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, list):
            continue
        for part in content:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and not text.startswith("<system-reminder>"):
                out.append(text)
    return out


def assistant_texts(request: RecordedRequest) -> list[str]:
    return [
        str(m.get("content"))
        for m in request.messages
        if m.get("role") == "assistant" and m.get("content")
    ]


def tool_outputs(request: RecordedRequest) -> str:
    """The latest tool results the model was sent, as text."""
    return json.dumps([m.get("content") for m in request.tool_results])


# -- ACP: streamed text and reasoning, the role message, token usage -------------------------------


async def test_acp_streams_text_reasoning_role_once_and_usage(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    answer = "The answer is forty-two, as computed by the fake."
    env.script(
        Rule(
            "first question",
            [Step([Reasoning("Weighing the options."), Text(answer)], chunk_size=8)],
        ),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        init = await srv.initialize()
        env.reported(init)
        t0 = time.monotonic()
        tid = await srv.start_thread(env.work, modelProvider="qwen", developerInstructions=ROLE)
        t1, events = await turn(srv, tid, "first question")
        env.timings["thread/start + first turn (agent start)"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1
        # the reasoning: streamed as summary deltas of one part, before the answer
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["Weighing the options."]
        summary = notifications(events, "item/reasoning/summaryTextDelta")
        assert len(summary) >= 2 and "".join(e["params"]["delta"] for e in summary) == (
            "Weighing the options."
        )
        # the text: streamed in several deltas (the fake sends 8-character chunks), one item
        assert len(notifications(events, "item/agentMessage/delta")) >= 4
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer and t1["items"] == [message]
        order = [i["type"] for i in items_started(events)]
        assert order == ["userMessage", "reasoning", "agentMessage"], order
        [usage] = notifications(events, "thread/tokenUsage/updated")
        first_usage = usage["params"]["tokenUsage"]
        assert first_usage["last"]["inputTokens"] > 0 and first_usage["last"]["outputTokens"] > 0
        assert first_usage["last"]["reasoningOutputTokens"] > 0

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["second turn (same session)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "Second answer.", t2
        [usage] = notifications(events, "thread/tokenUsage/updated")
        second = usage["params"]["tokenUsage"]
        assert second["total"]["inputTokens"] == (
            first_usage["total"]["inputTokens"] + second["last"]["inputTokens"]
        )
        assert len(acp_pids(srv)) == 1
    first, later = env.fake.model_requests
    # the role goes in once, ahead of the first prompt; the second request has the history
    assert human_texts(first) == [ROLE, "first question"]
    assert human_texts(later) == [ROLE, "first question", "second question"]
    assert assistant_texts(later) == [answer]
    record = env.thread_record(tid)
    assert record["role_bootstrap_applied"] is True
    assert env.session_files(record["backend_session_id"])


# -- ACP: command approvals ------------------------------------------------------------------------


async def test_acp_command_approvals(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    """accept / decline / acceptForSession / cancel on one thread and one agent process."""
    env = qwen_env
    work = env.work
    env.script(
        Rule("all done", ["Still here."]),
        Rule("please accept", [shell_call(PRINTING_COMMAND), "Created it."]),
        Rule("please decline", [shell_call("touch declined.txt"), "Not reached."]),
        Rule(
            "for the session",
            [shell_call("touch session.txt"), shell_call("touch session.txt"), "Touched twice."],
        ),
        Rule("please cancel", [shell_call("touch cancelled.txt"), "Not reached."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)

        # accept: the command runs; the item shows the command, its output and exit code
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "please accept", decide("accept"))
        env.timings["shell accept turn"] = time.monotonic() - t0
        assert t["status"] == "completed" and agent_text(events) == "Created it.", t
        [request] = requests_in(events)
        assert request["method"] == "item/commandExecution/requestApproval"
        assert request["params"]["command"] == PRINTING_COMMAND
        assert request["params"]["cwd"] == str(work)
        # announced once its command was known (not as qwen's first "Shell" placeholder)
        [started] = items_started(events, "commandExecution")
        assert request["params"]["itemId"] == started["id"]
        assert started["command"] == request["params"]["command"], started
        assert request["id"] in resolved_ids(events)
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["exitCode"] == 0, cmd
        assert cmd["aggregatedOutput"].strip() == "made-it"
        assert (work / "accepted.txt").exists()
        # no empty message items (qwen reports token usage in empty message chunks)
        assert [i["type"] for i in items_started(events)] == [
            "userMessage",
            "commandExecution",
            "agentMessage",
        ]
        assert "made-it" in tool_outputs(env.fake.model_requests[-1])
        pids = acp_pids(srv)

        # decline: nothing runs, and qwen ends the turn there (the model is told with the
        # next prompt)
        t, events = await turn(srv, tid, "please decline", decide("decline"))
        assert t["status"] == "completed" and agent_text(events) == "", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert len(items_started(events, "commandExecution")) == 1
        assert not (work / "declined.txt").exists()

        # acceptForSession: asked once; the identical second call runs without asking. Qwen's
        # own "Always allow" would allow every `touch` and save that in its settings.
        seen: list[Message] = []
        t, events = await turn(srv, tid, "for the session", decide("acceptForSession", seen))
        assert t["status"] == "completed" and agent_text(events) == "Touched twice.", t
        assert len(seen) == 1, seen
        [auto] = notifications(events, "item/approval/autoDecided")
        assert auto["params"]["decision"] == "accept", auto
        cmds = items_completed(events, "commandExecution")
        assert [c["status"] for c in cmds] == ["completed", "completed"], cmds
        assert not (work / ".qwen").exists(), "qwen saved a permission in the project"
        assert "canceled by the user" in json.dumps(env.fake.model_requests[-1].messages)

        # cancel: nothing runs and the turn ends interrupted
        t, events = await turn(srv, tid, "please cancel", decide("cancel"))
        assert t["status"] == "interrupted", t
        [request] = requests_in(events)
        assert request["id"] in resolved_ids(events)
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (work / "cancelled.txt").exists()
        assert "Not reached." not in agent_text(events)

        # the same agent process serves the next turn
        t, events = await turn(srv, tid, "all done")
        assert t["status"] == "completed" and agent_text(events) == "Still here.", t
        assert acp_pids(srv) == pids


async def test_acp_no_approvals_with_policy_never_and_the_thread_model(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    env = qwen_env
    env.script(Rule("make it", [shell_call("touch made.txt"), "Made it."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", model="fake-small")
        t, events = await turn(srv, tid, "make it")
        assert t["status"] == "completed" and agent_text(events) == "Made it.", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["command"] == "touch made.txt", cmd
    assert (env.work / "made.txt").exists()
    assert {r.model for r in env.fake.model_requests} == {"fake-small"}


# -- ACP: file writes ------------------------------------------------------------------------------


async def test_acp_file_write_approvals(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    notes, draft = env.work / "notes.txt", env.work / "draft.txt"
    env.script(
        Rule("write the notes", [write_file_call(notes, "hello\nworld\n"), "Wrote notes.txt."]),
        Rule("write a draft", [write_file_call(draft, "x\n"), "Not reached."]),
        Rule("write relative", [write_file_call("rel.txt", "x\n"), "That failed."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        accept = answer_by_method(
            {"item/fileChange/requestApproval": lambda _m: {"decision": "accept"}}
        )
        t, events = await turn(srv, tid, "write the notes", accept)
        assert t["status"] == "completed" and agent_text(events) == "Wrote notes.txt.", t
        assert notes.read_text() == "hello\nworld\n"
        [request] = requests_in(events)
        [write] = items_started(events, "fileChange")
        assert request["params"]["itemId"] == write["id"]
        # the approval shows the proposed change: the item was announced with its diff
        [change] = write["changes"]
        assert change["path"] == str(notes) and change["kind"]["type"] == "add", change
        assert "+hello" in change["diff"] and "+world" in change["diff"]
        [done] = items_completed(events, "fileChange")
        assert done["status"] == "completed"

        decline = answer_by_method(
            {"item/fileChange/requestApproval": lambda _m: {"decision": "decline"}}
        )
        t, events = await turn(srv, tid, "write a draft", decline)
        assert t["status"] == "completed" and agent_text(events) == "", t
        [declined] = items_completed(events, "fileChange")
        assert declined["status"] == "declined"
        assert len(items_started(events, "fileChange")) == 1
        assert not draft.exists()

        # arguments qwen rejects (a relative path): the edit fails without asking
        t, events = await turn(srv, tid, "write relative")
        assert t["status"] == "completed" and agent_text(events) == "That failed.", t
        [failed] = items_completed(events, "fileChange")
        assert failed["status"] == "failed", failed
    assert sorted(p.name for p in env.work.iterdir()) == ["notes.txt"]


# -- ACP: interrupts -------------------------------------------------------------------------------


async def test_acp_interrupts(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    """turn/interrupt and turn/cancel while text streams and while an approval waits; then
    while an approved `sleep` runs. Qwen stops natively (session/cancel): the same agent
    process serves every turn, and nothing is left running."""
    env = qwen_env
    long_text = "Part one of an answer that would go on for a very long time."
    env.script(
        Rule("afterwards", ["Still working fine."]),
        Rule("stream", [Step([Text(long_text)], stall_after_first_delta_ms=STALL_MS)]),
        Rule("approve", [shell_call("touch never-approved.txt"), "Not reached."]),
        Rule("sleeper", [shell_call(f"sleep {SLEEP_S} {SLEEP_NOTE}"), "Not reached."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE)
        for method in ("turn/interrupt", "turn/cancel"):
            # -- while streaming
            turn_id = await srv.start_turn(tid, f"stream something ({method})")
            seen: list[Any] = []
            first = await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen)
            pids = acp_pids(srv)
            t0 = time.monotonic()
            await srv.call(method, {"threadId": tid, "turnId": turn_id})
            done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
            env.timings[f"{method} while streaming -> turn/completed"] = time.monotonic() - t0
            assert done["params"]["turn"]["status"] == "interrupted", done
            assert_items_balanced(seen)
            [message] = items_completed(seen, "agentMessage")
            assert message["text"] == first["params"]["delta"] == long_text[:16]

            # -- while an approval is pending (never answered)
            turn_id = await srv.start_turn(tid, f"approve this ({method})")
            seen = []
            request = await srv.wait_for(is_request, seen=seen)
            assert request["method"] == "item/commandExecution/requestApproval"
            await srv.call(method, {"threadId": tid, "turnId": turn_id})
            done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
            assert done["params"]["turn"]["status"] == "interrupted", done
            assert resolved_ids(seen) == [request["id"]]
            assert_items_balanced(seen)
            [cmd] = items_completed(seen, "commandExecution")
            assert cmd["status"] == "declined", cmd
            # a late answer to the withdrawn request changes nothing
            await srv.send({"id": request["id"], "result": {"decision": "accept"}})
            assert acp_pids(srv) == pids, "the agent was restarted: the interrupt was not native"

        # -- while an approved command runs: it is stopped with the turn
        turn_id = await srv.start_turn(tid, "run the sleeper")
        seen = []
        request = await srv.wait_for(is_request, seen=seen)
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "the sleeper runs", 30)
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        env.timings["turn/interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        [cmd] = items_completed(seen, "commandExecution")
        assert cmd["status"] == "failed", cmd  # it ran and was cut short (not declined)
        await env.wait_until(lambda: not env.sleepers(SLEEP_S), "the sleeper is gone", 5)

        t, events = await turn(srv, tid, "afterwards")
        assert t["status"] == "completed" and agent_text(events) == "Still working fine.", t
        assert only_turn(events, t["id"])
        assert acp_pids(srv) == pids, "the agent was restarted: the interrupts were not native"
    assert not (env.work / "never-approved.txt").exists()
    last = env.fake.model_requests[-1]
    assert "Not reached." not in assistant_texts(last)
    # interrupted turns did not lose the role, nor repeat it
    assert human_texts(last).count(ROLE) == 1, human_texts(last)


# -- ACP: resume after a restart of threadline -------------------------------------------------


async def test_acp_resume_after_restart(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    """thread/resume in a new threadline: `session/load` continues the qwen session."""
    env = qwen_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE)
        t, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert t["status"] == "completed", t
    assert await env.wait_no_leftovers() == []  # threadline took its agent down with it
    sid = env.thread_record(tid)["backend_session_id"]
    assert sid and env.session_files(sid), "no qwen session was recorded"
    async with env.server(nursery) as srv:
        await srv.initialize()
        t0 = time.monotonic()
        resumed = await srv.call("thread/resume", {"threadId": tid})
        [old] = resumed["thread"]["turns"]
        assert [i["text"] for i in old["items"] if i["type"] == "agentMessage"] == [
            "Noted: PAPAYA."
        ]
        t, events = await turn(srv, tid, "which word was it?")
        env.timings["thread/resume + first turn (agent start + session/load)"] = (
            time.monotonic() - t0
        )
        assert t["status"] == "completed" and agent_text(events) == "It was PAPAYA.", t
        # the history replayed by session/load is not shown as part of this turn
        assert [i["type"] for i in items_started(events)] == ["userMessage", "agentMessage"]
    assert env.thread_record(tid)["backend_session_id"] == sid  # the same qwen session
    after = env.fake.model_requests[-1]
    # the model sees the earlier conversation (qwen joins a loaded prompt's text blocks), and
    # the role only once
    said = human_texts(after)
    assert said[-1] == "which word was it?", said
    assert "remember the word PAPAYA" in " ".join(said) and " ".join(said).count(ROLE) == 1, said
    assert assistant_texts(after) == ["Noted: PAPAYA."]


# -- API errors ------------------------------------------------------------------------------------


async def test_http_errors_fail_the_turn_then_a_healthy_turn(
    nursery: trio.Nursery, qwen_env: QwenEnv
) -> None:
    """401: qwen fails at once, and the error says what to do. 500: qwen would retry for
    ~80 s; threadline follows qwen's record of its attempts and stops them after the second."""
    env = qwen_env
    # (qwen keeps a failed prompt and sends it again with the next one: later rules first)
    env.script(
        Rule("healthy", ["Healthy again."]),
        Rule("server please", [HttpError(500, "the fake broke")]),
        Rule("auth please", [HttpError(401, "bad fake key")]),
    )
    login_fix = SPECS["qwen"].login_fix
    assert login_fix is not None
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "auth please")
        env.timings["HTTP 401 turn"] = time.monotonic() - t0
        assert t["status"] == "failed", t
        error = t["error"]
        assert error["codexErrorInfo"] == "unauthorized", error
        assert error["message"].count(login_fix) == 1, error
        assert f"HTTP 401 from {env.fake.base_url}" in error["message"], error
        assert "bad fake key" in error["additionalDetails"], error
        [note] = notifications(events, "error")
        assert note["params"]["willRetry"] is False and note["params"]["error"] == error
        assert agent_text(events) == ""

        t0 = time.monotonic()
        t, events = await turn(srv, tid, "server please")
        took = env.timings["HTTP 500 turn"] = time.monotonic() - t0
        assert t["status"] == "failed", t
        error = t["error"]
        assert error["codexErrorInfo"] == "internalServerError", error
        assert "keeps failing with HTTP 500" in error["message"], error
        assert env.fake.base_url in error["message"], error
        assert "the fake broke" in error["additionalDetails"], error
        assert agent_text(events) == ""
        assert took < 20, f"qwen's retries were not stopped ({took:.0f} s)"

        t, events = await turn(srv, tid, "healthy now?")
        assert t["status"] == "completed" and agent_text(events) == "Healthy again.", t
        assert len(acp_pids(srv)) == 1  # an API failure needs no restart
    rules = [r.rule for r in env.fake.model_requests]
    assert rules == ["auth please"] + ["server please"] * 2 + ["healthy"], rules


async def test_missing_binary(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    await check_missing_cli(lambda: env.server(nursery), "qwen", "acp", env.work)
    assert env.fake.requests == []
