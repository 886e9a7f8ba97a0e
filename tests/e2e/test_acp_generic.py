"""The generic `acp` backend end to end: threadline as a subprocess starts the real `gemini
--acp`, `opencode acp` and `qwen --acp` as any ACP agent (`modelProvider: "acp"`, the command
from `config.command` or from AGENT_BACKEND=acp, BACKEND_CLI_PATH and BACKEND_CLI_ARGS),
talking to the project's fake model servers (tests/e2e/gemini_env.py, opencode_env.py,
qwen_env.py).

What the client sees: streamed text, command approvals accepted and declined, interrupts, a
resume after a threadline restart (`session/load`), and images where the agent takes them.
The generic backend has none of the named backends' per-agent quirks: where an agent behaves
differently through it, the test says so.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.gemini_env import MODEL, GeminiEnv, acp_pids
from tests.e2e.opencode_env import OpenCodeEnv, opencode_pids
from tests.e2e.qwen_env import PRINTING_COMMAND, QwenEnv, shell_call
from tests.e2e.qwen_env import acp_pids as qwen_pids
from tests.e2e.test_doctor import doctor, lines_by_backend
from tests.fakes.gemini import Rule as GeminiRule
from tests.fakes.gemini import ShellCommand, Step, Text
from tests.fakes.openai_chat import Rule as ChatRule
from tests.fakes.openai_chat import Step as ChatStep
from tests.fakes.openai_chat import Text as ChatText
from tests.fakes.openai_chat import ToolCall, bash_call
from tests.support.client import Message, ServerProcess, assert_items_balanced, notifications
from tests.support.events import (
    agent_text,
    items_completed,
    items_started,
    no_requests,
    requests_in,
)

pytestmark = pytest.mark.e2e

ROLE = "ROLE-MARKER-7: you are the reviewer; answer in one line."
STALL_MS = 60_000  # a stream that stalls "forever" after its first chunk
HELLO = "Hello from the agent, streamed in chunks."
APPROVAL = "item/commandExecution/requestApproval"
# A 1x1 PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def decide(decision: str) -> Callable[[Message], Any]:
    def on_request(message: Message) -> Any:
        assert message["method"] == APPROVAL, message
        return {"decision": decision}

    return on_request


async def turn(
    srv: ServerProcess,
    tid: str,
    text: str | list[dict[str, Any]],
    on_request: Callable[[Message], Any] = no_requests,
) -> tuple[dict[str, Any], list[Any]]:
    """Run one turn; return (the completed turn, its events). Items must pair up."""
    if isinstance(text, str):
        done, events = await srv.run_turn(tid, text, on_request=on_request, timeout=90)
    else:
        result = await srv.call("turn/start", {"threadId": tid, "input": text})
        done, events = await srv.collect_turn(result["turn"]["id"], on_request=on_request)
    assert_items_balanced(events)
    return done["params"]["turn"], events


async def acp_thread(srv: ServerProcess, cwd: Path, config: dict[str, Any]) -> str:
    await srv.initialize()
    return await srv.start_thread(cwd, modelProvider="acp", config=config)


async def remember_then_resume(
    nursery: trio.Nursery,
    env: GeminiEnv | OpenCodeEnv | QwenEnv,
    config: dict[str, Any],
    before_resume: Callable[[str], None] = lambda _sid: None,
    **server_env: str,
) -> tuple[str, list[Any]]:
    """Turn "remember the word WORD" in one threadline, then thread/resume in a new one
    (`session/load` of the agent's session) and turn "which word was it?", which completes
    with only its own items (the replayed history is not shown). `before_resume` gets the
    agent's session id. Returns it and the second turn's events."""
    async with env.server(nursery, **server_env) as srv:
        tid = await acp_thread(srv, env.work, config)
        t, _ = await turn(srv, tid, "remember the word WORD")
        assert t["status"] == "completed", t
    sid = str(env.thread_record(tid)["backend_session_id"])
    before_resume(sid)
    async with env.server(nursery, **server_env) as srv:
        await srv.initialize()
        # config.env is never stored (it may hold credentials): the client passes it again.
        again = {"config": {"env": config["env"]}} if "env" in config else {}
        await srv.call("thread/resume", {"threadId": tid, **again})
        t, events = await turn(srv, tid, "which word was it?")
        assert t["status"] == "completed", t
        assert [i["type"] for i in items_started(events)] == ["userMessage", "agentMessage"]
    assert env.thread_record(tid)["backend_session_id"] == sid
    return sid, events


async def interrupt_while_streaming(srv: ServerProcess, tid: str) -> None:
    """Turn "stall please" (its answer stalls after the first delta), interrupted there: it
    ends interrupted, items paired."""
    turn_id = await srv.start_turn(tid, "stall please")
    seen: list[Any] = []
    await srv.wait_for(
        lambda e: isinstance(e, dict) and e.get("method") == "item/agentMessage/delta",
        seen=seen,
        timeout=90,
    )
    await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
    done, events = await srv.collect_turn(turn_id, on_request=no_requests, events=seen)
    assert done["params"]["turn"]["status"] == "interrupted", done
    assert_items_balanced(events)


async def streams_asks_and_stops(
    srv: ServerProcess,
    tid: str,
    accepted: str,
    declined: str,
    agent_pids: Callable[[ServerProcess], list[int]],
) -> list[Any]:
    """The agent's fake model is scripted with `HELLO` for "hello", command `accepted` for
    "accept the command", `declined` for "decline the command", a stalling answer for
    "stall" and "Back to normal." for "after". The text streams; the approvals name the
    commands and the client's decisions hold; an interrupt is native (the same agent process
    goes on). Returns the accepted turn's events."""
    t, events = await turn(srv, tid, "hello")
    assert t["status"] == "completed" and agent_text(events) == HELLO, t
    assert len(notifications(events, "item/agentMessage/delta")) >= 2
    pids = agent_pids(srv)
    decided = {}
    for decision, command in (("accept", accepted), ("decline", declined)):
        t, events = await turn(srv, tid, f"{decision} the command", decide(decision))
        assert t["status"] == "completed", t
        [request] = requests_in(events)
        assert request["params"]["command"] == command, request
        [item] = items_completed(events, "commandExecution")
        assert item["id"] == request["params"]["itemId"], (item, request)
        assert item["status"] == ("completed" if decision == "accept" else "declined"), item
        decided[decision] = events
    await interrupt_while_streaming(srv, tid)
    t, events = await turn(srv, tid, "after that")
    assert t["status"] == "completed" and agent_text(events) == "Back to normal.", t
    assert agent_pids(srv) == pids, "the agent was restarted: the interrupt was not native"
    return decided["accept"]


# -- the operator's view ---------------------------------------------------------------------------


def usable(stdout: str) -> list[str]:
    """The backends doctor's summary counts as usable here."""
    found = re.search(r"backends usable here \(([^)]*)\)", stdout)
    assert found, stdout
    return found.group(1).split(", ")


def test_doctor_says_what_to_configure_then_checks_the_operators_agent(tmp_path: Path) -> None:
    path = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    done = doctor(path, None, tmp_path)
    line = lines_by_backend(done.stdout)["acp"]
    assert line.startswith("ok acp ") and "path=-" in line, line
    assert "configure a command" in line and "`gemini --acp`" in line, line
    assert "acp" not in usable(done.stdout)  # not until it has a command

    my_agent = tmp_path / "my-agent"
    my_agent.write_text("#!/bin/sh\necho 'my-agent 1.2.3'\n")
    my_agent.chmod(0o755)
    done = doctor(path, "acp", tmp_path, BACKEND_CLI_PATH=str(my_agent))
    assert done.returncode == 0, done.stdout + done.stderr
    line = lines_by_backend(done.stdout)["acp"]
    assert f"path={my_agent} version=my-agent 1.2.3" in line, line
    assert "acp" in usable(done.stdout)

    done = doctor(path, "acp", tmp_path, BACKEND_CLI_PATH="/nonexistent/agent")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "AGENT_BACKEND=acp is not usable here" in done.stderr, done.stderr


def test_a_missing_operator_agent_refuses_to_start(tmp_path: Path) -> None:
    initialize = '{"id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}'
    env = {
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "THREADLINE_HOME": str(tmp_path / "state"),
        "AGENT_BACKEND": "acp",
        "BACKEND_CLI_PATH": "/nonexistent/agent",
        "BACKEND_CLI_ARGS": "--acp",
    }
    done = subprocess.run(
        [sys.executable, "-m", "threadline"],
        input=initialize + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0 and done.stdout == "", done
    assert "AGENT_BACKEND=acp cannot be used (tried /nonexistent/agent)" in done.stderr, done


# -- gemini --acp ----------------------------------------------------------------------------------


def gemini_command(env: GeminiEnv) -> list[str]:
    return [str(env.cli), "--acp", "-m", MODEL]


# One process, so a signal to it reaches the worker (the named backend sets this itself).
GEMINI_ENV = {"GEMINI_CLI_NO_RELAUNCH": "1"}


async def test_gemini_as_the_operators_default_agent(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """AGENT_BACKEND=acp, BACKEND_CLI_PATH=gemini, BACKEND_CLI_ARGS="--acp -m <model>": a
    thread needs no config. The role goes in once, an image reaches the model."""
    env = gemini_env
    env.script(
        GeminiRule("first question", ["The answer is forty-two."]),
        GeminiRule("look at this", ["A single pixel."]),
    )
    picture = env.work / "pixel.png"
    picture.write_bytes(PIXEL)
    operator = {
        "AGENT_BACKEND": "acp",
        "BACKEND_CLI_PATH": str(env.cli),
        "BACKEND_CLI_ARGS": shlex.join(["--acp", "-m", MODEL]),
        "BACKEND_MODEL": "",  # (the model is in the agent's arguments)
        **GEMINI_ENV,
    }
    async with env.server(nursery, **operator) as srv:
        init = await srv.initialize()
        [info] = [b for b in init["backends"] if b["id"] == "acp"]
        assert info["available"] and info["path"] == str(env.cli), info
        # no modelProvider, no config: the operator's agent
        started = await srv.call(
            "thread/start", {"cwd": str(env.work), "developerInstructions": ROLE}
        )
        assert started["modelProvider"] == "acp", started
        tid = started["thread"]["id"]
        t, events = await turn(srv, tid, "first question")
        assert t["status"] == "completed", t
        assert agent_text(events) == "The answer is forty-two."
        assert notifications(events, "warning") == []
        [pid] = acp_pids(srv)

        image = [
            {"type": "text", "text": "look at this"},
            {"type": "localImage", "path": str(picture)},
        ]
        t, events = await turn(srv, tid, image)
        assert t["status"] == "completed" and agent_text(events) == "A single pixel.", t
        assert acp_pids(srv) == [pid]
    first, second = env.fake.model_requests
    assert first.user_texts.count(ROLE) == 1 and second.user_texts.count(ROLE) == 1
    sent = [p for c in second.contents for p in c.get("parts") or [] if "inlineData" in p]
    assert [p["inlineData"]["mimeType"] for p in sent] == ["image/png"], sent
    assert base64.b64decode(sent[0]["inlineData"]["data"]) == PIXEL


async def test_gemini_text_approvals_and_interrupt(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    accepted, declined = "touch accepted.txt && echo made-it", "touch declined.txt"
    env.script(
        GeminiRule("hello", [HELLO]),
        GeminiRule("accept the command", [ShellCommand(accepted), "Created it."]),
        GeminiRule("decline the command", [ShellCommand(declined), "Understood."]),
        GeminiRule("stall", [Step([Text(HELLO)], stall_after_first_chunk_ms=STALL_MS)]),
        GeminiRule("after", ["Back to normal."]),
    )
    async with env.server(nursery, BACKEND_MODEL="") as srv:
        config = {"command": gemini_command(env), "env": GEMINI_ENV}
        tid = await acp_thread(srv, env.work, config)
        accept = await streams_asks_and_stops(srv, tid, accepted, declined, acp_pids)
    [command] = items_completed(accept, "commandExecution")
    assert command["aggregatedOutput"].strip() == "made-it", command
    assert (env.work / "accepted.txt").exists() and not (env.work / "declined.txt").exists()


async def test_gemini_resume_after_restart(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """The session is made to look minutes old before the resume: gemini 0.61.0 wipes a
    session loaded in the minute it was created, which only the named `gemini` backend waits
    out."""
    env = gemini_env
    env.script(GeminiRule("remember", ["Noted: PAPAYA."]), GeminiRule("which", ["PAPAYA."]))
    config = {"command": gemini_command(env), "env": GEMINI_ENV}
    _, events = await remember_then_resume(nursery, env, config, env.age_session, BACKEND_MODEL="")
    assert agent_text(events) == "PAPAYA."
    # the model saw the earlier exchange
    assert "remember the word WORD" in env.fake.model_requests[-1].user_texts


# -- opencode acp ----------------------------------------------------------------------------------


def opencode_config(env: OpenCodeEnv) -> dict[str, Any]:
    # OpenCode runs every tool without asking unless told to (the named backend does this
    # from the thread's approval policy).
    permission = json.dumps({"bash": "ask", "edit": "ask"})
    return {"command": [str(env.cli), "acp"], "env": {"OPENCODE_PERMISSION": permission}}


def chat_script(accepted: ToolCall, declined: ToolCall) -> list[ChatRule]:
    """The rules `streams_asks_and_stops` needs, for a chat-completions fake."""
    return [
        ChatRule("hello", [ChatStep([ChatText(HELLO)], chunk_size=6)]),
        ChatRule("accept the command", [accepted, "Ran it."]),
        ChatRule("decline the command", [declined, "Never said."]),
        ChatRule("stall", [ChatStep([ChatText(HELLO)], stall_after_first_delta_ms=STALL_MS)]),
        ChatRule("after", ["Back to normal."]),
    ]


async def test_opencode_text_approvals_and_interrupt(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    accepted, declined = "printf yes > accepted.txt && echo wrote-it", "printf no > declined.txt"
    env.script(*chat_script(bash_call(accepted), bash_call(declined)))
    async with env.server(nursery) as srv:
        tid = await acp_thread(srv, env.work, opencode_config(env))
        # (The command item may be announced with OpenCode's tool name, `bash`, first: its first
        # tool_call has no arguments yet. The `opencode` backend holds it back until they come.)
        accept = await streams_asks_and_stops(
            srv, tid, accepted, declined, lambda srv: opencode_pids(srv, "acp")
        )
    [command] = items_completed(accept, "commandExecution")
    assert command["command"] == accepted and command["aggregatedOutput"] == "wrote-it\n"
    assert (env.work / "accepted.txt").read_text() == "yes"
    assert not (env.work / "declined.txt").exists()


async def test_opencode_resume_after_restart(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    env.script(ChatRule("remember", ["Noted: PINEAPPLE."]), ChatRule("which", ["PINEAPPLE."]))
    session, events = await remember_then_resume(nursery, env, opencode_config(env))
    assert agent_text(events) == "PINEAPPLE."
    # the same OpenCode session: the model saw the earlier exchange
    assert {r.headers.get("x-session-id") for r in env.fake.model_requests} == {session}
    assert "remember the word WORD" in "\n".join(env.fake.user_texts(-1))


# -- qwen --acp ------------------------------------------------------------------------------------


def qwen_config(env: QwenEnv) -> dict[str, Any]:
    # qwen starts sessions in mode `auto` (a model call approves tools): `default` asks (the
    # named backend sets the mode from the thread's approval policy).
    return {"command": [str(env.cli), "--acp", "--approval-mode", "default"]}


async def test_qwen_text_approvals_and_interrupt(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    accepted, declined = PRINTING_COMMAND, "touch declined.txt"
    env.script(*chat_script(shell_call(accepted), shell_call(declined)))
    async with env.server(nursery) as srv:
        tid = await acp_thread(srv, env.work, qwen_config(env))
        # (The command item is announced with qwen's placeholder title, `Shell`, and qwen's
        # usage reports show as empty message items: the `qwen` backend holds the one back
        # and takes the others out.)
        accept = await streams_asks_and_stops(srv, tid, accepted, declined, qwen_pids)
    [command] = items_completed(accept, "commandExecution")
    assert command["aggregatedOutput"].strip() == "made-it", command
    assert (env.work / "accepted.txt").exists() and not (env.work / "declined.txt").exists()


async def test_qwen_resume_after_restart(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    env.script(ChatRule("remember", ["Noted: MANGO."]), ChatRule("which", ["MANGO."]))
    _, events = await remember_then_resume(nursery, env, qwen_config(env))
    assert agent_text(events) == "MANGO."
    assert "remember the word WORD" in "\n".join(env.fake.user_texts(-1))
