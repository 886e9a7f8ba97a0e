"""The Codex backend end to end: threadline as a subprocess, driving the real `codex` CLI
(`codex app-server` per thread by default, `codex exec --json` per turn with
`config: {"mode": "exec"}`), which talks to the scripted fake Responses API
(tests/fakes/openai_responses.py).

Each test asserts what a client sees (notifications, server requests, turn status and error)
and what really happened (files on disk, processes in /proc, what the model was sent). The
fixture checks that no process started for a test survives it. Every message threadline writes
is validated against schemas/ by the test client.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import pytest
import trio

from tests.e2e.codex_env import CodexEnv, codex_pids
from tests.fakes.openai_responses import (
    ApplyPatch,
    ExecCommand,
    HttpError,
    Reasoning,
    Rule,
    Step,
    Text,
)
from tests.support.cli_env import cmdline
from tests.support.client import (
    Message,
    assert_items_balanced,
    notifications,
)
from tests.support.events import (
    agent_text,
    answer_by_method,
    ask_order,
    decide,
    is_method,
    items_completed,
    items_started,
    no_requests,
    requests_in,
    resolved_ids,
    turn,
)
from tests.support.missing_cli import check_missing_cli
from threadline.backends.registry import SPECS

pytestmark = pytest.mark.e2e

ROLE = "DEV-MARKER-7: you are the reviewer; answer in one line."
EXEC = {"mode": "exec"}
STALL_MS = 60_000  # a stream that stalls "forever" after its first delta
SLEEP_S = 300
ESCALATE_WHY = "Needs to write outside the read-only sandbox"
ASK = {"approvalPolicy": "on-request", "sandbox": "read-only"}


# -- helpers ---------------------------------------------------------------------------------------


def escalated(cmd: str) -> ExecCommand:
    """A command the model wants to run outside the sandbox: under read-only + on-request,
    Codex asks for approval with `ESCALATE_WHY` as the reason."""
    return ExecCommand(cmd, sandbox_permissions="require_escalated", justification=ESCALATE_WHY)


def assistant_texts(env: CodexEnv, i: int = -1) -> list[str]:
    return [
        p.get("text", "")
        for item in env.fake.input(i)
        if item.get("role") == "assistant"
        for p in item.get("content") or []
        if isinstance(p, dict)
    ]


# -- streamed text, reasoning, developer instructions ----------------------------------------------


async def test_app_server_streams_text_and_reasoning(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    answer = "The answer is forty-two, as computed."
    env.script(
        Rule("first question", [[Reasoning(["Weighing the options.", "Deciding."]), Text(answer)]]),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        init = await srv.initialize()
        [info] = [b for b in init["backends"] if b["id"] == "codex"]
        assert info["available"] is True and info["path"] == str(env.cli), info
        assert re.fullmatch(r"(codex-cli )?\d+\.\d+\.\d+", info["version"]), info
        t0 = time.monotonic()
        tid = await srv.start_thread(env.work, modelProvider="codex", developerInstructions=ROLE)
        t1, events = await turn(srv, tid, "first question")
        env.timings["thread/start + first turn"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1

        # reasoning: summary parts streamed as deltas, one summary string per part
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["Weighing the options.", "Deciding."]
        parts = notifications(events, "item/reasoning/summaryPartAdded")
        assert [p["params"]["summaryIndex"] for p in parts] == [0, 1]
        summary = notifications(events, "item/reasoning/summaryTextDelta")
        assert "".join(e["params"]["delta"] for e in summary) == "Weighing the options.Deciding."
        # text: streamed in several deltas (the fake sends 16-character chunks)
        assert len(notifications(events, "item/agentMessage/delta")) >= 2
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        order = [i["type"] for i in items_started(events)]
        assert order == ["userMessage", "reasoning", "agentMessage"], order
        usage = notifications(events, "thread/tokenUsage/updated")
        assert usage and usage[-1]["params"]["tokenUsage"]["total"]["inputTokens"] > 0

        # developer instructions reach the model as a developer message
        assert ROLE in env.fake.developer_text(0)
        assert ROLE not in "\n".join(env.fake.user_texts(0))

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["second turn (warm app-server)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "Second answer."
        # the same Codex thread: the model sees the first exchange
        assert answer in assistant_texts(env)
        assert "first question" in env.fake.user_texts(-1)
        # one app-server for the thread: the native binary, not the npm launcher's Node process
        [pid] = codex_pids(srv, "app-server")
        assert os.path.basename(cmdline(pid)[0]) == "codex", cmdline(pid)
    assert len({r.headers.get("thread-id") for r in env.fake.model_requests}) == 1


async def test_exec_mode_text_reasoning_and_resume(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    answer = "Exec mode answer, in full."
    env.script(
        Rule(
            "first question",
            [
                Step(
                    [Reasoning("Considering it."), Text(answer)],
                    input_tokens=1000,
                    output_tokens=50,
                )
            ],
        ),
        Rule(
            "second question",
            [Step([Text("Second exec answer.")], input_tokens=1500, output_tokens=30)],
        ),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE, config=EXEC)
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, "first question")
        env.timings["exec turn 1 (spawn)"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1
        [reasoning] = items_completed(events, "reasoning")
        assert reasoning["summary"] == ["Considering it."]
        # exec --json has no deltas: the final text arrives as one delta, then the item
        assert agent_text(events) == answer
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == answer
        assert [i["type"] for i in items_started(events)] == [
            "userMessage",
            "reasoning",
            "agentMessage",
        ]
        [usage1] = notifications(events, "thread/tokenUsage/updated")
        assert ROLE in env.fake.developer_text(0)

        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "second question")
        env.timings["exec turn 2 (exec resume)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "Second exec answer."
        # `exec resume <id>`: the same Codex thread, the model sees the first exchange
        first, second = env.fake.model_requests
        assert first.headers["thread-id"] == second.headers["thread-id"]
        assert "cold_resume" in second.headers.get("x-codex-turn-metadata", "")
        assert answer in assistant_texts(env) and "first question" in env.fake.user_texts(-1)
        assert ROLE in env.fake.developer_text(-1)

        # exec reports the thread's cumulative usage; `last` is this turn's own
        def tokens(event: Message, key: str) -> tuple[int, int]:
            usage = event["params"]["tokenUsage"][key]
            return usage["inputTokens"], usage["outputTokens"]

        [usage2] = notifications(events, "thread/tokenUsage/updated")
        assert tokens(usage1, "total") == tokens(usage1, "last") == (1000, 50)
        assert tokens(usage2, "total") == (2500, 80)
        assert tokens(usage2, "last") == (1500, 30)


# -- approvals (app-server) ------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["accept", "decline", "cancel"])
async def test_command_approval(nursery: trio.Nursery, codex_env: CodexEnv, decision: str) -> None:
    env = codex_env
    cmd = "printf approved > approved.txt && echo wrote-it"
    env.script(Rule("escalate", [escalated(cmd), "Finished."]), Rule("after", ["Still here."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, **ASK)
        t, events = await turn(
            srv,
            tid,
            "please escalate",
            answer_by_method({"item/commandExecution/requestApproval": decide(decision)}),
        )
        [ask] = requests_in(events)
        params = ask["params"]
        assert params["threadId"] == tid and params["turnId"] == t["id"]
        assert params["reason"] == ESCALATE_WHY and cmd in params["command"]
        assert params["cwd"] == str(env.work)
        [started] = items_started(events, "commandExecution")
        assert started["id"] == params["itemId"] and started["status"] == "inProgress"
        # Codex's parse of the command, the same on the request as on the item
        assert (
            params["commandActions"]
            == started["commandActions"]
            == [{"type": "unknown", "command": cmd}]
        )
        [command] = items_completed(events, "commandExecution")
        assert command["id"] == params["itemId"]
        assert resolved_ids(events) == [ask["id"]]
        # the request is announced between the item's start and its completion
        order = ask_order(events, ask, params["itemId"])
        assert order == [
            "item/started",
            "item/commandExecution/requestApproval",
            "item/completed",
        ], order
        written = env.work / "approved.txt"
        if decision == "accept":
            assert t["status"] == "completed", t
            assert written.read_text() == "approved"
            assert command["status"] == "completed" and command["exitCode"] == 0
            assert "wrote-it" in command["aggregatedOutput"]
            [output] = env.fake.function_outputs(-1)
            assert output["call_id"] == params["itemId"] and "wrote-it" in output["output"]
            assert agent_text(events) == "Finished."
        elif decision == "decline":
            assert t["status"] == "completed", t
            assert not written.exists()
            assert command["status"] == "declined"
            [output] = env.fake.function_outputs(-1)
            assert "rejected by user" in output["output"], output
            assert agent_text(events) == "Finished."
        else:
            assert t["status"] == "interrupted" and t.get("error") is None, t
            assert not written.exists()
            assert command["status"] == "declined"
            assert len(env.fake.model_requests) == 1  # the model was not asked again
        # the thread goes on
        t2, events = await turn(srv, tid, "after that")
        assert t2["status"] == "completed" and agent_text(events) == "Still here."


@pytest.mark.parametrize("decision", ["accept", "decline"])
async def test_file_change_approval(
    nursery: trio.Nursery, codex_env: CodexEnv, decision: str
) -> None:
    env = codex_env
    # (A top-level file: under read-only, an approved patch still cannot create directories —
    # Codex 0.169 answers "Failed to create parent directories".)
    env.script(Rule("add a file", [ApplyPatch("added.txt", "line one\nline two"), "Done."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, **ASK)
        t, events = await turn(
            srv,
            tid,
            "please add a file",
            answer_by_method({"item/fileChange/requestApproval": decide(decision)}),
        )
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        [started] = items_started(events, "fileChange")
        assert started["id"] == ask["params"]["itemId"] and started["status"] == "inProgress"
        # the diff is shown before the decision
        target = env.work / "added.txt"
        [change] = started["changes"]
        assert change["path"] == str(target) and change["kind"] == {"type": "add"}
        assert "line two" in change["diff"]
        [done] = items_completed(events, "fileChange")
        assert resolved_ids(events) == [ask["id"]]
        [output] = env.fake.function_outputs(-1)
        assert output["type"] == "custom_tool_call_output"
        if decision == "accept":
            assert target.read_text() == "line one\nline two\n"
            assert done["status"] == "completed"
            assert notifications(events, "turn/diff/updated")
        else:
            assert not target.exists()
            assert done["status"] == "declined"
            assert "rejected by user" in output["output"], output
        assert agent_text(events) == "Done."


# -- interrupts ------------------------------------------------------------------------------------


async def test_interrupt_mid_stream_and_with_approval_pending(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule(
            "stall",
            [Step([Text("Partial answer that never ends.")], stall_after_first_delta_ms=STALL_MS)],
        ),
        Rule("escalate", [escalated("printf x > never.txt"), "Ran it."]),
        Rule("after", ["Back to normal."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, **ASK)
        # thread/start pre-warms the thread's app-server
        await env.wait_until(lambda: bool(codex_pids(srv, "app-server")), "app-server started")
        app_server = codex_pids(srv, "app-server")

        # 1. while the answer streams
        turn_id = await srv.start_turn(tid, "stall please")
        seen: list[Any] = []
        await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen)
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while streaming"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        # Codex leaves the message open; threadline completes it with what was streamed
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == agent_text(events) == "Partial answer t"

        # 2. while an approval is pending
        turn_id = await srv.start_turn(tid, "please escalate")
        seen = []
        ask = await srv.wait_for(is_method("item/commandExecution/requestApproval"), seen=seen)
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt with an approval pending"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        assert resolved_ids(events) == [ask["id"]]
        [command] = items_completed(events, "commandExecution")
        assert command["id"] == ask["params"]["itemId"] and command["status"] == "declined"
        # a late answer to the withdrawn request is harmless
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})
        assert not (env.work / "never.txt").exists()

        # 3. the thread goes on, in the same app-server; the model was told of both interrupts
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Back to normal."
        assert codex_pids(srv, "app-server") == app_server
        aborted = [u for u in env.fake.user_texts(-1) if "<turn_aborted>" in u]
        assert len(aborted) == 2, env.fake.user_texts(-1)
        assert not (env.work / "never.txt").exists()


async def test_interrupt_while_a_command_runs(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    env = codex_env
    env.script(
        Rule("long command", [ExecCommand(f"sleep {SLEEP_S}", yield_time_ms=30_000), "Done."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", sandbox="workspace-write")
        turn_id = await srv.start_turn(tid, "run the long command")
        seen: list[Any] = []
        await srv.wait_for(
            lambda e: (
                is_method("item/started")(e) and e["params"]["item"]["type"] == "commandExecution"
            ),
            seen=seen,
        )
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        before = codex_pids(srv, "app-server")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "failed", command
        # Codex would leave `sleep` running: threadline kills it (its sandbox's session) right
        # after the interrupt, and has seen it gone by the time the turn completes
        assert env.sleepers(SLEEP_S) == [], "the interrupted sleep still runs"

        t0 = time.monotonic()
        t, events = await turn(srv, tid, "after that")
        env.timings["turn after the interrupt"] = time.monotonic() - t0
        assert t["status"] == "completed" and agent_text(events) == "Recovered."
        # ...so the app-server needs no restart (nor the next turn its start-up)
        assert codex_pids(srv, "app-server") == before, "the app-server was restarted"
        assert "run the long command" in env.fake.user_texts(-1)
        assert any("<turn_aborted>" in u for u in env.fake.user_texts(-1))
        heads = {r.headers.get("thread-id") for r in env.fake.model_requests}
        assert len(heads) == 1, heads


async def test_app_server_killed_while_idle(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    """The thread's app-server dies between turns: the next turn starts a new one, which
    resumes the Codex thread."""
    env = codex_env
    env.script(Rule("remember", ["Noted: MANGO."]), Rule("what was", ["It was MANGO."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t, _ = await turn(srv, tid, "remember the word MANGO")
        assert t["status"] == "completed", t
        [pid] = codex_pids(srv, "app-server")
        os.kill(pid, signal.SIGKILL)
        # (reaped by threadline, which then knows the session is dead)
        await env.wait_until(lambda: not os.path.exists(f"/proc/{pid}"), "app-server reaped")
        t0 = time.monotonic()
        t, events = await turn(srv, tid, "what was the word")
        env.timings["turn after the app-server died (restart + resume)"] = time.monotonic() - t0
        assert t["status"] == "completed", t
        assert agent_text(events) == "It was MANGO."
        assert "remember the word MANGO" in env.fake.user_texts(-1)
        assert len({r.headers.get("thread-id") for r in env.fake.model_requests}) == 1


# -- resume after a restart of threadline ----------------------------------------------------------


@pytest.mark.parametrize("mode", ["app-server", "exec"])
async def test_resume_after_restart(nursery: trio.Nursery, codex_env: CodexEnv, mode: str) -> None:
    env = codex_env
    env.script(
        Rule("remember", ["Noted: PINEAPPLE."]),
        Rule("what was", ["It was PINEAPPLE."]),
    )
    config = {"mode": mode}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, developerInstructions=ROLE, config=config)
        t, _ = await turn(srv, tid, "remember the word PINEAPPLE")
        assert t["status"] == "completed", t
    async with env.server(nursery) as srv:
        await srv.initialize()
        t0 = time.monotonic()
        resumed = await srv.call("thread/resume", {"threadId": tid})
        [old] = resumed["thread"]["turns"]
        assert old["status"] == "completed"
        t, events = await turn(srv, tid, "what was the word")
        env.timings[f"{mode}: resume + first turn"] = time.monotonic() - t0
        assert t["status"] == "completed" and agent_text(events) == "It was PINEAPPLE."
    # the model saw the earlier exchange, in the same Codex thread, with the role kept
    assert "remember the word PINEAPPLE" in env.fake.user_texts(-1)
    assert "Noted: PINEAPPLE." in assistant_texts(env)
    assert ROLE in env.fake.developer_text(-1)
    assert len({r.headers.get("thread-id") for r in env.fake.model_requests}) == 1


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["app-server", "exec"])
async def test_http_errors_fail_the_turn_then_a_healthy_turn(
    nursery: trio.Nursery, codex_env: CodexEnv, mode: str
) -> None:
    env = codex_env
    env.script(
        Rule("unauthorized", [HttpError(401, "bad fake key")]),
        Rule("server error", [HttpError(500, "fake internal error")]),
        Rule("healthy", ["All good again."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": mode})
        # Both modes report what `codex app-server` itself reports (exec mode maps its texts)
        cases = [
            (
                "unauthorized",
                "401 Unauthorized: bad fake key",
                "unauthorized",
            ),
            # Codex hides 5xx bodies behind its own text
            ("server error", "high demand", "internalServerError"),
        ]
        for prompt, expected, info in cases:
            t, events = await turn(srv, tid, f"{prompt} please")
            assert t["status"] == "failed", t
            # Codex's words: in the message, or its details when it says what to do instead
            assert expected in t["error"]["message"] + (t["error"].get("additionalDetails") or "")
            assert t["error"]["codexErrorInfo"] == info, t["error"]
            [error] = [e for e in notifications(events, "error") if not e["params"]["willRetry"]]
            assert error["params"]["error"] == t["error"]
        t, events = await turn(srv, tid, "healthy now?")
        assert t["status"] == "completed" and agent_text(events) == "All good again."


@pytest.mark.parametrize("mode", SPECS["codex"].modes)
async def test_missing_binary(nursery: trio.Nursery, codex_env: CodexEnv, mode: str) -> None:
    env = codex_env
    await check_missing_cli(lambda: env.server(nursery), "codex", mode, env.work)
    assert env.fake.model_requests == []


# -- exec mode: policy, interrupt and cancel -------------------------------------------------------


async def test_exec_mode_sandbox_follows_the_approval_policy(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    cmd = "printf ran > out.txt && echo wrote-it"
    env.script(Rule("write it", [ExecCommand(cmd), "Tried."]))
    async with env.server(nursery) as srv:
        # default policy: read-only sandbox, the write fails (exec cannot ask)
        tid = await env.open_thread(srv, config=EXEC)
        t, events = await turn(srv, tid, "write it")
        assert t["status"] == "completed", t
        assert not (env.work / "out.txt").exists()
        [output] = env.fake.function_outputs(-1)
        assert "Read-only file system" in output["output"], output
        # (codex exec 0.169 emits no command_execution item for a command the sandbox failed)
        assert all(c["status"] != "completed" for c in items_completed(events, "commandExecution"))
        assert agent_text(events) == "Tried."

        # approvalPolicy never: no sandbox (--dangerously-bypass-approvals-and-sandbox)
        tid = await srv.start_thread(
            env.work, modelProvider="codex", approvalPolicy="never", config=EXEC
        )
        t, events = await turn(srv, tid, "write it")
        assert t["status"] == "completed", t
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "completed" and command["exitCode"] == 0, command
        assert "wrote-it" in command["aggregatedOutput"]
        assert (env.work / "out.txt").read_text() == "ran"
        assert agent_text(events) == "Tried."


async def test_exec_mode_interrupt_and_cancel(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    """Exec mode has no native interrupt: threadline kills the `codex exec` process group."""
    env = codex_env
    env.script(
        Rule("stall", [Step([Text("Never finished.")], stall_after_first_delta_ms=STALL_MS)]),
        Rule("long command", [ExecCommand(f"sleep {SLEEP_S}", yield_time_ms=30_000), "Done."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", config=EXEC)

        # 1. turn/interrupt while the model streams (exec shows nothing until an item is done)
        turn_id = await srv.start_turn(tid, "stall please")
        await trio.to_thread.run_sync(env.fake.wait_for_requests, 1)
        await env.wait_until(lambda: bool(codex_pids(srv, "exec")), "codex exec started")
        execs = codex_pids(srv, "exec")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, on_request=no_requests)
        env.timings["exec interrupt while streaming"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert [i["type"] for i in items_started(events)] == ["userMessage"]
        assert not set(codex_pids(srv, "exec")) & set(execs)

        # 2. turn/cancel while a command runs
        turn_id = await srv.start_turn(tid, "run the long command")
        seen: list[Any] = []
        await srv.wait_for(
            lambda e: (
                is_method("item/started")(e) and e["params"]["item"]["type"] == "commandExecution"
            ),
            seen=seen,
        )
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        execs = codex_pids(srv, "exec")
        assert execs
        t0 = time.monotonic()
        await srv.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["exec cancel while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        [command] = items_completed(events, "commandExecution")
        assert command["status"] == "failed", command
        # the exec process group and the sleep are gone by turn/completed
        assert env.sleepers(SLEEP_S) == []
        assert not set(codex_pids(srv, "exec")) & set(execs)

        # 3. the thread goes on (`exec resume`): the model sees both earlier prompts
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Recovered."
        assert {"stall please", "run the long command"} <= set(env.fake.user_texts(-1))
