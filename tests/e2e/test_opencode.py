"""The OpenCode backend end to end: threadline as a subprocess, driving the real `opencode` CLI
(one `opencode acp` per cwd, shared by its threads, by default; `opencode run --format json`
per turn with `config: {"mode": "run"}`), which talks to the scripted fake Chat Completions API
(tests/fakes/openai_chat.py).

Each test asserts what a client sees (notifications, server requests, turn status and error)
and what really happened (files on disk, processes in /proc, what the model was sent). The
fixture checks that no process started for a test survives it. Every message threadline writes
is validated against schemas/ by the test client.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.opencode_env import OpenCodeEnv, opencode_pids
from tests.fakes.openai_chat import (
    HttpError,
    Reasoning,
    Rule,
    Step,
    Text,
    bash_call,
    edit_call,
    write_call,
)
from tests.support.client import (
    assert_items_balanced,
    notifications,
)
from tests.support.events import (
    agent_text,
    answer_by_method,
    decide,
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

ROLE = "DEV-MARKER-9: you are the reviewer; answer in one line."
RUN = {"mode": "run"}
STALL_MS = 60_000  # a stream that stalls "forever" after its first delta
SLEEP_S = 300
FAST_500 = {"retry-after-ms": "0"}  # OpenCode retries 5xx: immediately, not for ~70 s


# -- helpers ---------------------------------------------------------------------------------------


def item_started(item_type: str) -> Callable[[Any], bool]:
    return lambda e: is_method("item/started")(e) and e["params"]["item"]["type"] == item_type


def session_ids(env: OpenCodeEnv) -> set[str | None]:
    """OpenCode's session ids, as sent to the model (one per OpenCode session)."""
    return {r.headers.get("x-session-id") for r in env.fake.model_requests}


def assistant_texts(env: OpenCodeEnv, i: int = -1) -> list[str]:
    return [
        str(m.get("content") or "") for m in env.fake.messages(i) if m.get("role") == "assistant"
    ]


def role_count(env: OpenCodeEnv, i: int = -1) -> int:
    """How often the role message appears in what the model was sent (history included)."""
    return sum(t.count(ROLE) for t in env.fake.user_texts(i))


def order_of(events: list[Any], item_id: str, request_id: Any) -> list[str | None]:
    """The methods of the item's start/completion and of its approval request, in order."""
    return [
        e.get("method")
        for e in events
        if isinstance(e, dict)
        and (
            e.get("id") == request_id
            or (e.get("params") or {}).get("item", {}).get("id") == item_id
        )
    ]


# -- ACP: streamed text, reasoning, the role message -----------------------------------------------


async def test_acp_streams_text_and_reasoning_role_once(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    answer = "The answer is forty-two, as computed."
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
        tid = await srv.start_thread(env.work, modelProvider="opencode", developerInstructions=ROLE)
        t1, events = await turn(srv, tid, "first question")
        env.timings["thread/start + first turn (acp start)"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1

        # reasoning: streamed as summary deltas of one part
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["Weighing the options."]
        deltas = notifications(events, "item/reasoning/summaryTextDelta")
        assert len(deltas) >= 2
        assert "".join(e["params"]["delta"] for e in deltas) == "Weighing the options."
        # text: streamed in several deltas (the fake sends 8-character chunks)
        assert len(notifications(events, "item/agentMessage/delta")) >= 4
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        assert t1["items"] == [message]
        order = [i["type"] for i in items_started(events)]
        assert order == ["userMessage", "reasoning", "agentMessage"], order
        usage = notifications(events, "thread/tokenUsage/updated")
        assert usage and usage[-1]["params"]["tokenUsage"]["last"]["inputTokens"] > 0

        # the role message reaches the model once, ahead of the first prompt
        [first_prompt] = [t for t in env.fake.user_texts(0) if "first question" in t]
        assert first_prompt.index(ROLE) < first_prompt.index("first question")
        assert role_count(env, 0) == 1

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["second turn (warm acp)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "Second answer."
        # the same OpenCode session: the model sees the first exchange, the role only once
        assert answer in assistant_texts(env)
        assert role_count(env) == 1
        assert len(session_ids(env)) == 1
        record = env.thread_record(tid)
        assert record["backend_session_id"] in session_ids(env)
        assert record["role_bootstrap_applied"] is True
        # one `opencode acp` for the cwd
        assert len(opencode_pids(srv, "acp")) == 1
    assert env.project_files() == []


# -- ACP: approvals --------------------------------------------------------------------------------


async def test_acp_command_and_file_approvals(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    """One thread, one turn per decision (the approval policy asks for bash and edits)."""
    env = opencode_env
    accepted = "printf yes > accepted.txt && echo wrote-it"
    (env.work / "old.txt").write_text("alpha\nbeta\ngamma\n")
    env.script(
        Rule("accept the command", [bash_call(accepted, "Write a file"), "Ran it."]),
        Rule("decline the command", [bash_call("printf no > declined.txt"), "Never said."]),
        Rule("cancel the command", [bash_call("printf no > cancelled.txt"), "Never said."]),
        Rule("write a file", [write_call("new.txt", "fresh\nlines\n"), "Wrote it."]),
        Rule("edit the file", [edit_call("old.txt", "beta", "BETA"), "Edited it."]),
        Rule("refused edit", [edit_call("old.txt", "gamma", "GAMMA"), "Never said."]),
        Rule("after", ["Still here."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        command_approval = "item/commandExecution/requestApproval"
        file_approval = "item/fileChange/requestApproval"

        # 1. accept: the command runs, its output streams, the model gets the result
        t, events = await turn(
            srv, tid, "accept the command", answer_by_method({command_approval: decide("accept")})
        )
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        params = ask["params"]
        assert params["threadId"] == tid and params["turnId"] == t["id"]
        assert params["command"] == accepted and params["cwd"] == str(env.work)
        [started] = items_started(events, "commandExecution")
        # the item announces the real command, not the tool's name
        assert started["id"] == params["itemId"] and started["command"] == accepted, started
        assert started["status"] == "inProgress" and started["cwd"] == str(env.work)
        assert order_of(events, started["id"], ask["id"]) == [
            "item/started",
            command_approval,
            "item/completed",
        ]
        assert resolved_ids(events) == [ask["id"]]
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "completed" and command["exitCode"] == 0, command
        assert command["aggregatedOutput"] == "wrote-it\n"
        output = notifications(events, "item/commandExecution/outputDelta")
        assert "".join(e["params"]["delta"] for e in output) == "wrote-it\n"
        assert (env.work / "accepted.txt").read_text() == "yes"
        [result] = env.fake.tool_results(-1)
        assert result["tool_call_id"] == started["id"] and result["content"] == "wrote-it\n"
        assert agent_text(events) == "Ran it."

        # 2. decline: nothing runs; OpenCode ends the turn without asking the model again
        calls = len(env.fake.model_requests)
        t, events = await turn(
            srv, tid, "decline the command", answer_by_method({command_approval: decide("decline")})
        )
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        [command] = items_completed(events, "commandExecution")
        assert command["id"] == ask["params"]["itemId"] and command["status"] == "declined"
        assert command["command"] == "printf no > declined.txt"
        assert not (env.work / "declined.txt").exists()
        assert len(env.fake.model_requests) == calls + 1
        assert agent_text(events) == ""

        # 3. cancel: declined natively and the turn is interrupted
        calls = len(env.fake.model_requests)
        t, events = await turn(
            srv, tid, "cancel the command", answer_by_method({command_approval: decide("cancel")})
        )
        assert t["status"] == "interrupted" and t.get("error") is None, t
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "declined", command
        assert not (env.work / "cancelled.txt").exists()
        assert len(env.fake.model_requests) == calls + 1

        # 4. a new file: the item shows the diff before the decision
        t, events = await turn(
            srv, tid, "write a file", answer_by_method({file_approval: decide("accept")})
        )
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        [started] = items_started(events, "fileChange")
        assert started["id"] == ask["params"]["itemId"]
        assert order_of(events, started["id"], ask["id"]) == [
            "item/started",
            file_approval,
            "item/completed",
        ]
        target = env.work / "new.txt"
        [change] = started["changes"]
        assert change["path"] == str(target) and change["kind"] == {"type": "add"}, change
        assert "+fresh\n+lines\n" in change["diff"], change
        [done] = items_completed(events, "fileChange")
        assert done["status"] == "completed" and done["changes"] == started["changes"], done
        assert target.read_text() == "fresh\nlines\n"
        assert agent_text(events) == "Wrote it."

        # 5. an edit: the diff has the file's context
        t, events = await turn(
            srv, tid, "edit the file", answer_by_method({file_approval: decide("accept")})
        )
        assert t["status"] == "completed", t
        [started] = items_started(events, "fileChange")
        [change] = started["changes"]
        assert change["path"] == str(env.work / "old.txt"), change
        assert change["kind"]["type"] == "update", change
        assert " alpha\n-beta\n+BETA\n gamma" in change["diff"], change
        [done] = items_completed(events, "fileChange")
        assert done["status"] == "completed" and done["changes"] == started["changes"], done
        assert (env.work / "old.txt").read_text() == "alpha\nBETA\ngamma\n"

        # 6. a declined edit: shown, not applied
        t, events = await turn(
            srv, tid, "refused edit", answer_by_method({file_approval: decide("decline")})
        )
        assert t["status"] == "completed", t
        [started] = items_started(events, "fileChange")
        assert "-gamma\n+GAMMA" in started["changes"][0]["diff"], started
        [done] = items_completed(events, "fileChange")
        assert done["status"] == "declined", done
        assert (env.work / "old.txt").read_text() == "alpha\nBETA\ngamma\n"

        # the thread goes on
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still here."
    assert env.project_files() == ["accepted.txt", "new.txt", "old.txt"]


# -- ACP: interrupts -------------------------------------------------------------------------------


async def test_acp_interrupts(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    env = opencode_env
    env.script(
        Rule(
            "stall",
            [Step([Text("Partial answer that never ends.")], stall_after_first_delta_ms=STALL_MS)],
        ),
        Rule("ask first", [bash_call("printf x > never.txt"), "Ran it."]),
        Rule("long command", [bash_call(f"sleep {SLEEP_S}"), "Done."]),
        Rule("after", ["Back to normal."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)

        # 1. while the answer streams
        turn_id = await srv.start_turn(tid, "stall please")
        seen: list[Any] = []
        await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen, timeout=60)
        acp = opencode_pids(srv, "acp")
        assert len(acp) == 1
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while streaming"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == agent_text(events) == "Partial answer t"

        # 2. while a permission request is pending
        turn_id = await srv.start_turn(tid, "ask first")
        seen = []
        ask = await srv.wait_for(is_method("item/commandExecution/requestApproval"), seen=seen)
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt with a permission pending"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        assert resolved_ids(events) == [ask["id"]]
        [command] = items_completed(events, "commandExecution")
        assert command["id"] == ask["params"]["itemId"] and command["status"] == "declined"
        # a late answer to the withdrawn request is harmless
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})

        # 3. while a command runs: OpenCode kills it
        turn_id = await srv.start_turn(tid, "long command")
        seen = []
        ask = await srv.wait_for(is_method("item/commandExecution/requestApproval"), seen=seen)
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        [command] = items_completed(events, "commandExecution")
        assert command["command"] == f"sleep {SLEEP_S}" and command["status"] == "failed", command
        # gone by turn/completed (threadline killed it; the turn did not wait for OpenCode's
        # own, late, answer to the cancelled prompt)
        assert env.sleepers(SLEEP_S) == []

        # 4. at once, the thread goes on, in the same agent process: the turn waits for that
        # answer, and gets only its own updates
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Back to normal."
        assert only_turn(events, t["id"])
        assert opencode_pids(srv, "acp") == acp
        assert not (env.work / "never.txt").exists()
        assert "stall please" in "\n".join(env.fake.user_texts(-1))
    assert env.project_files() == []


async def test_acp_cancel_beside_another_threads_turn(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    """turn/cancel on thread A (a `sleep` runs) while thread B, a session of the same agent
    process, streams its answer: A ends interrupted and its command is gone, B's turn
    completes untouched, and A's next turn works."""
    env = opencode_env
    beta = "BETA answer, streamed slowly in small chunks, while the other thread is cancelled."
    env.script(
        Rule("after", ["Back to normal."]),
        Rule("beta", [Step([Text(beta)], chunk_size=6, delay_ms=100)]),
        Rule("long command", [bash_call(f"sleep {SLEEP_S}"), "Done."]),
    )
    async with env.server(nursery) as srv:
        ta = await env.open_thread(srv)
        tb = await srv.start_thread(env.work, modelProvider="opencode")
        turn_a = await srv.start_turn(ta, "long command")
        seen: list[Any] = []
        ask = await srv.wait_for(is_method("item/commandExecution/requestApproval"), seen=seen)
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        turn_b = await srv.start_turn(tb, "beta task")
        await srv.wait_for(
            lambda e: is_method("item/agentMessage/delta")(e) and e["params"]["threadId"] == tb,
            seen=seen,
            timeout=60,
        )
        await srv.call("turn/cancel", {"threadId": ta, "turnId": turn_a})
        done_a, _ = await srv.collect_turn(turn_a, on_request=no_requests, events=seen)
        assert done_a["params"]["turn"]["status"] == "interrupted", done_a
        done_b, _ = await srv.collect_turn(turn_b, on_request=no_requests, events=seen)
        assert done_b["params"]["turn"]["status"] == "completed", done_b
        await env.wait_until(lambda: not env.sleepers(SLEEP_S), "the interrupted sleep ended", 5)
        a = [e for e in seen if e.get("params", {}).get("threadId") == ta]
        b = [e for e in seen if e.get("params", {}).get("threadId") == tb]
        assert_items_balanced(a)
        assert_items_balanced(b)
        assert only_turn(a, turn_a) and only_turn(b, turn_b)
        assert agent_text(b) == beta
        [command] = items_completed(a, "commandExecution")
        assert command["status"] == "failed", command

        t, events = await turn(srv, ta, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Back to normal."
        assert only_turn(events, t["id"])
        assert len(opencode_pids(srv, "acp")) == 1, "the agent was restarted, or two for one cwd"


# -- resume after a restart of threadline ----------------------------------------------------------


async def test_acp_resume_after_restart(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    """thread/resume in a new threadline: `session/load` continues the OpenCode session.
    (Run mode's resume is in `test_run_mode_prompt_verbatim_session_resume_and_role_once`.)"""
    env = opencode_env
    env.script(
        Rule("remember", ["Noted: PINEAPPLE."]),
        Rule("what was", ["It was PINEAPPLE."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE)
        t, _ = await turn(srv, tid, "remember the word PINEAPPLE")
        assert t["status"] == "completed", t
    session = env.thread_record(tid)["backend_session_id"]
    assert session and session.startswith("ses_")
    async with env.server(nursery) as srv:
        await srv.initialize()
        t0 = time.monotonic()
        resumed = await srv.call("thread/resume", {"threadId": tid})
        [old] = resumed["thread"]["turns"]
        assert old["status"] == "completed"
        t, events = await turn(srv, tid, "what was the word")
        env.timings["acp: resume + first turn"] = time.monotonic() - t0
        assert t["status"] == "completed" and agent_text(events) == "It was PINEAPPLE."
        # the replayed history is not shown as this turn's items
        assert [i["type"] for i in items_started(events)] == ["userMessage", "agentMessage"]
    # the same OpenCode session: the model saw the earlier exchange, and the role only once
    assert session_ids(env) == {session}
    assert "remember the word PINEAPPLE" in "\n".join(env.fake.user_texts(-1))
    assert "Noted: PINEAPPLE." in assistant_texts(env)
    assert role_count(env) == 1
    assert env.project_files() == []


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["acp", "run"])
async def test_http_errors_fail_the_turn_then_a_healthy_turn(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv, mode: str
) -> None:
    env = opencode_env
    env.script(
        Rule("unauthorized", [HttpError(401, "bad fake key")]),
        Rule("server error", [HttpError(500, "fake upstream failure", headers=FAST_500)]),
        Rule("healthy", ["All good again."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": mode})
        cases = [
            ("unauthorized", "bad fake key", "unauthorized"),
            ("server error", "fake upstream failure", "internalServerError"),
        ]
        for prompt, expected, info in cases:
            t0 = time.monotonic()
            t, events = await turn(srv, tid, f"{prompt} please")
            env.timings[f"{mode}: {prompt}"] = time.monotonic() - t0
            assert t["status"] == "failed", t
            # the provider's words: in the message, or its details when it says what to do
            assert expected in t["error"]["message"] + (t["error"].get("additionalDetails") or "")
            assert t["error"]["codexErrorInfo"] == info, t["error"]
            [error] = [e for e in notifications(events, "error") if not e["params"]["willRetry"]]
            assert error["params"]["error"] == t["error"]
            assert [i["type"] for i in items_started(events)] == ["userMessage"]
        t, events = await turn(srv, tid, "healthy now?")
        assert t["status"] == "completed" and agent_text(events) == "All good again."
    # 401 is not retried; 500 is (6 attempts)
    assert [r.rule for r in env.fake.model_requests] == ["unauthorized"] + ["server error"] * 6 + [
        "healthy"
    ]


@pytest.mark.parametrize("mode", SPECS["opencode"].modes)
async def test_missing_binary(nursery: trio.Nursery, opencode_env: OpenCodeEnv, mode: str) -> None:
    env = opencode_env
    await check_missing_cli(lambda: env.server(nursery), "opencode", mode, env.work)
    assert env.fake.requests == []


# -- run mode --------------------------------------------------------------------------------------


async def test_run_mode_prompt_verbatim_session_resume_and_role_once(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    # Quotes, a leading dash, shell syntax and newlines: argv would mangle it, stdin does not.
    prompt = "-n first question: say \"hi\" and 'bye'\n$HOME `date` --help\n\n  - indented"
    answer = "Run mode answer, in full."
    env.script(
        Rule("first question", [[Reasoning("Considering it."), Text(answer)]]),
        Rule("second question", ["Second run answer."]),
        Rule("third question", ["Third run answer."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE, config=RUN)
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, prompt)
        env.timings["run turn 1 (spawn)"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1
        # the prompt arrives verbatim, after the role message
        assert env.fake.model_requests[0].human_text == f"{ROLE}\n\n{prompt}"
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["Considering it."]
        # run mode has no deltas: the final text arrives as one delta, then the item
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        order = [i["type"] for i in items_started(events)]
        assert order == ["userMessage", "reasoning", "agentMessage"], order
        [usage1] = notifications(events, "thread/tokenUsage/updated")
        assert usage1["params"]["tokenUsage"]["last"]["inputTokens"] > 0

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["run turn 2 (--session)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "Second run answer."
        # `--session <id>`: the same OpenCode session, the model sees the first exchange
        assert len(session_ids(env)) == 1
        assert env.thread_record(tid)["backend_session_id"] in session_ids(env)
        assert answer in assistant_texts(env)
        assert role_count(env) == 1
        [usage2] = notifications(events, "thread/tokenUsage/updated")
        total1 = usage1["params"]["tokenUsage"]["total"]["inputTokens"]
        last2 = usage2["params"]["tokenUsage"]["last"]["inputTokens"]
        assert usage2["params"]["tokenUsage"]["total"]["inputTokens"] == total1 + last2
        assert opencode_pids(srv, "run") == []  # one process per turn, gone after it

    # a new threadline: thread/resume, and the next turn continues the same session
    async with env.server(nursery) as srv:
        await srv.initialize()
        t0 = time.monotonic()
        resumed = await srv.call("thread/resume", {"threadId": tid})
        assert [t["status"] for t in resumed["thread"]["turns"]] == ["completed", "completed"]
        t3, events = await turn(srv, tid, "third question")
        env.timings["run: resume + turn 3"] = time.monotonic() - t0
        assert t3["status"] == "completed" and agent_text(events) == "Third run answer."
    assert len(session_ids(env)) == 1
    assert "second question" in "\n".join(env.fake.user_texts(-1))
    assert "Second run answer." in assistant_texts(env)
    assert role_count(env) == 1
    # `--title` spares the title side call; OpenCode wrote nothing into the project
    assert env.fake.side_requests == []
    assert env.project_files() == []


async def test_run_mode_permissions_interrupt_and_cancel(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    """Run mode cannot ask: bash is refused unless the policy is `never` (then `--auto`).
    It has no native interrupt: threadline kills the process group and the tool's shell,
    which OpenCode runs in a session of its own."""
    env = opencode_env
    env.script(
        Rule("write via bash", [bash_call("printf ran > ran.txt && echo wrote-it"), "Tried."]),
        Rule("stall", [Step([Text("Never finished.")], stall_after_first_delta_ms=STALL_MS)]),
        Rule("long command", [bash_call(f"sleep {SLEEP_S}"), "Done."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        # default policy: OpenCode is told to ask, and run mode refuses what it would ask
        tid = await env.open_thread(srv, config=RUN)
        t, events = await turn(srv, tid, "write via bash")
        assert t["status"] == "completed", t
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "declined", command
        assert command["command"] == "printf ran > ran.txt && echo wrote-it"
        assert not (env.work / "ran.txt").exists()

        # approvalPolicy never: `--auto`, the command runs
        tid = await srv.start_thread(
            env.work, modelProvider="opencode", approvalPolicy="never", config=RUN
        )
        t, events = await turn(srv, tid, "write via bash")
        assert t["status"] == "completed", t
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "completed" and command["exitCode"] == 0, command
        assert command["aggregatedOutput"] == "wrote-it\n" and command["cwd"] == str(env.work)
        assert (env.work / "ran.txt").read_text() == "ran"
        assert agent_text(events) == "Tried."

        # turn/interrupt while the model streams
        calls = len(env.fake.model_requests)
        turn_id = await srv.start_turn(tid, "stall please")
        await trio.to_thread.run_sync(env.fake.wait_for_requests, calls + 1, 30)
        runs = opencode_pids(srv, "run")
        assert len(runs) == 1
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, on_request=no_requests)
        env.timings["run interrupt while streaming"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert [i["type"] for i in items_started(events)] == ["userMessage"]
        assert opencode_pids(srv, "run") == []

        # turn/cancel while `sleep` runs: the escaped shell is killed too
        turn_id = await srv.start_turn(tid, "long command")
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started", 30)
        sleepers = env.sleepers(SLEEP_S)
        [run] = opencode_pids(srv, "run")
        # the shell escaped the CLI's process group: a group kill alone would orphan it
        assert {os.getsid(p) for p in sleepers}.isdisjoint({os.getsid(run)}), sleepers
        t0 = time.monotonic()
        await srv.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, on_request=no_requests)
        env.timings["run cancel while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        # gone by turn/completed: the sleep (in its own session) and the run process
        assert env.sleepers(SLEEP_S) == [], sleepers
        assert opencode_pids(srv, "run") == []

        # the thread goes on (`--session`): the model sees the interrupted turns
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Recovered."
        history = "\n".join(env.fake.user_texts(-1))
        assert "long command" in history and "write via bash" in history
    # only what the agent was asked to write
    assert env.project_files() == ["ran.txt"]
