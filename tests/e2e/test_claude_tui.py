"""Claude Code's tui mode end to end: the real interactive `claude` in a tmux session that
threadline owns, driven through the protocol, against the scripted fake Anthropic API.

What a client sees (items, approvals, turn status), what a person attached to the tmux session
sees (`capture-pane`), and what really happened (files, processes, what the model was sent).
The fixture's orphan check covers the tmux server and every process in its panes (they carry
the test's marker variable).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import HttpError, Rule, Step, Text, ToolUse
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
    resolved_ids,
    status,
    turn,
)
from tests.support.mcp import logged_calls, servers
from tests.support.tui import answer, environ, screen, tmux, tmux_servers

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("tmux")]


ROLE = "You are the REVIEWER-7 role: answer in one line."
SLEEPER = "touch sleeper-started.txt && sleep 300 && touch sleeper-finished.txt"


def bash(command: str) -> ToolUse:
    return ToolUse("Bash", {"command": command, "description": "Run the requested command"})


async def open_tui_thread(
    env: ClaudeEnv, srv: ServerProcess, *, initialize: bool = True, **params: Any
) -> tuple[str, str]:
    """A tui thread (after `initialize`); (its id, the tmux socket it runs on)."""
    if initialize:
        await srv.initialize()
    params = {"cwd": str(env.work), "modelProvider": "claude", "config": {"mode": "tui"}, **params}
    result = await srv.call("thread/start", params)
    tid = result["thread"]["id"]
    return tid, f"threadline-{srv.pid}"


def user_texts(messages: list[dict[str, Any]]) -> str:
    """Every text the model was sent as the user's, joined."""
    out = []
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [b.get("text", "") for b in blocks or [] if b.get("type") == "text"]
    return "\n".join(out)


# -- a turn, what the pane shows, the role -----------------------------------------------------


async def test_turn_text_screen_and_role(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    env.script(
        Rule("first question", [Step([Text("The answer is forty-two.")])]),
        Rule("second question", ["Second answer."]),
    )
    async with env.server(nursery) as srv:
        t0 = time.monotonic()
        tid, socket = await open_tui_thread(env, srv, developerInstructions=ROLE)
        env.timings["thread/start (claude in tmux, ready)"] = time.monotonic() - t0
        t0 = time.monotonic()
        t1, events = await turn(srv, tid, "first question")
        env.timings["first turn"] = time.monotonic() - t0
        assert status(t1) == "completed", t1.get("error")
        assert agent_text(events) == "The answer is forty-two."
        [message] = items_completed(events, "agentMessage")
        assert message["text"] == "The answer is forty-two."
        assert notifications(events, "thread/tokenUsage/updated")
        # what a person attached to the session sees
        shown = screen(socket, tid)
        assert "first question" in shown and "The answer is forty-two." in shown, shown

        t2, events = await turn(srv, tid, "second question")
        assert status(t2) == "completed" and agent_text(events) == "Second answer."
        assert env.thread_record(tid)["role_bootstrap_applied"] is True

    first, second = env.fake.model_requests
    assert ROLE in first.system_text and ROLE in second.system_text
    # the bootstrap message is sent once: in the first prompt only
    assert user_texts(first.messages).count(ROLE) == 1
    assert user_texts(second.messages).count(ROLE) == 1  # turn 1's, in the history
    assert "second question" in user_texts(second.messages[-1:])
    assert ROLE not in user_texts(second.messages[-1:])
    assert tmux_servers(socket) == []


# -- approvals --------------------------------------------------------------------------------


async def test_command_approval_accept_and_decline(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule("please accept", [bash("touch accepted.txt && echo made-it"), "Created it."]),
        Rule("please decline", [bash("touch declined.txt"), "Understood, not created."]),
        Rule(
            "please write",
            [
                ToolUse(
                    "Write",
                    {"file_path": str(env.work / "hello.txt"), "content": "hello from the tui\n"},
                ),
                "Wrote it.",
            ],
        ),
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
        assert request["params"]["command"] == "touch accepted.txt && echo made-it"
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "completed" and cmd["exitCode"] == 0, cmd
        assert (cmd.get("aggregatedOutput") or "").strip() == "made-it"
        assert (env.work / "accepted.txt").exists()
        assert agent_text(events) == "Created it."

        t, events = await turn(srv, tid, "please decline", answer("decline", seen))
        assert status(t) == "completed" and agent_text(events) == "Understood, not created."
        [cmd] = items_completed(events, "commandExecution")
        assert cmd["status"] == "declined", cmd
        assert not (env.work / "declined.txt").exists()

        # a file write: a fileChange approval, the change as a diff
        t, events = await turn(srv, tid, "please write", answer("accept", seen))
        assert status(t) == "completed" and agent_text(events) == "Wrote it."
        [request] = requests_in(events)
        assert request["method"] == "item/fileChange/requestApproval", request
        [change] = items_completed(events, "fileChange")
        assert change["status"] == "completed", change
        assert change["changes"][0]["path"] == str(env.work / "hello.txt")
        assert "+hello from the tui" in change["changes"][0]["diff"], change
        assert (env.work / "hello.txt").read_text() == "hello from the tui\n"


# -- interrupt --------------------------------------------------------------------------------


async def test_interrupt_kills_the_running_command(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule("run the sleeper", [bash(SLEEPER), "Not reached."]),
        Rule("afterwards", ["Still working fine."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv, approvalPolicy="never")
        turn_id = await srv.start_turn(tid, "run the sleeper")
        seen: list[Any] = []
        await env.wait_until(lambda: (env.work / "sleeper-started.txt").exists(), "the sleeper")
        await env.wait_until(lambda: bool(env.sleepers(300)), "the command running")
        t0 = time.monotonic()
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
        env.timings["turn/interrupt while a command runs"] = time.monotonic() - t0
        assert done["params"]["turn"]["status"] == "interrupted", done
        assert_items_balanced(seen)
        await env.wait_until(lambda: not env.sleepers(300), "the sleeper gone", timeout=5)

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine."


# -- a turn a person starts in the tmux session ----------------------------------------------


async def test_prompt_typed_in_the_tui_is_a_turn(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule("typed by a person", ["Answered in the TUI."]),
        Rule("typed command", [bash("touch typed.txt"), "Touched."]),
    )
    async with env.server(nursery) as srv:
        await srv.initialize()
        result = await srv.call(
            "thread/start",
            {"cwd": str(env.work), "modelProvider": "claude", "config": {"mode": "tui"}},
        )
        tid, tui = result["thread"]["id"], result["thread"]["tui"]
        assert tui["session"] == tid and tui["attach"] == (
            f"tmux -L {tui['socket']} attach -t {tid}"
        ), tui
        tmux(tui["socket"], "send-keys", "-t", tid, "-l", "typed by a person")
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

        # a typed prompt whose tool call needs approval: the client is asked
        tmux(tui["socket"], "send-keys", "-t", tid, "-l", "typed command")
        tmux(tui["socket"], "send-keys", "-t", tid, "Enter")
        seen = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        assert request["method"] == "item/commandExecution/requestApproval", request
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})
        done = await srv.wait_for(lambda e: e.get("method") == "turn/completed", seen=seen)
        assert done["params"]["turn"]["status"] == "completed", done
        assert agent_text(seen) == "Touched."
        assert (env.work / "typed.txt").exists()


# -- resume after a restart; nothing left behind ---------------------------------------------


def claude_argv(env: ClaudeEnv) -> list[str] | None:
    """The argv of the test's running claude (by the marker in its environment)."""
    for pid in env.leftovers():
        argv = cmdline(pid)
        if argv and os.path.basename(argv[0]).startswith("claude"):
            return argv
    return None


async def test_resume_after_restart_and_nothing_left(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule("remember the word", ["Noted: PAPAYA."]),
        Rule("which word", ["It was PAPAYA."]),
    )
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv, developerInstructions=ROLE)
        t1, _ = await turn(srv, tid, "remember the word PAPAYA")
        assert status(t1) == "completed"
        first_argv = claude_argv(env)
        assert first_argv is not None and any(a.startswith("--session-id") for a in first_argv)
    # EOF: the tmux server, claude and everything it ran are gone, and so is their record
    assert await env.wait_no_leftovers() == []
    assert tmux_servers(socket) == []
    assert not list((env.home / "run").glob("*.json"))

    sid = env.thread_record(tid)["backend_session_id"]
    async with env.server(nursery) as srv:
        await srv.initialize()
        resumed = await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        assert resumed["thread"]["id"] == tid
        t0 = time.monotonic()
        t2, events = await turn(srv, tid, "which word was it?")
        env.timings["first turn after resume (claude start + --resume)"] = time.monotonic() - t0
        assert status(t2) == "completed" and agent_text(events) == "It was PAPAYA."
        argv = claude_argv(env)
        assert argv is not None and f"--resume={sid}" in argv, argv

    _, after = env.fake.model_requests
    assert "remember the word PAPAYA" in user_texts(after.messages)
    assert "Noted: PAPAYA." in str(after.messages)
    assert ROLE in after.system_text
    assert user_texts(after.messages).count(ROLE) == 1  # the bootstrap is not sent again


async def test_resume_of_a_thread_that_never_ran_a_turn(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    """claude saves a conversation only once it has a prompt: a tui thread resumed after a
    restart before its first turn has nothing to `--resume`, and starts its session afresh."""
    env = claude_env
    env.script(Rule("first words", ["Hello at last."]))
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv, developerInstructions=ROLE)
    assert await env.wait_no_leftovers() == []
    async with env.server(nursery) as srv:
        await srv.initialize()
        resumed = await srv.call("thread/resume", {"threadId": tid, "cwd": str(env.work)})
        assert resumed["thread"]["tui"]["session"] == tid
        t, events = await turn(srv, tid, "first words")
        assert status(t) == "completed", t.get("error")
        assert agent_text(events) == "Hello at last."
    [request] = env.fake.model_requests
    assert ROLE in request.system_text and user_texts(request.messages).count(ROLE) == 1


# -- interrupts while the model answers and while an approval waits --------------------------


async def test_interrupt_while_answering_and_while_approval_waits(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(
        Rule(
            "stream",
            [Step([Text("Part one of a long answer.")], stall_after_first_delta_ms=60_000)],
        ),
        Rule("approve", [bash("touch never-approved.txt"), "Not reached."]),
        Rule("afterwards", ["Still working fine."]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        # -- while the model's answer streams (the transcript shows nothing of it yet)
        turn_id = await srv.start_turn(tid, "stream something")
        await env.wait_until(lambda: len(env.fake.model_requests) == 1, "the model request")
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
        assert request["id"] in resolved_ids(seen)
        [cmd] = items_completed(seen, "commandExecution")
        assert cmd["status"] == "declined", cmd
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})  # too late

        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed" and agent_text(events) == "Still working fine."
    assert not (env.work / "never-approved.txt").exists()


# -- secrets, and a threadline killed with SIGKILL -------------------------------------------


async def test_secrets_stay_out_of_tmux_and_a_sigkilled_server_is_reaped(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    key = env.cli_vars()["ANTHROPIC_API_KEY"].encode()
    async with running_server(nursery, env.home, env.env(), check_exit=False) as srv:
        tid, socket = await open_tui_thread(env, srv)
        t, _ = await turn(srv, tid, "hello")
        assert status(t) == "completed"
        [server] = tmux_servers(socket)
        # the tmux server never holds the key; claude has it (it calls the API with it)
        assert key not in environ(server)
        argv = claude_argv(env)
        assert argv is not None and not any(key.decode() in a for a in argv)
        claude = [p for p in env.leftovers() if cmdline(p) == argv]
        assert claude and key in environ(claude[0])
        # the environment file the pane's shim read is gone
        assert not [
            p
            for p in Path(tempfile.gettempdir()).glob("threadline-tui-*/env.json")
            if str(env.tmp).encode() in p.read_bytes()
        ]
        left = env.leftovers()
        assert server in left and claude[0] in left
        srv.signal(signal.SIGKILL)
        await srv.wait()
    await trio.sleep(0.5)
    assert tmux_servers(socket) == [server], "tmux outlives a SIGKILLed threadline"
    async with env.server(nursery) as srv:
        await srv.initialize()  # (the next threadline on the same state directory reaps it)
        await env.wait_until(lambda: not tmux_servers(socket), "the old tmux server gone", 5)
        await env.wait_until(
            lambda: [p for p in env.leftovers() if p in (server, claude[0])] == [],
            "the old claude gone",
            5,
        )


# -- a changed setting restarts claude, resuming its conversation ----------------------------


async def test_model_change_restarts_claude_with_resume(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(Rule("first", ["One."]), Rule("second", ["Two."]))
    async with env.server(nursery) as srv:
        tid, socket = await open_tui_thread(env, srv)
        t, _ = await turn(srv, tid, "first")
        assert status(t) == "completed"
        sid = env.thread_record(tid)["backend_session_id"]
        params = {"threadId": tid, "input": [{"type": "text", "text": "second"}], "model": "sonnet"}
        result = await srv.call("turn/start", params)
        done, events = await srv.collect_turn(result["turn"]["id"], timeout=60)
        assert done["params"]["turn"]["status"] == "completed", done
        assert agent_text(events) == "Two."
        argv = claude_argv(env)
        assert argv is not None and f"--resume={sid}" in argv and "sonnet" in argv, argv
        assert len(tmux_servers(socket)) == 1  # (one server; the old session is gone)
        assert tmux(socket, "list-sessions", "-F", "#{session_name}").split() == [tid]
    first, second = env.fake.model_requests
    assert "first" in user_texts(second.messages) and second.body.get("model") != first.body.get(
        "model"
    )


# -- an API error fails the turn -------------------------------------------------------------


async def test_api_error_fails_the_turn(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    env.script(
        # (first: claude sends the failed prompt again with the next one, in one message)
        Rule("afterwards", ["Fine again."]),
        Rule("server please", [HttpError(500, "the fake broke")]),
    )
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        t, events = await turn(srv, tid, "server please")
        assert status(t) == "failed", t
        assert "the fake broke" in t["error"]["message"] or "500" in t["error"]["message"], t
        assert t["error"]["codexErrorInfo"] == "internalServerError", t["error"]
        assert items_completed(events, "agentMessage") == []
        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed", t.get("error")
        assert agent_text(events) == "Fine again."


async def test_refused_key_stops_claudes_retries(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    """claude retries a 401 for minutes (its debug log says so per attempt): the turn fails at
    the second refusal, with what to do, and the next turn runs."""
    env = claude_env
    env.script(
        Rule("afterwards", ["Fine again."]),
        Rule("refused please", [HttpError(401, "invalid x-api-key")]),
    )
    async with env.server(nursery, CLAUDE_CODE_MAX_RETRIES="10") as srv:
        tid, _ = await open_tui_thread(env, srv)
        t, events = await turn(srv, tid, "refused please")
        assert status(t) == "failed", t
        assert t["error"]["codexErrorInfo"] == "unauthorized", t["error"]
        assert "refused the credentials (HTTP 401" in t["error"]["message"], t["error"]
        retries = [e for e in events if e.get("method") == "error" and e["params"]["willRetry"]]
        assert retries, events
        t, events = await turn(srv, tid, "afterwards")
        assert status(t) == "completed", t.get("error")
        assert agent_text(events) == "Fine again."


# -- stdin EOF or SIGTERM while a command runs ------------------------------------------------


@pytest.mark.parametrize("how", ["eof", "sigterm"])
async def test_shutdown_mid_turn_leaves_nothing(
    nursery: trio.Nursery, claude_env: ClaudeEnv, how: str
) -> None:
    env = claude_env
    env.script(Rule("run the sleeper", [bash(SLEEPER), "Not reached."]))
    async with running_server(nursery, env.home, env.env(), check_exit=False) as srv:
        tid, socket = await open_tui_thread(env, srv, approvalPolicy="never")
        await srv.start_turn(tid, "run the sleeper")
        await env.wait_until(lambda: bool(env.sleepers(300)), "the command running")
        assert tmux_servers(socket)
        t0 = time.monotonic()
        if how == "sigterm":
            srv.signal(signal.SIGTERM)
        else:
            await srv.close_stdin()
        await srv.wait()
        env.timings[f"{how} mid-turn -> threadline exited"] = time.monotonic() - t0
    assert await env.wait_no_leftovers() == []
    assert tmux_servers(socket) == []
    assert not (env.work / "sleeper-finished.txt").exists()


# -- the thread's MCP servers ----------------------------------------------------------------


async def test_mcp_call_is_approved_and_runs(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    log = env.tmp / "mcp-calls.jsonl"
    env.script(Rule("please echo", [ToolUse("mcp__srv__echo", {"text": "hello mcp"}), "Echoed."]))
    seen: list[Message] = []
    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(
            env,
            srv,
            approvalPolicy="untrusted",
            config={"mode": "tui", "mcp_servers": servers(log)},
        )
        t, events = await turn(srv, tid, "please echo", answer("accept", seen))
        assert status(t) == "completed" and agent_text(events) == "Echoed."
        [request] = requests_in(events)
        assert request["method"] == "item/tool/requestApproval", request
        [item] = items_completed(events, "mcpToolCall")
        assert item["server"] == "srv" and item["tool"] == "echo", item
        assert item["status"] == "completed", item
        assert "echo: hello mcp" in str(item["result"]["content"])
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hello mcp"}}]


# -- two threads share the tmux server -------------------------------------------------------


async def test_archive_ends_one_session_the_server_goes_with_the_last(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(Rule("hello", ["Hi."]))
    async with env.server(nursery) as srv:
        first, socket = await open_tui_thread(env, srv)
        second, _ = await open_tui_thread(env, srv, initialize=False)
        sessions = tmux(socket, "list-sessions", "-F", "#{session_name}").split()
        assert sorted(sessions) == sorted([first, second])
        [server] = tmux_servers(socket)
        panes = {
            tid: int(tmux(socket, "display-message", "-p", "-t", tid, "#{pane_pid}"))
            for tid in (first, second)
        }
        await srv.call("thread/archive", {"threadId": first})
        await env.wait_until(lambda: panes[first] not in env.leftovers(), "the first claude gone")
        assert tmux(socket, "list-sessions", "-F", "#{session_name}").split() == [second]
        assert tmux_servers(socket) == [server] and panes[second] in env.leftovers()
        t, events = await turn(srv, second, "hello")
        assert status(t) == "completed" and agent_text(events) == "Hi."
    assert await env.wait_no_leftovers() == []
    assert tmux_servers(socket) == []


# -- AskUserQuestion -------------------------------------------------------------------------


async def test_ask_user_question_goes_to_the_client(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    question = {
        "question": "Which color should the button be?",
        "header": "Color",
        "options": [
            {"label": "Red", "description": "Warm and loud"},
            {"label": "Blue", "description": "Calm and cool"},
        ],
        "multiSelect": False,
    }
    env.script(
        Rule("pick a color", [ToolUse("AskUserQuestion", {"questions": [question]}), "Blue it is."])
    )
    asked: list[Message] = []

    def on_request(message: Message) -> Any:
        asked.append(message)
        assert message["method"] == "item/tool/requestUserInput", message
        [q] = message["params"]["questions"]
        return {"answers": {q["id"]: {"answers": ["Blue"]}}}

    async with env.server(nursery) as srv:
        tid, _ = await open_tui_thread(env, srv)
        t, _ = await turn(srv, tid, "pick a color for me", on_request)
        assert status(t) == "completed", t.get("error")
    [request] = asked
    [q] = request["params"]["questions"]
    assert q["question"] == "Which color should the button be?"
    [result] = env.fake.tool_results(1)
    assert "Blue" in json.dumps(result["content"]) and not result.get("is_error"), result
