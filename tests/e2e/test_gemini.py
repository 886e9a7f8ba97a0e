"""The Gemini CLI backend end to end: threadline as a subprocess, driving the real `gemini` CLI
(ACP mode by default, headless `-p -o stream-json` with ``config.mode: "headless"``), which talks
to the scripted fake Gemini API (tests/fakes/gemini.py).

Each test asserts what a client sees (notifications, server requests, turn status and error)
and what really happened (files on disk, processes in /proc, what the model was sent). The
fixture checks that no process started for a test survives it. Every message threadline writes
is validated against schemas/ by the test client.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.gemini_env import GeminiEnv, acp_pids, headless_pids
from tests.fakes.gemini import (
    HttpError,
    RecordedRequest,
    Replace,
    Rule,
    ShellCommand,
    Step,
    Text,
    Thought,
    WriteFile,
)
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
    status,
    turn,
)
from tests.support.missing_cli import check_missing_cli
from threadline.backends.registry import SPECS

pytestmark = pytest.mark.e2e

ROLE = "ROLE-MARKER-9: you are the reviewer; answer in one line."
HEADLESS = {"mode": "headless"}
STALL_MS = 60_000  # a stream that stalls "forever" after its first chunk
SLEEP_S = 300


# -- helpers ---------------------------------------------------------------------------------------


def is_request(e: Any) -> bool:
    return isinstance(e, dict) and "id" in e and "method" in e


def human_texts(request: RecordedRequest) -> list[str]:
    """The text parts of every user content the model was sent (not the CLI's own context
    part, not tool responses), in order."""
    out = []
    for content in request.contents:
        if content.get("role") != "user":
            continue
        for part in content.get("parts") or []:
            text = part.get("text")
            if isinstance(text, str) and not text.startswith("<session_context>"):
                out.append(text)
    return out


def model_texts(request: RecordedRequest) -> list[str]:
    return [
        part["text"]
        for content in request.contents
        if content.get("role") == "model"
        for part in content.get("parts") or []
        if isinstance(part.get("text"), str) and not part.get("thought")
    ]


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


# -- ACP: streamed text, thoughts, role bootstrap --------------------------------------------------


async def test_acp_streamed_text_thoughts_and_role(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    answer = "The answer is forty-two, as computed by the fake."
    env.script(
        Rule(
            "first question",
            [[Thought("**Weighing options**\n\nLooking at it carefully."), Text(answer)]],
        ),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        init = await srv.initialize()
        env.reported(init)
        tid = await srv.start_thread(env.work, modelProvider="gemini", developerInstructions=ROLE)
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, "first question")
        env.timings["first turn (agent pre-warmed at thread/start)"] = time.monotonic() - t0
        assert status(t1) == "completed", t1

        # the thought: a reasoning item streamed as summary deltas, before the answer
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["**Weighing options**\nLooking at it carefully."]
        summary = notifications(events, "item/reasoning/summaryTextDelta")
        assert "".join(e["params"]["delta"] for e in summary) == reasoning["summary"][0]
        assert all(e["params"]["itemId"] == reasoning["id"] for e in summary)
        # the text: streamed in several deltas (the fake sends 16-character chunks)
        assert len(notifications(events, "item/agentMessage/delta")) >= 2
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        order = [i["type"] for i in items_started(events)]
        assert order == ["userMessage", "reasoning", "agentMessage"], order
        [usage] = notifications(events, "thread/tokenUsage/updated")
        assert usage["params"]["tokenUsage"]["last"]["inputTokens"] > 0
        assert t1["items"] and t1["items"][0]["text"] == answer

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["second turn (same session)"] = time.monotonic() - t0
        assert status(t2) == "completed" and agent_text(events) == "Second answer."
        assert [i["type"] for i in items_started(events)] == ["userMessage", "agentMessage"]
        assert len(acp_pids(srv)) == 1

    first, second = env.fake.model_requests
    # The role goes in once, as its own text ahead of the first prompt...
    assert human_texts(first) == [ROLE, "first question"]
    # ... and is not repeated: the second request carries it only in turn 1's history.
    assert human_texts(second) == [ROLE, "first question", "second question"]
    assert model_texts(second) == [answer]
    assert env.thread_record(tid)["role_bootstrap_applied"] is True


# -- ACP: shell approvals ------------------------------------------------------------------------


async def test_acp_shell_approvals(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """accept / decline / acceptForSession / cancel on one thread and one agent process."""
    env = gemini_env
    work = env.work

    def shell(command: str) -> ShellCommand:
        return ShellCommand(command, description="run the requested command")

    env.script(
        Rule("all done", ["Still here."]),
        Rule("please accept", [shell("touch accepted.txt && echo made-it"), "Created it."]),
        Rule("please decline", [shell("touch declined.txt"), "Understood, not created."]),
        Rule(
            "for the session",
            [shell("touch session.txt"), shell("touch session.txt"), "Touched it twice."],
        ),
        Rule("please cancel", [shell("touch cancelled.txt"), "Not reached."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)

        # accept: the command runs; the item shows its output
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "please accept", decide("accept"))
        env.timings["shell accept turn"] = time.monotonic() - t0
        assert status(t) == "completed", t
        [request] = requests_in(events)
        assert request["method"] == "item/commandExecution/requestApproval"
        [started] = items_started(events, "commandExecution")
        assert request["params"]["itemId"] == started["id"]
        assert request["params"]["command"] == "touch accepted.txt && echo made-it"
        assert request["params"]["cwd"] == str(work)
        assert (
            started["status"] == "inProgress" and started["command"] == request["params"]["command"]
        )
        assert request["id"] in resolved_ids(events)
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed", cmd
        assert cmd["aggregatedOutput"].strip() == "made-it"
        assert (work / "accepted.txt").exists()
        assert agent_text(events) == "Created it."
        # the model got the command's output
        [response] = env.fake.function_responses()
        assert "made-it" in response["response"]["output"]
        pid = acp_pids(srv)

        # decline: nothing runs; the model is told; the turn goes on
        t, events = await turn(srv, tid, "please decline", decide("decline"))
        assert status(t) == "completed" and agent_text(events) == "Understood, not created.", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (work / "declined.txt").exists()
        response = env.fake.function_responses()[-1]
        assert "canceled by the user" in str(response["response"]), response

        # acceptForSession: asked once; the identical second call runs without asking. The
        # grant is exactly that command: Gemini's own "Allow for this session" would cover every
        # `touch` (checked by the cancel below, which must still ask).
        seen: list[Message] = []
        t, events = await turn(srv, tid, "for the session", decide("acceptForSession", seen))
        assert status(t) == "completed" and agent_text(events) == "Touched it twice.", t
        assert len(seen) == 1, seen
        [auto] = notifications(events, "item/approval/autoDecided")
        assert auto["params"]["decision"] == "accept", auto
        cmds = items_completed(events, "commandExecution")
        assert [c["status"] for c in cmds] == ["completed", "completed"], cmds
        assert auto["params"]["itemId"] == cmds[1]["id"]
        assert (work / "session.txt").exists()

        # cancel: nothing runs and the turn ends interrupted
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "please cancel", decide("cancel"))
        env.timings["shell cancel turn"] = time.monotonic() - t0
        assert status(t) == "interrupted", t
        [request] = requests_in(events)
        assert request["id"] in resolved_ids(events)
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (work / "cancelled.txt").exists()
        assert "Not reached." not in agent_text(events)

        # the same agent process serves the next turn
        t, events = await turn(srv, tid, "all done")
        assert status(t) == "completed" and agent_text(events) == "Still here.", t
        assert acp_pids(srv) == pid


# -- ACP: file write / replace approvals -----------------------------------------------------------


async def test_acp_write_and_replace_approvals_show_the_diff(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    notes = env.work / "notes.txt"
    draft = env.work / "draft.txt"
    env.script(
        Rule(
            "write the notes",
            [
                WriteFile("notes.txt", "hello\nworld\n"),
                Replace("notes.txt", "world", "there"),
                "Wrote and edited notes.txt.",
            ],
        ),
        Rule("write a draft", [WriteFile("draft.txt", "x\n"), "Fine, no draft."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        on_request = answer_by_method(
            {"item/fileChange/requestApproval": lambda _m: {"decision": "accept"}}
        )
        t, events = await turn(srv, tid, "write the notes then edit them", on_request)
        assert status(t) == "completed", t
        assert notes.read_text() == "hello\nthere\n"
        requests = requests_in(events)
        assert [r["method"] for r in requests] == ["item/fileChange/requestApproval"] * 2
        write, edit = items_started(events, "fileChange")
        assert [r["params"]["itemId"] for r in requests] == [write["id"], edit["id"]]
        # the approval shows the proposed change: the item was announced with its diff
        [change] = write["changes"]
        assert change["path"] == str(notes) and change["kind"]["type"] == "add", change
        assert "+hello" in change["diff"] and "+world" in change["diff"]
        [change] = edit["changes"]
        assert change["path"] == str(notes) and change["kind"]["type"] == "update", change
        assert "-world" in change["diff"] and "+there" in change["diff"]
        done_write, done_edit = items_completed(events, "fileChange")
        assert done_write["status"] == done_edit["status"] == "completed"
        assert "-world" in done_edit["changes"][0]["diff"]
        assert "+there" in done_edit["changes"][0]["diff"]
        assert agent_text(events) == "Wrote and edited notes.txt."

        on_request = answer_by_method(
            {"item/fileChange/requestApproval": lambda _m: {"decision": "decline"}}
        )
        t, events = await turn(srv, tid, "write a draft", on_request)
        assert status(t) == "completed" and agent_text(events) == "Fine, no draft.", t
        [declined] = items_completed(events, "fileChange")
        assert declined["status"] == "declined"
        assert not draft.exists()


# -- ACP: interrupts -----------------------------------------------------------------------------


async def test_acp_interrupts(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """turn/interrupt and turn/cancel, each while text streams and while an approval waits;
    then while an approved `sleep` runs. Gemini stops natively (session/cancel): the same
    agent process serves every turn, and nothing is left running."""
    env = gemini_env
    long_text = "Part one of an answer that would go on for a very long time."
    env.script(
        Rule("afterwards", ["Still working fine."]),
        Rule("stream", [Step([Text(long_text)], stall_after_first_chunk_ms=STALL_MS)]),
        Rule("approve", [ShellCommand("touch never-approved.txt"), "Not reached."]),
        Rule(
            "sleeper",
            [ShellCommand(f"touch sleeper-started.txt && sleep {SLEEP_S}"), "Not reached."],
        ),
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
            t0 = time.monotonic()
            await srv.call(method, {"threadId": tid, "turnId": turn_id})
            done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
            env.timings[f"{method} while approval pending"] = time.monotonic() - t0
            assert done["params"]["turn"]["status"] == "interrupted", done
            assert resolved_ids(seen) == [request["id"]]
            assert_items_balanced(seen)
            [cmd] = items_completed(seen, "commandExecution")
            assert cmd["status"] == "declined", cmd
            # a late answer to the withdrawn request changes nothing
            await srv.send({"id": request["id"], "result": {"decision": "accept"}})
            assert acp_pids(srv) == pids, "the agent was restarted: the interrupt was not native"

        # -- while an approved command runs: Gemini kills it (and its process group)
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
        # it ran and was cut short: failed (not "declined": the user approved it)
        assert cmd["status"] == "failed", cmd
        # gone by turn/completed (threadline killed it; the turn did not wait for Gemini's
        # own, late, answer to the cancelled prompt)
        assert env.sleepers(SLEEP_S) == []

        # at once the next turn: it waits for that answer, and gets only its own updates
        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine.", t
        assert only_turn(events, t["id"])
        assert acp_pids(srv) == pids, "the agent was restarted: the interrupts were not native"
    assert not (env.work / "never-approved.txt").exists()
    last = env.fake.model_requests[-1]
    assert "Not reached." not in model_texts(last)
    # Interrupted turns did not lose the role, nor repeat it.
    assert human_texts(last).count(ROLE) == 1, human_texts(last)


async def test_acp_cancel_beside_another_threads_turn(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """turn/cancel on thread A (a `sleep` runs) while thread B, a session of the same agent
    process, streams its answer: A ends interrupted and its command is gone, B's turn
    completes untouched, and A's next turn works."""
    env = gemini_env
    beta = "BETA answer, streamed slowly in small chunks, while the other thread is cancelled."
    env.script(
        Rule("afterwards", ["Still working fine."]),
        Rule("beta", [Step([Text(beta)], chunk_size=6, delay_ms=100)]),
        Rule("sleeper", [ShellCommand(f"sleep {SLEEP_S}"), "Not reached."]),
    )
    async with env.server(nursery) as srv:
        await srv.initialize()
        ta = await srv.start_thread(env.work, modelProvider="gemini")
        tb = await srv.start_thread(env.work, modelProvider="gemini")
        turn_a = await srv.start_turn(ta, "run the sleeper")
        seen: list[Any] = []
        request = await srv.wait_for(is_request, seen=seen)
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "the sleeper runs", 30)
        turn_b = await srv.start_turn(tb, "beta task")
        await srv.wait_for(
            lambda e: is_method("item/agentMessage/delta")(e) and e["params"]["threadId"] == tb,
            seen=seen,
        )
        await srv.call("turn/cancel", {"threadId": ta, "turnId": turn_a})
        done_a, _ = await srv.collect_turn(turn_a, on_request=no_requests, events=seen)
        assert done_a["params"]["turn"]["status"] == "interrupted", done_a
        done_b, _ = await srv.collect_turn(turn_b, on_request=no_requests, events=seen)
        assert done_b["params"]["turn"]["status"] == "completed", done_b
        await env.wait_until(lambda: not env.sleepers(SLEEP_S), "the sleeper is gone", 5)
        a = [e for e in seen if e.get("params", {}).get("threadId") == ta]
        b = [e for e in seen if e.get("params", {}).get("threadId") == tb]
        assert_items_balanced(a)
        assert_items_balanced(b)
        assert only_turn(a, turn_a) and only_turn(b, turn_b)
        assert agent_text(b) == beta
        [cmd] = items_completed(a, "commandExecution")
        assert cmd["status"] == "failed", cmd

        t, events = await turn(srv, ta, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine.", t
        assert only_turn(events, t["id"])
        assert len(acp_pids(srv)) == 1, "the agent was restarted, or two for one cwd"


# -- ACP: the agent dies ---------------------------------------------------------------------------


async def test_acp_agent_killed_mid_turn(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    env = gemini_env
    # (Rules are matched against the latest human content: "after the crash" goes first in
    # case Gemini merged it with the cut-short prompt before it.)
    env.script(
        Rule("after the crash", ["Back again, MANGO."]),
        Rule("remember mango", ["Okay, MANGO."]),
        Rule(
            "slowly", [Step([Text("This will be cut short.")], stall_after_first_chunk_ms=STALL_MS)]
        ),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t, _ = await turn(srv, tid, "remember mango")
        assert status(t) == "completed", t
        [pid] = acp_pids(srv)
        turn_id = await srv.start_turn(tid, "answer slowly")
        seen: list[Any] = []
        await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen)
        os.kill(pid, signal.SIGKILL)
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        t = done["params"]["turn"]
        assert t["status"] == "failed", t
        message = t["error"]["message"]
        assert message.startswith("gemini --acp exited"), t["error"]
        assert "killed by SIGKILL" in message, message
        assert_items_balanced(seen)

        # The next turn starts a new agent and loads the session (made to look older than
        # this minute, see GeminiEnv.age_session, so the load needs no wait).
        sid = env.thread_record(tid)["backend_session_id"]
        env.age_session(sid)
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "after the crash")
        env.timings["turn after kill -9 (new agent + session/load)"] = time.monotonic() - t0
        assert status(t) == "completed" and agent_text(events) == "Back again, MANGO.", t
        [new_pid] = acp_pids(srv)
        assert new_pid != pid
    last = env.fake.model_requests[-1]
    # Gemini had stored the cut-short prompt: it goes along with the next one
    assert human_texts(last) == ["remember mango", "answer slowly", "after the crash"]
    assert model_texts(last) == ["Okay, MANGO."]


# -- API errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["acp", "headless"])
async def test_http_errors_fail_the_turn_then_a_healthy_turn(
    nursery: trio.Nursery, gemini_env: GeminiEnv, mode: str
) -> None:
    env = gemini_env
    env.script(
        Rule("healthy", ["Healthy again."]),
        Rule("server please", [HttpError(500, "the fake broke")]),
        Rule("auth please", [HttpError(401)]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": mode}, developerInstructions=ROLE)
        for text, info, needle in (
            ("auth please", "unauthorized", "API key not valid"),
            ("server please", "internalServerError", "the fake broke"),
        ):
            t0 = time.monotonic()
            t, events = await turn(srv, tid, text)
            env.timings[f"{mode}: HTTP {info} turn"] = time.monotonic() - t0
            assert status(t) == "failed", t
            error = t["error"]
            assert error["codexErrorInfo"] == info, error
            message = error["message"]
            # the API's words: in the message, or its details when it says what to do instead
            assert needle in message + (error.get("additionalDetails") or ""), error
            assert "{" not in message and "Traceback" not in message, error
            # the failure is also announced as a final `error` notification
            [note] = notifications(events, "error")
            assert note["params"]["willRetry"] is False and note["params"]["error"] == error
            # the error text is not shown as if the agent had said it
            assert agent_text(events) == ""
        t, events = await turn(srv, tid, "healthy")
        assert status(t) == "completed" and agent_text(events) == "Healthy again.", t
        if mode == "acp":
            assert len(acp_pids(srv)) == 1  # an API failure needs no restart
        t, events = await turn(srv, tid, "healthy still?")
        assert status(t) == "completed" and agent_text(events) == "Healthy again.", t
    # The failed turns did not lose the role, nor repeat it: the model sees it exactly once.
    healthy, again = env.fake.model_requests[-2:]
    # (ACP sends the role as its own text part; headless prepends it to the prompt.)
    assert "\n".join(human_texts(healthy)).count(ROLE) == 1, human_texts(healthy)
    assert "\n".join(human_texts(again)).count(ROLE) == 1, human_texts(again)
    assert human_texts(again)[-1] == "healthy still?"


# -- missing binary --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", SPECS["gemini"].modes)
async def test_missing_binary(nursery: trio.Nursery, gemini_env: GeminiEnv, mode: str) -> None:
    env = gemini_env
    await check_missing_cli(lambda: env.server(nursery), "gemini", mode, env.work)
    assert env.fake.requests == []


# -- ACP: resume after a restart -------------------------------------------------------------------


async def resume_after_restart(
    nursery: trio.Nursery, env: GeminiEnv, *, age_minutes: int
) -> tuple[float, bool, str]:
    """Turn 1 in one threadline, then thread/resume in a new one (→ session/load) and turn 2.
    Returns (seconds from thread/resume to turn 2's end, whether the session file was named
    after the current minute from thread/resume until threadline loaded it, the second
    threadline's stderr). The load happens between thread/resume and turn 2's end: when the
    minute turned in that span and threadline did not wait, it may have looked after the turn,
    and the second value is False."""
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert status(t1) == "completed", t1
    assert await env.wait_no_leftovers() == []  # threadline took its agent down with it
    sid = env.thread_record(tid)["backend_session_id"]
    assert sid and env.session_files(sid), "no Gemini session was recorded"
    if age_minutes:
        env.age_session(sid, age_minutes)

    other = env.tmp / "elsewhere"
    other.mkdir(exist_ok=True)
    async with env.server(nursery) as srv:
        await srv.initialize()
        # a different cwd is refused explicitly: Gemini binds sessions to their project
        err = await srv.error("thread/resume", {"threadId": tid, "cwd": str(other)})
        assert str(env.work) in err["message"] and str(other) in err["message"], err
        now = time.strftime("%Y-%m-%dT%H-%M")
        same_minute = any(f"session-{now}-" in p.name for p in env.session_files(sid))
        t0 = time.monotonic()
        resumed = await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        assert resumed["cwd"] == str(env.work)
        [old] = resumed["thread"]["turns"]
        assert [i["text"] for i in old["items"] if i["type"] == "agentMessage"] == [
            "Noted: PAPAYA."
        ]
        t2, events = await turn(srv, tid, "which word was it?", timeout=90)
        elapsed = time.monotonic() - t0
        minute_turned = time.strftime("%Y-%m-%dT%H-%M") != now
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA.", t2
        # the history replayed by session/load is not shown as part of this turn
        assert [i["type"] for i in items_started(events)] == ["userMessage", "agentMessage"]
        stderr = srv.stderr_text
    assert env.thread_record(tid)["backend_session_id"] == sid  # the same Gemini session
    before, after = env.fake.model_requests
    # the model sees the earlier conversation, and the role only once (not re-sent)
    assert human_texts(after) == [ROLE, "remember the word PAPAYA", "which word was it?"]
    assert model_texts(after) == ["Noted: PAPAYA."]
    assert ROLE in human_texts(before)
    if minute_turned and "same-minute bug" not in stderr:
        same_minute = False  # threadline may have looked after the minute turned
    return elapsed, same_minute, stderr


async def test_acp_resume_after_restart(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    # The session is made to look minutes old (as after a real restart some time later): the
    # load needs no wait.
    elapsed, same_minute, stderr = await resume_after_restart(nursery, gemini_env, age_minutes=5)
    gemini_env.timings["thread/resume + first turn (agent start + session/load)"] = elapsed
    assert not same_minute and "same-minute" not in stderr
    assert elapsed < 30, "session/load of an old session waited"


async def test_acp_resume_in_the_same_minute(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """Gemini 0.61.0 wipes a session loaded within the minute its file is named after
    (reference §7.6): threadline waits for the next minute (up to ~60 s here), and the
    conversation survives."""
    if (second := time.localtime().tm_sec) > 40:  # turn 1 and the restart fit in its minute
        await trio.sleep(61 - second)
    elapsed, same_minute, stderr = await resume_after_restart(nursery, gemini_env, age_minutes=0)
    gemini_env.timings["same-minute resume (waits for the next minute)"] = elapsed
    if same_minute:  # (else the minute turned between turn 1 and the resume: nothing to wait)
        assert "same-minute bug" in stderr, stderr[-2000:]


async def test_acp_a_resume_without_a_turn_does_not_cost_the_history(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """gemini's `session/load` in a later minute starts a file of its own for the session, with
    only the session context in it until the next prompt. Left so (the thread resumed, then
    closed without a turn), gemini's session cleanup at its next start deletes every file of
    that session, the history included. threadline removes such an empty duplicate before it
    starts an agent, and the history survives."""
    env = gemini_env
    env.script(Rule("remember the word", ["Noted: FIG."]), Rule("which word", ["It was FIG."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t1, _ = await turn(srv, tid, "remember the word FIG")
        assert status(t1) == "completed", t1
    sid = env.thread_record(tid)["backend_session_id"]
    env.age_session(sid)
    async with env.server(nursery) as srv:  # resumed and closed without a turn
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        await env.wait_until(lambda: len(env.session_files(sid)) == 2, "gemini's new file")
    async with env.server(nursery) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        t2, events = await turn(srv, tid, "which word was it?", timeout=90)
        assert status(t2) == "completed" and agent_text(events) == "It was FIG.", t2
        assert "removed gemini's empty duplicate session file" in srv.stderr_text
    assert "remember the word FIG" in human_texts(env.fake.model_requests[-1])


# -- headless mode -------------------------------------------------------------------------------


async def test_headless_streams_resumes_and_keeps_its_cwd(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    answer = "Headless answer: the word is KIWI, streamed."
    env.script(
        Rule("first", [answer]),
        Rule("second", ["Still KIWI."]),
        Rule("after the restart", ["KIWI, even now."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config=HEADLESS, developerInstructions=ROLE)
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "first: remember KIWI")
        env.timings["headless turn 1 (spawn)"] = time.monotonic() - t0
        assert status(t) == "completed", t
        assert len(notifications(events, "item/agentMessage/delta")) >= 2
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        assert notifications(events, "thread/tokenUsage/updated")
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "second question")
        env.timings["headless turn 2 (spawn + --resume)"] = time.monotonic() - t0
        assert status(t) == "completed" and agent_text(events) == "Still KIWI.", t
        assert headless_pids(srv) == [] and acp_pids(srv) == []  # no CLI between turns
    sid = env.thread_record(tid)["backend_session_id"]
    assert sid and len({p.parent for p in env.session_files(sid)}) == 1

    other = env.tmp / "elsewhere"
    other.mkdir()
    async with env.server(nursery) as srv:
        await srv.initialize()
        err = await srv.error("thread/resume", {"threadId": tid, "cwd": str(other)})
        assert str(env.work) in err["message"] and str(other) in err["message"], err
        resumed = await srv.call("thread/resume", {"threadId": tid})
        assert resumed["cwd"] == str(env.work) and len(resumed["thread"]["turns"]) == 2
        t, events = await turn(srv, tid, "after the restart, which word?")
        assert status(t) == "completed" and agent_text(events) == "KIWI, even now.", t
    assert env.thread_record(tid)["backend_session_id"] == sid

    first, second, third = env.fake.model_requests
    # --resume: the model sees the whole conversation; the role went with the first prompt only
    assert human_texts(first) == [f"{ROLE}\n\nfirst: remember KIWI"]
    assert human_texts(third) == [
        f"{ROLE}\n\nfirst: remember KIWI",
        "second question",
        "after the restart, which word?",
    ]
    assert model_texts(third) == [answer, "Still KIWI."]
    assert len(second.contents) == 3


async def test_headless_approval_policies_and_cancel(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """Headless cannot ask: approvalPolicy never runs tools (yolo), the default policy runs
    none. turn/cancel during a long shell command kills it too (it runs in its own process
    group, outside the CLI's)."""
    env = gemini_env
    env.script(
        Rule("afterwards", ["Fine after the cancel."]),
        Rule("unattended", [ShellCommand("touch ran-unasked.txt && echo ran"), "Ran it."]),
        Rule("guarded", [ShellCommand("touch not-allowed.txt"), "Could not run it."]),
        Rule(
            "long command",
            [ShellCommand(f"touch sleeper-started.txt && sleep {SLEEP_S}"), "Not reached."],
        ),
        Rule(
            "stream",
            [Step([Text("A long answer, cut short.")], stall_after_first_chunk_ms=STALL_MS)],
        ),
    )
    async with env.server(nursery) as srv:
        await srv.initialize()
        # the default policy (on-request): Gemini is not even offered the shell tool
        guarded = await srv.start_thread(env.work, modelProvider="gemini", config=HEADLESS)
        t, events = await turn(srv, guarded, "guarded command")
        assert status(t) == "completed" and agent_text(events) == "Could not run it.", t
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (env.work / "not-allowed.txt").exists()
        assert "run_shell_command" not in env.fake.tool_names()

        tid = await srv.start_thread(
            env.work, modelProvider="gemini", config=HEADLESS, approvalPolicy="never"
        )
        t, events = await turn(srv, tid, "unattended work")  # any request fails the test
        assert status(t) == "completed" and agent_text(events) == "Ran it.", t
        [started] = items_started(events, "commandExecution")
        assert started["command"] == "touch ran-unasked.txt && echo ran"
        assert started["cwd"] == str(env.work)
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["aggregatedOutput"] == "ran", cmd
        assert (env.work / "ran-unasked.txt").exists()

        # turn/interrupt while text streams: headless has no native interrupt, the CLI's
        # process group is killed; the message so far is completed
        turn_id = await srv.start_turn(tid, "stream an answer")
        seen: list[Any] = []
        first = await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen)
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        [message] = items_completed(seen, "agentMessage")
        assert message["text"] == first["params"]["delta"] == "A long answer, c"
        assert headless_pids(srv) == []

        turn_id = await srv.start_turn(tid, "long command please")
        seen = []
        await srv.wait_for(is_method("item/started"), seen=seen)  # the userMessage
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "the sleeper runs", 30)
        sleepers = env.sleepers(SLEEP_S)
        t0 = time.monotonic()
        await srv.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        env.timings["headless turn/cancel during a shell command"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        [cmd] = items_completed(seen, "commandExecution")
        assert cmd["status"] == "failed", cmd
        # no orphan: the CLI and the command it ran are gone (checked in /proc)
        assert headless_pids(srv) == []
        await env.wait_until(lambda: not env.sleepers(SLEEP_S), "the sleeper is gone", 5)
        assert not set(sleepers) & set(env.leftovers())

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Fine after the cancel.", t


# -- ACP: threads sharing one agent process --------------------------------------------------------


async def test_acp_threads_in_one_cwd_share_one_agent(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """Two threads in the same cwd are two sessions of one `gemini --acp` process: their turns
    run at the same time and each thread sees only its own events. Thread B has approvalPolicy
    never (session/set_mode yolo: its command runs without asking); thread A asks."""
    env = gemini_env
    # ~1.5 s of streaming each (6-character chunks, 100 ms apart): long enough to overlap
    alpha = "ALPHA answer, slowly streamed in many small chunks, on and on for a while longer."
    beta = "BETA answer, after running its command, streamed just as slowly for a while longer."
    env.script(
        Rule(
            "alpha",
            [ShellCommand("touch alpha.txt"), Step([Text(alpha)], chunk_size=6, delay_ms=100)],
        ),
        Rule(
            "beta", [ShellCommand("touch beta.txt"), Step([Text(beta)], chunk_size=6, delay_ms=100)]
        ),
    )
    async with env.server(nursery) as srv:
        await srv.initialize()
        ta = await srv.start_thread(env.work, modelProvider="gemini")
        tb = await srv.start_thread(env.work, modelProvider="gemini", approvalPolicy="never")
        turn_a = await srv.start_turn(ta, "alpha task")
        turn_b = await srv.start_turn(tb, "beta task")
        events: list[Any] = []
        done: set[str] = set()
        with trio.fail_after(60):
            while done != {turn_a, turn_b}:
                event = await srv.next_event()
                events.append(event)
                if is_request(event):
                    assert event["params"]["threadId"] == ta, event
                    await srv.send({"id": event["id"], "result": {"decision": "accept"}})
                elif event.get("method") == "turn/completed":
                    done.add(event["params"]["turn"]["id"])
        assert len(acp_pids(srv)) == 1, "two agent processes for one cwd"

    def of(tid: str, turn_id: str) -> list[Any]:
        mine = [e for e in events if e.get("params", {}).get("threadId") == tid]
        assert all(e["params"].get("turnId", turn_id) == turn_id for e in mine)
        return mine

    events = [e for e in events if e.get("method") != "thread/started"]
    a, b = of(ta, turn_a), of(tb, turn_b)
    assert len(a) + len(b) == len(events), "an event without a thread"
    for mine, text, name in ((a, alpha, "alpha.txt"), (b, beta, "beta.txt")):
        assert_items_balanced(mine)
        [completed] = [e for e in mine if e.get("method") == "turn/completed"]
        assert completed["params"]["turn"]["status"] == "completed", completed
        assert agent_text(mine) == text
        [cmd] = items_completed(mine, "commandExecution")
        assert cmd["command"] == f"touch {name}" and cmd["status"] == "completed", cmd
        assert (env.work / name).exists()
    assert len(requests_in(a)) == 1 and requests_in(b) == []
    # the two turns really overlapped
    kinds = [
        e["params"]["threadId"] for e in events if e.get("method") == "item/agentMessage/delta"
    ]
    switches = sum(1 for x, y in itertools.pairwise(kinds) if x != y)
    assert switches >= 2, "the turns ran one after the other"
