"""A CLI started before the engine is loaded (procs/early.py), with the real CLIs against their
fake model servers: a server that ran a thread in a directory before starts that thread's CLI
at once the next time, before it reads a byte of stdin; the first thread that needs that very
process takes it over (its turns run on it), any other kills it, and it never outlives the
server — not at EOF, not when no thread takes it, and not when the server is SIGKILLed (the
next server reaps it). Every fixture checks no process outlives its test.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.codex_env import CodexEnv, codex_pids
from tests.e2e.opencode_env import OpenCodeEnv, opencode_pids
from tests.e2e.qwen_env import QwenEnv
from tests.e2e.qwen_env import acp_pids as qwen_acp_pids
from tests.fakes.anthropic import Rule as ClaudeRule
from tests.fakes.openai_chat import Rule as ChatRule
from tests.fakes.openai_responses import Rule
from tests.support.cli_env import CliEnv, ServerEnv, child_pids, cmdline
from tests.support.client import ServerProcess, proc_info, running_server
from tests.support.events import agent_text, turn
from threadline.backends.codex.invocation import LAUNCHER_VARS

pytestmark = pytest.mark.e2e

NEVER = {"approvalPolicy": "never", "sandbox": "workspace-write"}


def plans(env: ServerEnv) -> dict[str, Any]:
    data = json.loads((env.home / "early-start.json").read_text())
    assert data["version"] == 1, data
    return data["plans"]  # type: ignore[no-any-return]


async def early_pid(env: ServerEnv, srv: ServerProcess, subcommand: str) -> int:
    """The codex process the server started before anything was sent to it."""
    await env.wait_until(lambda: bool(codex_pids(srv, subcommand)), "the early app-server")
    [pid] = codex_pids(srv, subcommand)
    return pid


async def first_server(nursery: trio.Nursery, env: CodexEnv) -> None:
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, **NEVER)
        t, events = await turn(srv, tid, "first")
        assert t["status"] == "completed" and agent_text(events) == "One.", t


async def test_codex_app_server_starts_early_and_serves_the_next_thread(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(Rule("first", ["One."]), Rule("second", ["Two."]))
    await first_server(nursery, env)
    # the plan: the app-server's command and cwd; of the environment only PWD and what the
    # npm launcher would add (the rest is the next server's own)
    [plan] = plans(env).values()
    assert plan["argv"][1] == "app-server" and plan["cwd"] == str(env.work), plan
    assert plan["envSet"]["PWD"] == str(env.work) and plan["envUnset"] == [], plan
    assert set(plan["envSet"]) <= {"PWD", *LAUNCHER_VARS}, plan

    async with env.server(nursery) as srv:
        pid = await early_pid(env, srv, "app-server")  # before initialize was even sent
        tid = await env.open_thread(srv, **NEVER)
        t, events = await turn(srv, tid, "second")
        assert t["status"] == "completed" and agent_text(events) == "Two.", t
        assert codex_pids(srv, "app-server") == [pid]


async def test_an_early_process_no_thread_needs_is_killed_and_the_plan_replaced(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(Rule("first", ["One."]), Rule("second", ["Two."]))
    await first_server(nursery, env)
    async with env.server(nursery) as srv:
        pid = await early_pid(env, srv, "app-server")
        info = proc_info(pid)
        # a process-wide Codex setting (a `-c` flag) needs an app-server of its own
        other = {"codexConfig": {"history.persistence": "none"}}
        tid = await env.open_thread(srv, **NEVER, config=other)
        t, events = await turn(srv, tid, "second")
        assert t["status"] == "completed" and agent_text(events) == "Two.", t
        now = proc_info(pid)
        assert now is None or now.start != info.start or now.state in ("Z", "X")
        [serving] = codex_pids(srv, "app-server")
        assert serving != pid and 'history.persistence="none"' in cmdline(serving)
    [plan] = plans(env).values()
    assert 'history.persistence="none"' in plan["argv"], plan


async def test_an_unused_early_process_ends_with_the_server(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(Rule("first", ["One."]))
    await first_server(nursery, env)
    async with env.server(nursery) as srv:
        pid = await early_pid(env, srv, "app-server")
        await srv.initialize()
    # the server is gone (stdin EOF, no thread): so is the process it started early
    info = proc_info(pid)
    assert info is None or info.state in ("Z", "X"), cmdline(pid)


async def test_an_early_process_of_a_sigkilled_server_is_reaped_by_the_next(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    env.script(Rule("first", ["One."]), Rule("second", ["Two."]))
    await first_server(nursery, env)
    async with running_server(nursery, env.home, env.env(), check_exit=False) as killed:
        pid = await early_pid(env, killed, "app-server")
        killed.proc.send_signal(signal.SIGKILL)
        await killed.wait(10)
    assert proc_info(pid) is not None, "the early app-server died with its server"
    async with env.server(nursery) as srv:
        await env.wait_until(lambda: proc_info(pid) is None, "the orphan reaped", timeout=10)
        tid = await env.open_thread(srv, **NEVER)
        t, _ = await turn(srv, tid, "second")
        assert t["status"] == "completed", t


async def test_early_start_can_be_turned_off(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    env = codex_env
    env.script(Rule("first", ["One."]))
    await first_server(nursery, env)
    async with env.server(nursery, THREADLINE_EARLY_START="0") as srv:
        await srv.initialize()
        await trio.sleep(0.5)
        assert codex_pids(srv, "app-server") == []


async def test_claude_starts_early_under_a_fresh_session_id(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    env.script(ClaudeRule("first", ["One."]), ClaudeRule("second", ["Two."]))
    async with env.server(nursery) as srv:
        first = await env.open_thread(srv)
        t, _ = await turn(srv, first, "first")
        assert t["status"] == "completed", t
    first_session = env.thread_record(first)["backend_session_id"]

    async with env.server(nursery) as srv:

        def claudes() -> list[int]:
            return child_pids(srv, lambda p: "--input-format" in cmdline(p))

        await env.wait_until(lambda: bool(claudes()), "the early claude")
        [pid] = claudes()
        [flag] = [a for a in cmdline(pid) if a.startswith("--session-id=")]
        tid = await env.open_thread(srv)
        t, events = await turn(srv, tid, "second")
        assert t["status"] == "completed" and agent_text(events) == "Two.", t
        assert claudes() == [pid]
        # the thread's session is the one the early claude was started under, not the last
        # server's, which stays the first thread's
        session = env.thread_record(tid)["backend_session_id"]
        assert flag == f"--session-id={session}" and session != first_session
        assert env.thread_record(first)["backend_session_id"] == first_session


async def test_opencode_acp_agent_starts_early(
    nursery: trio.Nursery, opencode_env: OpenCodeEnv
) -> None:
    env = opencode_env
    env.script(ChatRule("first", ["One."]), ChatRule("second", ["Two."]))
    await acp_agent_starts_early(nursery, env, lambda srv: opencode_pids(srv, "acp"))


async def acp_agent_starts_early(
    nursery: trio.Nursery, env: CliEnv[Any], agents: Callable[[ServerProcess], list[int]]
) -> None:
    """The agent a thread of the last server ran on (one per cwd) starts before the engine
    loads, and the next server's thread in that cwd runs on it."""
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t, events = await turn(srv, tid, "first")
        assert t["status"] == "completed" and agent_text(events) == "One.", t
    async with env.server(nursery) as srv:
        await env.wait_until(lambda: bool(agents(srv)), "the early agent")
        [pid] = agents(srv)
        tid = await env.open_thread(srv)
        t, events = await turn(srv, tid, "second")
        assert t["status"] == "completed" and agent_text(events) == "Two.", t
        assert agents(srv) == [pid]


async def test_qwen_acp_agent_starts_early(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    env = qwen_env
    env.script(ChatRule("first", ["One."]), ChatRule("second", ["Two."]))
    await acp_agent_starts_early(nursery, env, qwen_acp_pids)
