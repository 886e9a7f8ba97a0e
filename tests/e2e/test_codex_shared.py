"""One `codex app-server` shared by a server's codex threads, with the real `codex` CLI against
the fake Responses API: the threads share the process, their turns run at once with every event
on its own thread, and each thread stays isolated from the others' failures — a process killed
mid-turn fails only the turn it was running (the other thread resumes on a new process), an
interrupt kills only its own thread's command, a process that hangs is retired (a new thread
gets a new one) without ending the other thread's turn. The fixture checks no process
outlives the test.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.codex_env import CodexEnv, codex_pids
from tests.fakes.openai_responses import ExecCommand, Rule, Step, Text
from tests.support.client import ServerProcess, assert_items_balanced, notifications
from tests.support.events import agent_text, is_method, items_completed, turn

pytestmark = pytest.mark.e2e

STALL_MS = 60_000
NEVER = {"approvalPolicy": "never", "sandbox": "workspace-write"}


async def collect_turns(
    srv: ServerProcess, turn_ids: set[str], order: list[tuple[str, str]] | None = None
) -> dict[str, list[Any]]:
    """Every event until each of `turn_ids` has completed, by the thread it names (`order`:
    (thread, method) of each, as they came)."""
    by_thread: dict[str, list[Any]] = {}
    order = [] if order is None else order
    left = set(turn_ids)
    with trio.fail_after(60):
        while left:
            event = await srv.events.receive()
            if not isinstance(event, dict) or "method" not in event:
                continue
            assert "id" not in event, f"unexpected server request {event}"
            thread_id = (event.get("params") or {}).get("threadId")
            if thread_id is not None:
                by_thread.setdefault(thread_id, []).append(event)
                order.append((thread_id, event["method"]))
            if event["method"] == "turn/completed":
                left.discard(event["params"]["turn"]["id"])
    return by_thread


def thread_of(event: Any) -> str | None:
    params = event.get("params") if isinstance(event, dict) else None
    return (params or {}).get("threadId")


def commands_started(threads: set[str]) -> Callable[[Any], bool]:
    """A `wait_for` predicate: true once each of `threads` has shown a command starting."""
    started: set[str] = set()

    def check(event: Any) -> bool:
        item = ((event.get("params") or {}).get("item") or {}) if isinstance(event, dict) else {}
        if event.get("method") == "item/started" and item.get("type") == "commandExecution":
            started.add(event["params"]["threadId"])
        return started >= threads

    return check


def status_of(events: list[Any]) -> dict[str, Any]:
    [done] = notifications(events, "turn/completed")
    return done["params"]["turn"]  # type: ignore[no-any-return]


async def test_threads_share_one_app_server_and_their_events_stay_apart(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    alpha = "Alpha answer: the first thread's own words, streamed in many small chunks."
    beta = "Beta answer: the second thread's reply, also streamed chunk by chunk here."
    env.script(
        Rule("alpha question", [Step([Text(alpha)], delay_ms=40)]),
        Rule("beta question", [Step([Text(beta)], delay_ms=40)]),
        Rule("alpha again", ["Alpha remembers."]),
    )
    async with env.server(nursery, THREADLINE_IDLE_TIMEOUT="2", THREADLINE_LOG_LEVEL="INFO") as srv:
        a = await env.open_thread(srv, **NEVER)
        b = await srv.start_thread(env.work, modelProvider="codex", **NEVER)
        await env.wait_until(lambda: bool(codex_pids(srv, "app-server")), "app-server started")
        [shared] = codex_pids(srv, "app-server")

        # both turns at once: each thread sees its own answer, nothing of the other's
        turn_a = await srv.start_turn(a, "alpha question")
        turn_b = await srv.start_turn(b, "beta question")
        order: list[tuple[str, str]] = []
        by_thread = await collect_turns(srv, {turn_a, turn_b}, order)
        assert set(by_thread) == {a, b}
        for tid, tid_turn, answer in ((a, turn_a, alpha), (b, turn_b, beta)):
            events = by_thread[tid]
            done = status_of(events)
            assert done["id"] == tid_turn and done["status"] == "completed", done
            assert agent_text(events) == answer
            assert_items_balanced(events)
            assert all(e["params"].get("turnId", tid_turn) == tid_turn for e in events)
        # ...and they overlapped: each streamed while the other one was running
        for one, other in ((a, b), (b, a)):
            first_delta = order.index((one, "item/agentMessage/delta"))
            assert first_delta < order.index((other, "turn/completed")), order
        assert len(env.fake.model_requests) == 2
        assert codex_pids(srv, "app-server") == [shared]
        heads = [r.headers.get("thread-id") for r in env.fake.model_requests]
        assert len(set(heads)) == 2, heads

        # the idle policy releases both threads: the shared process goes with the last of
        # them (no lingering: the policy waited already), and the next turn resumes the
        # thread on a new one
        await env.wait_until(
            lambda: srv.stderr_text.count("stopping its CLI") == 2, "both threads released"
        )
        await env.wait_until(lambda: not codex_pids(srv, "app-server"), "the app-server gone")
        t, events = await turn(srv, a, "alpha again")
        assert t["status"] == "completed" and agent_text(events) == "Alpha remembers."
        assert "alpha question" in env.fake.user_texts(-1)
        assert "beta question" not in env.fake.user_texts(-1)
        [again] = codex_pids(srv, "app-server")
        assert again != shared


async def test_killed_app_server_fails_only_the_running_turn(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("remember", ["Noted: KIWI."]),
        Rule(
            "stall",
            [Step([Text("Half an answer that never ends.")], stall_after_first_delta_ms=STALL_MS)],
        ),
        Rule("what was", ["It was KIWI."]),
        Rule("after the crash", ["Running again."]),
    )
    async with env.server(nursery) as srv:
        a = await env.open_thread(srv, **NEVER)
        b = await srv.start_thread(env.work, modelProvider="codex", **NEVER)
        t, _ = await turn(srv, b, "remember the word KIWI")
        assert t["status"] == "completed", t
        [old] = codex_pids(srv, "app-server")
        b_codex_thread = env.fake.model_requests[-1].headers.get("thread-id")

        turn_a = await srv.start_turn(a, "stall please")
        seen: list[Any] = []
        await srv.wait_for(is_method("item/agentMessage/delta"), seen=seen)
        os.kill(old, signal.SIGKILL)
        done, events = await srv.collect_turn(turn_a, events=seen)
        failed = done["params"]["turn"]
        assert failed["status"] == "failed", failed
        message = failed["error"]["message"]
        assert "codex" in message and "killed by SIGKILL" in message, message
        assert_items_balanced(events)
        await env.wait_until(lambda: not os.path.exists(f"/proc/{old}"), "old app-server reaped")
        # the pool restarts the process at once (its threads' next turns need no start-up)
        await env.wait_until(lambda: bool(codex_pids(srv, "app-server")), "app-server restarted")
        [new] = codex_pids(srv, "app-server")
        assert new != old

        # the other thread (idle on the same process) goes on: on the new process, its
        # Codex thread resumed there with its history
        t0 = time.monotonic()
        t, events = await turn(srv, b, "what was the word")
        env.timings["idle thread's turn after the shared process died"] = time.monotonic() - t0
        assert t["status"] == "completed" and agent_text(events) == "It was KIWI."
        assert "remember the word KIWI" in env.fake.user_texts(-1)
        assert env.fake.model_requests[-1].headers.get("thread-id") == b_codex_thread
        assert codex_pids(srv, "app-server") == [new]
        # and so does the thread whose turn failed, on the same new process
        t, events = await turn(srv, a, "after the crash")
        assert t["status"] == "completed" and agent_text(events) == "Running again."
        assert "stall please" in env.fake.user_texts(-1)
        assert codex_pids(srv, "app-server") == [new]


async def test_interrupt_kills_only_its_own_threads_command(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("first sleeper", [ExecCommand("sleep 301", yield_time_ms=30_000), "Done one."]),
        Rule("second sleeper", [ExecCommand("sleep 302", yield_time_ms=30_000), "Done two."]),
        Rule("after", ["Still fine."]),
    )
    async with env.server(nursery) as srv:
        a = await env.open_thread(srv, **NEVER)
        b = await srv.start_thread(env.work, modelProvider="codex", **NEVER)
        turn_a = await srv.start_turn(a, "first sleeper")
        turn_b = await srv.start_turn(b, "second sleeper")
        # Both commands run and are shown (an interrupt before Codex reports a command leaves
        # no item of it: Codex abandons what it has not announced).
        seen: list[Any] = []
        await srv.wait_for(commands_started({a, b}), timeout=60, seen=seen)
        await env.wait_until(lambda: bool(env.sleepers(301) and env.sleepers(302)), "both sleep")
        [shared] = codex_pids(srv, "app-server")

        await srv.call("turn/interrupt", {"threadId": a, "turnId": turn_a})
        by_thread = await collect_turns(srv, {turn_a})
        events_a = [e for e in seen if thread_of(e) == a] + by_thread[a]
        assert status_of(events_a)["status"] == "interrupted"
        [command] = items_completed(events_a, "commandExecution")
        assert command["status"] == "failed", command
        # thread a's command is gone by its turn/completed; thread b's still runs, its turn too
        assert env.sleepers(301) == []
        assert env.sleepers(302), "the other thread's command was killed"
        assert not notifications(by_thread.get(b, []), "turn/completed")
        assert codex_pids(srv, "app-server") == [shared]

        await srv.call("turn/interrupt", {"threadId": b, "turnId": turn_b})
        by_thread = await collect_turns(srv, {turn_b})
        assert status_of(by_thread[b])["status"] == "interrupted"
        assert env.sleepers(302) == []
        t, events = await turn(srv, a, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still fine."
        assert codex_pids(srv, "app-server") == [shared]


async def test_a_hung_app_server_is_retired_without_ending_other_turns(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("stall", [Step([Text("Stuck here forever.")], stall_after_first_delta_ms=STALL_MS)]),
        Rule("slow one", [Step([Text("The slow thread finished after the hang.")], delay_ms=20)]),
        Rule("new thread", ["A fresh process answers."]),
    )
    async with env.server(nursery, THREADLINE_INTERRUPT_GRACE="1") as srv:
        a = await env.open_thread(srv, **NEVER)
        b = await srv.start_thread(env.work, modelProvider="codex", **NEVER)
        await env.wait_until(lambda: bool(codex_pids(srv, "app-server")), "app-server started")
        [hung] = codex_pids(srv, "app-server")
        turn_a = await srv.start_turn(a, "stall please")
        await srv.wait_for(is_method("item/agentMessage/delta"))
        os.kill(hung, signal.SIGSTOP)  # the process stops answering
        try:
            turn_b = await srv.start_turn(b, "slow one")
            await srv.call("turn/interrupt", {"threadId": a, "turnId": turn_a})
            by_thread = await collect_turns(srv, {turn_a})
            assert status_of(by_thread[a])["status"] == "interrupted"
            # the process did not end the abandoned turn: retired, so a new thread gets a
            # new process, and runs its turn there
            c = await srv.start_thread(env.work, modelProvider="codex", **NEVER)
            t, events = await turn(srv, c, "new thread")
            assert t["status"] == "completed" and agent_text(events) == "A fresh process answers."
            assert len(codex_pids(srv, "app-server")) == 2
            assert hung in codex_pids(srv, "app-server")
        finally:
            os.kill(hung, signal.SIGCONT)
        # the other thread's turn on the retired process was never ended: it goes on
        by_thread = await collect_turns(srv, {turn_b})
        done = status_of(by_thread[b])
        assert done["status"] == "completed", done
        assert agent_text(by_thread[b]) == "The slow thread finished after the hang."


async def test_threads_with_their_own_codex_config_share_the_process(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    """`codexConfig` goes in the thread's own `thread/start` config: threads that differ in it
    still share one app-server, each with its own settings."""
    env = codex_env
    env.script(Rule("which model", ["This one."]))
    async with env.server(nursery) as srv:
        await srv.initialize()
        models = {}
        for name in ("gpt-alpha-test", "gpt-beta-test"):
            config = {"codexConfig": {"model": name, "model_reasoning_summary": "none"}}
            tid = await srv.start_thread(env.work, modelProvider="codex", config=config, **NEVER)
            t, _ = await turn(srv, tid, "which model")
            assert t["status"] == "completed", t
            models[tid] = env.fake.model_requests[-1].model
        assert sorted(models.values()) == ["gpt-alpha-test", "gpt-beta-test"]
        assert len(codex_pids(srv, "app-server")) == 1
        # a key Codex reads for the whole process (here `history`) keeps threads apart
        config = {"codexConfig": {"history.persistence": "none"}}
        tid = await srv.start_thread(env.work, modelProvider="codex", config=config, **NEVER)
        t, _ = await turn(srv, tid, "which model")
        assert t["status"] == "completed", t
        assert len(codex_pids(srv, "app-server")) == 2
