"""Codex's tui mode end to end: the real interactive Codex TUI in a tmux session threadline
owns, attached (`--remote`) to an app-server of the thread's own that threadline drives as a
second client, against the scripted fake Responses API.

What a client sees (items, approvals, turn status), what a person attached to the tmux session
sees (`capture-pane`), and what really happened (files, processes, what the model was sent).
The fixture's orphan check covers the tmux server, the app-server and every command (they
carry the test's marker variable).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
import trio

from tests.e2e import test_codex_control as ctl
from tests.e2e.codex_env import CodexEnv
from tests.fakes.openai_responses import ExecCommand, Rule
from tests.support.cli_env import cmdline
from tests.support.client import (
    Message,
    ServerProcess,
    assert_items_balanced,
    notifications,
    running_server,
)
from tests.support.events import (
    agent_text,
    items_completed,
    items_started,
    no_requests,
    requests_in,
    turn,
)
from tests.support.tui import answer, environ, screen, tmux, tmux_servers

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("tmux")]

ROLE = "DEV-MARKER-7: you are the reviewer; answer in one line."
SLEEP_S = 300
ESCALATE_WHY = "Needs to write outside the read-only sandbox"
ASK = {"approvalPolicy": "on-request", "sandbox": "read-only"}
TUI = {"mode": "tui"}


def escalated(cmd: str) -> ExecCommand:
    return ExecCommand(cmd, sandbox_permissions="require_escalated", justification=ESCALATE_WHY)


async def open_tui_thread(
    env: CodexEnv, srv: ServerProcess, **params: Any
) -> tuple[str, dict[str, Any]]:
    """A tui thread; (its id, its `thread.tui`)."""
    await srv.initialize()
    result = await srv.call(
        "thread/start",
        {"cwd": str(env.work), "modelProvider": "codex", "config": TUI, **params},
    )
    return result["thread"]["id"], result["thread"]["tui"]


def type_in(tui: dict[str, Any], text: str) -> None:
    """A person types `text` in the TUI and presses Enter."""
    tmux(tui["socket"], "send-keys", "-t", tui["session"], "-l", text)
    time.sleep(0.3)
    tmux(tui["socket"], "send-keys", "-t", tui["session"], "Enter")


async def approve_in_tui(env: CodexEnv, tui: dict[str, Any]) -> None:
    """A person presses `y` at the TUI's approval prompt, again if the TUI did not take it
    (a run once had the prompt on screen and no answer 30 s after `y`; cause unknown)."""
    for _ in range(5):
        tmux(tui["socket"], "send-keys", "-t", tui["session"], "y")
        with trio.move_on_after(2):
            while "You approved codex" not in screen(tui["socket"], tui["session"]):  # noqa: ASYNC110 - polling the pane
                await trio.sleep(0.05)
            return
    raise AssertionError(f"the TUI did not take `y`:\n{screen(tui['socket'], tui['session'])}")


def codex_argvs(env: CodexEnv) -> list[list[str]]:
    """The argv of every codex process of the test (by the marker in its environment)."""
    return [
        argv
        for pid in env.leftovers()
        if (argv := cmdline(pid)) and os.path.basename(argv[0]).startswith("codex")
    ]


async def wait_screen(env: CodexEnv, tui: dict[str, Any], *texts: str) -> str:
    shown = ""

    def showing() -> bool:
        nonlocal shown
        shown = screen(tui["socket"], tui["session"])
        return all(t in shown for t in texts)

    try:
        await env.wait_until(showing, f"the TUI showing {texts}", timeout=10)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it shows:\n{shown}") from None
    return shown


# -- a turn, what the pane shows, the role ---------------------------------------------------


async def test_turn_text_screen_and_role(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    env = codex_env
    env.script(
        Rule("first question", ["The answer is forty-two."]),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        t0 = time.monotonic()
        tid, tui = await open_tui_thread(env, srv, developerInstructions=ROLE)
        env.timings["thread/start (app-server + TUI in tmux, ready)"] = time.monotonic() - t0
        assert tui["session"] == tid and tui["attach"] == (
            f"tmux -L {tui['socket']} attach -t {tid}"
        ), tui
        assert tui["socket"] == f"threadline-{srv.pid}"
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, "first question")
        env.timings["first turn"] = time.monotonic() - t0
        assert t1["status"] == "completed", t1
        assert agent_text(events) == "The answer is forty-two."
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == "The answer is forty-two."
        assert notifications(events, "thread/tokenUsage/updated")
        # what a person attached to the session sees
        await wait_screen(env, tui, "first question", "The answer is forty-two.")

        t2, events = await turn(srv, tid, "second question")
        assert t2["status"] == "completed" and agent_text(events) == "Second answer."
        # the TUI is codex's own, attached to threadline's app-server, not a daemon of its own
        [tui_argv] = [a for a in codex_argvs(env) if "--remote" in a]
        assert tui_argv[tui_argv.index("--remote") + 1].startswith("ws://127.0.0.1:")
        assert tui_argv[-2:] == ["resume", env.thread_record(tid)["backend_session_id"]]
        assert not [a for a in codex_argvs(env) if "--managed-daemon" in a or "daemon" in a]

    assert ROLE in env.fake.developer_text(0)
    assert ROLE not in "\n".join(env.fake.user_texts(0))


async def test_own_model_and_full_access_skip_the_first_run_screens(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    """The TUI asks about a model migration for its config's model and for the thread's own;
    both are answered ahead (else `thread/start` fails with the screen, after 20 s)."""
    env = codex_env
    env.script(Rule("full access", [ExecCommand("touch full.txt"), "Done with full access."]))
    async with env.server(nursery) as srv:
        t0 = time.monotonic()
        tid, tui = await open_tui_thread(
            env,
            srv,
            approvalPolicy="never",
            sandbox="danger-full-access",
            model="gpt-5.6-luna",
        )
        assert time.monotonic() - t0 < 15
        # a turn's override reaches Codex (the TUI takes the thread's settings from it)
        started = await srv.call(
            "turn/start",
            {
                "threadId": tid,
                "input": [{"type": "text", "text": "full access please"}],
                "effort": "low",
            },
        )
        done, events = await srv.collect_turn(started["turn"]["id"], on_request=no_requests)
        assert done["params"]["turn"]["status"] == "completed", done
        assert agent_text(events) == "Done with full access."
        assert (env.work / "full.txt").exists()
        await wait_screen(env, tui, "full access please", "Done with full access.")
    [request] = env.fake.model_requests[:1]
    assert request.body["model"] == "gpt-5.6-luna"
    assert request.body["reasoning"]["effort"] == "low"
    config = (env.codex_home / "config.toml").read_text()
    assert '"gpt-5.5" = "gpt-6-sol"' in config and '"gpt-5.6-luna" = "gpt-6-luna"' in config


# -- approvals --------------------------------------------------------------------------------


async def test_command_approval_accept_and_decline(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("please accept", [escalated("touch accepted.txt"), "Created it."]),
        Rule("please decline", [escalated("touch declined.txt"), "Understood, not created."]),
    )
    seen: list[Message] = []
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv, **ASK)
        t, events = await turn(srv, tid, "please accept", answer("accept", seen))
        assert t["status"] == "completed", t
        [request] = requests_in(events)
        assert request["method"] == "item/commandExecution/requestApproval", request
        [started] = items_started(events, "commandExecution")
        assert request["params"]["itemId"] == started["id"]
        assert "touch accepted.txt" in request["params"]["command"]
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["exitCode"] == 0, cmd
        assert (env.work / "accepted.txt").exists()
        assert agent_text(events) == "Created it."

        t, events = await turn(srv, tid, "please decline", answer("decline", seen))
        assert t["status"] == "completed" and agent_text(events) == "Understood, not created."
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (env.work / "declined.txt").exists()
        await wait_screen(env, tui, "please decline", "Understood, not created.")
    assert len(seen) == 2


async def test_approval_answered_in_the_tui_withdraws_the_clients(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    """The TUI gets Codex's approval request too and shows its prompt: a person's answer
    there resolves it, and the client's request is withdrawn (`serverRequest/resolved`)."""
    env = codex_env
    env.script(Rule("please accept", [escalated("touch accepted.txt"), "Created it."]))
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv, **ASK)
        turn_id = await srv.start_turn(tid, "please accept")
        seen: list[Any] = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        assert request["method"] == "item/commandExecution/requestApproval", request
        await wait_screen(env, tui, "Would you like to run the following command?")
        await approve_in_tui(env, tui)
        resolved = await srv.wait_for(
            lambda e: e.get("method") == "serverRequest/resolved", seen=seen
        )
        assert resolved["params"]["requestId"] == request["id"]
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        assert done["params"]["turn"]["status"] == "completed", done
        assert (env.work / "accepted.txt").exists()
        assert agent_text(events) == "Created it."
        # withdrawn at the person's answer, before the command ran (not at the turn's end)
        [ran] = [
            i
            for i, e in enumerate(events)
            if e.get("method") == "item/completed"
            and e["params"]["item"]["type"] == "commandExecution"
        ]
        assert events.index(resolved) < ran
        await wait_screen(env, tui, "You approved codex to run touch accepted.txt")


# -- interrupt --------------------------------------------------------------------------------


async def test_interrupt_kills_the_running_command(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("long command", [ExecCommand(f"sleep {SLEEP_S}", yield_time_ms=30_000), "Done."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv, approvalPolicy="never", sandbox="workspace-write")
        turn_id = await srv.start_turn(tid, "run the long command")
        seen: list[Any] = []
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        # Codex leaves an interrupted command running: threadline kills it
        assert env.sleepers(SLEEP_S) == [], "the interrupted sleep still runs"

        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Recovered."


async def test_interrupt_while_an_approval_waits(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("please wait", [escalated("touch never.txt"), "Not reached."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv, **ASK)
        turn_id = await srv.start_turn(tid, "please wait")
        seen: list[Any] = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        await wait_screen(env, tui, "Would you like to run the following command?")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, events = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        env.timings["interrupt while an approval waits"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        resolved = notifications(events, "serverRequest/resolved")
        assert [r["params"]["requestId"] for r in resolved] == [request["id"]]
        assert not (env.work / "never.txt").exists()
        shown = await wait_screen(env, tui, "please wait")
        assert "Would you like to run" not in shown, shown

        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Recovered."
    assert not (env.work / "never.txt").exists()


# -- a turn a person starts in the TUI ------------------------------------------------------


async def test_prompt_typed_in_the_tui_is_a_turn(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("typed by a person", ["Answered in the TUI."]),
        Rule("typed asking", [escalated("touch typed.txt"), "Typed and created."]),
    )
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv, **ASK)
        type_in(tui, "typed by a person")
        seen: list[Any] = []
        started = await srv.wait_for(lambda e: e.get("method") == "turn/started", seen=seen)
        assert started["params"]["threadId"] == tid
        turn_id = started["params"]["turn"]["id"]
        done, seen = await srv.collect_turn(turn_id, events=seen, on_request=no_requests)
        assert done["params"]["turn"]["status"] == "completed", done
        assert_items_balanced(seen)
        [user] = items_completed(seen, "userMessage")
        assert "typed by a person" in str(user["content"]), user
        assert agent_text(seen) == "Answered in the TUI."

        # a typed turn's approval is the client's to give (the TUI shows no prompt)
        type_in(tui, "typed asking for a file")
        asked: list[Message] = []
        started = await srv.wait_for(lambda e: e.get("method") == "turn/started")
        turn_id = started["params"]["turn"]["id"]
        done, seen = await srv.collect_turn(turn_id, on_request=answer("accept", asked))
        assert done["params"]["turn"]["status"] == "completed", done
        [request] = asked
        assert request["method"] == "item/commandExecution/requestApproval", request
        assert (env.work / "typed.txt").exists()
        assert agent_text(seen) == "Typed and created."
        shown = await wait_screen(env, tui, "typed asking for a file", "Typed and created.")
        assert "Would you like to run" not in shown, shown


async def test_escape_in_the_tui_interrupts_and_kills_the_command(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("long command", [ExecCommand(f"sleep {SLEEP_S}", yield_time_ms=30_000), "Done."]),
        Rule("after", ["Recovered."]),
    )
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(
            env, srv, approvalPolicy="never", sandbox="workspace-write"
        )
        turn_id = await srv.start_turn(tid, "run the long command")
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        # a person presses Escape in the TUI
        tmux(tui["socket"], "send-keys", "-t", tid, "Escape")
        done, events = await srv.collect_turn(turn_id, on_request=no_requests)
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(events)
        await env.wait_until(lambda: not env.sleepers(SLEEP_S), "the sleep gone", timeout=5)

        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Recovered."


async def test_a_tui_a_person_quit_is_reopened_at_the_next_turn(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("remember the word", ["Noted: MANGO."]),
        Rule("which word", ["It was MANGO."]),
    )
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv)
        t, _ = await turn(srv, tid, "remember the word MANGO")
        assert t["status"] == "completed"
        [first] = [a for a in codex_argvs(env) if "--remote" in a]
        type_in(tui, "/quit")
        await env.wait_until(
            lambda: not [a for a in codex_argvs(env) if "--remote" in a], "the TUI gone"
        )
        await trio.sleep(1.5)  # (the session notices within a second)
        t, events = await turn(srv, tid, "which word was it?")
        assert t["status"] == "completed" and agent_text(events) == "It was MANGO."
        [second] = [a for a in codex_argvs(env) if "--remote" in a]
        assert second[-2:] == first[-2:]  # `resume <the same Codex thread>`
        await wait_screen(env, tui, "remember the word MANGO", "It was MANGO.")
    assert "remember the word MANGO" in "\n".join(env.fake.user_texts(-1))


# -- resume after a restart; nothing left behind ---------------------------------------------


async def test_resume_after_restart_and_nothing_left(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv, developerInstructions=ROLE)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert t1["status"] == "completed"
    # EOF: the tmux server, the TUI, the app-server and everything they ran are gone
    assert await env.wait_no_leftovers() == []
    assert "no server running" in tmux(tui["socket"], "list-sessions")

    sid = env.thread_record(tid)["backend_session_id"]
    async with env.server(nursery) as srv:
        await srv.initialize()
        resumed = await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        assert resumed["thread"]["id"] == tid
        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "which word was it?")
        env.timings["first turn after resume (app-server + TUI resume)"] = time.monotonic() - t0
        assert t2["status"] == "completed" and agent_text(events) == "It was PAPAYA."
        [tui_argv] = [a for a in codex_argvs(env) if "--remote" in a]
        assert tui_argv[-2:] == ["resume", sid], tui_argv
        # the TUI shows the history it resumed
        tui = resumed["thread"].get("tui") or tui
        await wait_screen(env, tui, "remember the word PAPAYA", "It was PAPAYA.")

    after = "\n".join(env.fake.user_texts(-1))
    assert "remember the word PAPAYA" in after
    assert ROLE in env.fake.developer_text(-1)


# -- secrets outside tmux; a SIGKILLed threadline's TUI, app-server and commands reaped --------


async def test_secrets_stay_out_of_tmux_and_a_sigkilled_server_is_reaped(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(
        Rule("hello", ["Hi."]),
        Rule("long command", [ExecCommand(f"sleep {SLEEP_S}", yield_time_ms=30_000), "Done."]),
    )
    key = next(v for k, v in env.cli_vars().items() if "KEY" in k).encode()
    async with running_server(nursery, env.home, env.env(), check_exit=False) as srv:
        tid, tui = await open_tui_thread(
            env, srv, approvalPolicy="never", sandbox="workspace-write"
        )
        t, _ = await turn(srv, tid, "hello")
        assert t["status"] == "completed"
        [server] = tmux_servers(tui["socket"])
        assert key not in environ(server)
        assert not any(key.decode() in a for argv in codex_argvs(env) for a in argv)
        await srv.start_turn(tid, "run the long command")
        await env.wait_until(lambda: bool(env.sleepers(SLEEP_S)), "sleep started")
        left = env.leftovers()
        assert server in left
        srv.signal(signal.SIGKILL)
        await srv.wait()
    await trio.sleep(0.5)
    assert tmux_servers(tui["socket"]) == [server], "tmux outlives a SIGKILLed threadline"
    async with env.server(nursery) as srv:
        await srv.initialize()  # (the next threadline on the same state directory reaps it)
        await env.wait_until(lambda: not [p for p in env.leftovers() if p in left], "reaped", 10)
        assert env.sleepers(SLEEP_S) == []


# -- the control surface: the same app-server as stream mode's ------------------------------


async def test_control_surface_as_in_stream_mode(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    """Images and overrides, steer, fork (a tui thread of its own), inject and compact, a new
    sandbox and cwd: stream mode's checks, on a tui thread (tests/e2e/test_codex_control.py)."""
    env = codex_env
    ctl.prepare(env)
    async with env.server(nursery) as srv:
        tid, tui = await open_tui_thread(env, srv)
        # model/list: Codex's own list, from the thread's app-server
        models = (await srv.call("model/list", {}))["data"]
        assert ctl.OTHER_MODEL in [m["model"] for m in models if m["id"].startswith("codex/")]
        await ctl.check_overrides_and_images(env, srv, tid)
        await ctl.check_steer(env, srv, tid)
        await ctl.check_fork(env, srv, tid, config=TUI)
        await ctl.check_inject_and_compact(env, srv, tid)
        await ctl.check_sandbox_and_cwd(env, srv, tid)
        await wait_screen(env, tui, "after the compaction")
    await ctl.check_kept_after_restart(env, nursery, tid)
