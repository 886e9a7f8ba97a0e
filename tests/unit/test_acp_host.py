"""`AcpHost` against a small scripted agent process: the agent's requests answered by the
session they name, its error answers, and an agent that exits at start-up or mid-request."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest
import trio

from threadline.backends.base import BackendError
from threadline.backends.kit.acp import AcpError, AcpHost

# Answers `initialize` and `session/new`; `x/ask` makes it send the requests in its params to
# us and answer with our replies; `x/fail` gets an error answer; `x/exit` makes it exit.
_AGENT = """
import json, os, sys

def send(message):
    print(json.dumps(message), flush=True)

if os.environ.get("AGENT_MODE") == "exit-at-start":
    sys.stderr.write("no credentials here\\n")
    sys.exit(3)
for line in sys.stdin:
    message = json.loads(line)
    rid, method, params = message.get("id"), message.get("method"), message.get("params")
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": {"x": 1}}})
    elif method == "session/new":
        send({"id": rid, "result": {"sessionId": "s1"}})
    elif method == "x/ask":
        for n, request in enumerate(params["requests"]):
            send({"id": f"ask-{n}", **request})
        replies = [json.loads(sys.stdin.readline()) for _ in params["requests"]]
        send({"id": rid, "result": sorted(replies, key=lambda r: r["id"])})
    elif method == "x/fail":
        error = {"code": 401, "message": "Unauthorized", "data": {"details": "bad key"}}
        send({"id": rid, "error": error})
    elif method == "x/exit":
        sys.stderr.write("crashed on purpose\\n")
        sys.exit(1)
"""


class Session:
    """A hosted session: answers `fs/read_text_file` for `here.txt` only."""

    ignores_updates = False
    in_turn = False

    def __init__(self) -> None:
        self.died = False

    def on_update(self, update: dict[str, Any]) -> None:
        pass

    async def on_request(self, method: str, params: dict[str, Any]) -> Any:
        if params.get("path") == "here.txt":
            return {"content": "hello"}
        raise AcpError(-32002, f"Resource not found: {params.get('path')}")

    def host_died(self) -> None:
        self.died = True


def agent(mode: str = "") -> AcpHost:
    env = {**os.environ, "AGENT_MODE": mode}
    return AcpHost([sys.executable, "-c", _AGENT], os.getcwd(), env, "agent")


async def test_the_agents_requests_are_answered_by_the_session_they_name() -> None:
    host = agent()
    session = Session()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        assert host.init_result == {"protocolVersion": 1, "agentCapabilities": {"x": 1}}
        assert await host.request("session/new", {"cwd": "/"}) == {"sessionId": "s1"}
        host.sessions["s1"] = session
        read = "fs/read_text_file"
        requests = [
            {"method": read, "params": {"sessionId": "s1", "path": "here.txt"}},
            {"method": read, "params": {"sessionId": "s1", "path": "gone.txt"}},
            {"method": read, "params": {"sessionId": "s9", "path": "here.txt"}},
        ]
        replies = await host.request("x/ask", {"requests": requests})
        host.stop()
    assert [{k: v for k, v in r.items() if k != "jsonrpc"} for r in replies] == [
        {"id": "ask-0", "result": {"content": "hello"}},
        {"id": "ask-1", "error": {"code": -32002, "message": "Resource not found: gone.txt"}},
        {"id": "ask-2", "error": {"code": -32602, "message": "unknown session 's9'"}},
    ]
    assert not host.alive


async def test_an_error_answer_raises_acp_error_with_its_code_and_data() -> None:
    host = agent()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        with pytest.raises(AcpError) as info:
            await host.request("x/fail", {})
        host.stop()
    assert (info.value.code, info.value.message) == (401, "Unauthorized")
    assert info.value.data == {"details": "bad key"}


async def test_an_agent_that_exits_at_start_up_fails_with_its_stderr() -> None:
    host = agent("exit-at-start")
    async with trio.open_nursery() as nursery:
        with pytest.raises(BackendError) as info:
            await nursery.start(host.run)
    assert info.value.message.startswith("agent exited during start-up (exit code 3)")
    assert "no credentials here" in info.value.message


async def test_an_agent_that_exits_mid_request_fails_it_and_its_sessions() -> None:
    host = agent()
    session = Session()
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        host.sessions["s1"] = session
        with pytest.raises(BackendError) as info:
            await host.request("x/exit", {})
    assert info.value.message.startswith("agent exited while answering x/exit (exit code 1)")
    assert "crashed on purpose" in info.value.message
    assert session.died and not host.alive
    with pytest.raises(BackendError, match="agent is not running"):
        await host.request("session/new", {})
