"""The thread's MCP servers (`config.mcp_servers`) on the real `codex` CLI, in both modes,
with the test MCP server (tests/fakes/mcp_server.py) and the fake Responses API calling its
tools (Codex offers a server's tools as namespace `mcp__<server>`, each by its own name).

Measured on Codex 0.169.0: it asks before an MCP call by `mcpServer/elicitation/request`
(`_meta.codex_approval_kind: "mcp_tool_call"`), which threadline relays as
`item/tool/requestApproval`; `codex exec` cannot ask, so there MCP tools run only under
approval policy `never` (fail closed).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.codex_env import CodexEnv
from tests.fakes.openai_responses import FunctionCall, Rule
from tests.support.client import notifications
from tests.support.events import (
    agent_text,
    answer_by_method,
    ask_order,
    decide,
    items_completed,
    items_started,
    requests_in,
    turn,
)
from tests.support.mcp import MCP_SERVER, ROOT, logged_calls, servers
from threadline.backends.codex.exec import EXEC_REFUSED

pytestmark = pytest.mark.e2e

SECRET = "mcp-secret-7f3a9c"
LITERAL = "mcp-literal-81d2e4"
MODES = ["app-server", "exec"]


def call(tool: str, **arguments: Any) -> FunctionCall:
    """The model calls `tool` of the server "srv"."""
    return FunctionCall(tool, arguments, namespace="mcp__srv")


async def open_thread(env: CodexEnv, srv: Any, mode: str, policy: str, mcp: dict[str, Any]) -> str:
    config = {"mode": mode, "mcp_servers": mcp}
    return await env.open_thread(srv, approvalPolicy=policy, sandbox="read-only", config=config)


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_tool_call_then_a_second_turn(
    nursery: trio.Nursery, codex_env: CodexEnv, mode: str
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(
        Rule("call echo", [call("echo", text="hi there"), "Echoed."]),
        Rule("again", ["Still here."]),
    )
    async with env.server(nursery) as srv:
        tid = await open_thread(env, srv, mode, "never", servers(log))
        t, events = await turn(srv, tid, "call echo please")
        assert t["status"] == "completed", t
        assert requests_in(events) == []
        [started] = items_started(events, "mcpToolCall")
        assert (started["server"], started["tool"]) == ("srv", "echo")
        assert started["arguments"] == {"text": "hi there"} and started["status"] == "inProgress"
        [done] = items_completed(events, "mcpToolCall")
        assert done["id"] == started["id"] and done["status"] == "completed", done
        assert done["result"]["content"] == [{"type": "text", "text": "echo: hi there"}]
        # the result went back to the model
        [output] = env.fake.function_outputs(-1)
        assert "echo: hi there" in json.dumps(output)
        assert agent_text(events) == "Echoed."
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hi there"}}]
        t2, events = await turn(srv, tid, "again")
        assert t2["status"] == "completed" and agent_text(events) == "Still here."


@pytest.mark.parametrize("policy", ["untrusted", "on-request"])
@pytest.mark.parametrize("decision", ["accept", "decline"])
async def test_mcp_call_asks_first(
    nursery: trio.Nursery, codex_env: CodexEnv, policy: str, decision: str
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("call echo", [call("echo", text="ask me"), "After the call."]))
    async with env.server(nursery) as srv:
        tid = await open_thread(env, srv, "app-server", policy, servers(log))
        answer = answer_by_method({"item/tool/requestApproval": decide(decision)})
        t, events = await turn(srv, tid, "call echo please", answer)
        assert t["status"] == "completed", t
        [ask] = requests_in(events)
        assert ask["method"] == "item/tool/requestApproval"
        [started] = items_started(events, "mcpToolCall")
        params = ask["params"]
        assert params["itemId"] == started["id"] and params["tool"] == "mcp__srv__echo"
        assert params["arguments"] == {"text": "ask me"}
        # announced, asked, then done
        order = ask_order(events, ask, started["id"])
        assert order == ["item/started", "item/tool/requestApproval", "item/completed"], order
        [done] = items_completed(events, "mcpToolCall")
        if decision == "accept":
            assert done["status"] == "completed", done
            assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "ask me"}}]
        else:
            assert done["status"] == "failed" and done["error"]["message"], done
            assert logged_calls(log) == []
        assert agent_text(events) == "After the call."


async def test_exec_mode_refuses_mcp_calls_unless_never(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("call echo", [call("echo", text="no"), "Refused then."]))
    async with env.server(nursery) as srv:
        tid = await open_thread(env, srv, "exec", "untrusted", servers(log))
        t, events = await turn(srv, tid, "call echo please")
        assert t["status"] == "completed", t
        assert requests_in(events) == []
        [done] = items_completed(events, "mcpToolCall")
        assert done["status"] == "failed" and done["error"]["message"] == EXEC_REFUSED
        assert logged_calls(log) == []
        # the model is told by Codex itself
        assert "requires approval" in json.dumps(env.fake.function_outputs(-1))


async def test_mcp_tool_fails_and_server_crashes(
    nursery: trio.Nursery, codex_env: CodexEnv
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(
        Rule("call fail", [call("fail", text="oops"), "It failed."]),
        Rule("call crash", [call("crash", text="bye"), "It crashed."]),
        Rule("after", ["Still here."]),
    )
    async with env.server(nursery) as srv:
        tid = await open_thread(env, srv, "app-server", "never", servers(log))
        t, events = await turn(srv, tid, "call fail please")
        assert t["status"] == "completed", t
        [done] = items_completed(events, "mcpToolCall")
        # (the SDK's server answers a tool's exception with this text, flagged isError)
        assert done["status"] == "failed", done
        assert done["error"]["message"] == "Error executing tool fail", done
        t, events = await turn(srv, tid, "call crash please")
        assert t["status"] == "completed", t
        [done] = items_completed(events, "mcpToolCall")
        assert done["status"] == "failed" and done["error"]["message"], done
        assert [c["tool"] for c in logged_calls(log)] == ["fail", "crash"]
        t, events = await turn(srv, tid, "after that")
        assert t["status"] == "completed" and agent_text(events) == "Still here."


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_server_that_fails_to_start(
    nursery: trio.Nursery, codex_env: CodexEnv, mode: str
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("hello", ["Hello anyway."]), Rule("again", ["Again."]))
    broken = servers(log, MCP_TEST_EXIT_AT_START="boom: cannot start")
    async with env.server(nursery) as srv:
        tid = await open_thread(env, srv, mode, "never", broken)
        t, events = await turn(srv, tid, "hello")
        assert t["status"] == "completed" and agent_text(events) == "Hello anyway.", t
        [warning] = notifications(events, "warning")
        message = warning["params"]["message"]
        assert "'srv'" in message and "failed to start" in message, message
        # warned once: the next turn goes on quietly
        t, events = await turn(srv, tid, "again")
        assert t["status"] == "completed" and notifications(events, "warning") == []


def _files_with(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_secret_by_env_reference(
    nursery: trio.Nursery, codex_env: CodexEnv, mode: str
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("hello", ["Hi."]), Rule("secret", [call("env", name="MY_SECRET"), "Got it."]))
    mcp = servers(log, LITERAL_SECRET=LITERAL)  # a literal value: not stored either
    mcp["srv"]["env_vars"] = ["MY_SECRET"]
    async with env.server(nursery, MY_SECRET=SECRET) as srv:
        tid = await open_thread(env, srv, mode, "never", mcp)
        t, events = await turn(srv, tid, "hello")
        assert t["status"] == "completed", t
        for value in (SECRET, LITERAL):
            assert value not in json.dumps(events)
            # neither threadline's state nor Codex's sessions and logs hold it (Codex's shell
            # snapshot has threadline's environment, MY_SECRET included: not a config value)
            assert _files_with(env.home, value) == []
            assert [
                p for p in _files_with(env.codex_home, value) if "shell_snap" not in str(p)
            ] == []
        t, events = await turn(srv, tid, "the secret")
        [done] = items_completed(events, "mcpToolCall")
        assert done["result"]["content"] == [{"type": "text", "text": SECRET}], done
    for server in env.servers:  # threadline's stderr log
        assert server.server is not None
        assert SECRET not in server.server.stderr_text
        assert LITERAL not in server.server.stderr_text


@contextmanager
def http_server(log: Path) -> Iterator[str]:
    """The test MCP server over streamable HTTP on a free loopback port; its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    repo = str(ROOT)
    code = (
        f"import sys; sys.path.insert(0, {repo!r}); from tests.fakes.mcp_server import app; "
        f"app.run('streamable-http', port={port})"
    )
    env = {**os.environ, "MCP_TEST_LOG": str(log)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(300):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, "the HTTP MCP server exited"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_http_server(nursery: trio.Nursery, codex_env: CodexEnv, mode: str) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("call echo", [call("echo", text="over http"), "Echoed."]))
    with http_server(log) as url:
        mcp = {"srv": {"url": url, "bearer_token_env_var": "MCP_TOKEN"}}
        async with env.server(nursery, MCP_TOKEN="tok-123") as srv:
            tid = await open_thread(env, srv, mode, "never", mcp)
            t, events = await turn(srv, tid, "call echo please")
            assert t["status"] == "completed", t
            [done] = items_completed(events, "mcpToolCall")
            assert done["status"] == "completed", done
            assert done["result"]["content"] == [{"type": "text", "text": "echo: over http"}]
            assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "over http"}}]


@pytest.mark.parametrize("mode", MODES)
async def test_mcp_servers_after_a_restart(
    nursery: trio.Nursery, codex_env: CodexEnv, mode: str
) -> None:
    env = codex_env
    log = env.tmp / "mcp.log"
    env.script(Rule("hello", ["Hi."]), Rule("call echo", [call("echo", text="resumed"), "Done."]))
    # by reference: a literal value is not stored with the thread
    mcp = {
        "srv": {"command": sys.executable, "args": [str(MCP_SERVER)], "env_vars": ["MCP_TEST_LOG"]}
    }
    async with env.server(nursery, MCP_TEST_LOG=str(log)) as srv:
        tid = await open_thread(env, srv, mode, "never", mcp)
        t, _ = await turn(srv, tid, "hello")
        assert t["status"] == "completed", t
    async with env.server(nursery, MCP_TEST_LOG=str(log)) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        t, events = await turn(srv, tid, "call echo please")
        assert t["status"] == "completed", t
        [done] = items_completed(events, "mcpToolCall")
        assert done["status"] == "completed", done
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "resumed"}}]
