"""The real `claude` CLI behind a WebSocket listener (against tests/fakes' Anthropic API): two
clients on one thread, the approval answered by the one that did not start the turn, a client
that leaves mid-turn, SIGTERM with the CLI running — and no process left behind (the
`claude_env` fixture's orphan check)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import Rule, ToolUse
from tests.support.ws_client import listening_server, ws_connect

pytestmark = pytest.mark.e2e


def bash(command: str) -> ToolUse:
    return ToolUse("Bash", {"command": command, "description": "Run the requested command"})


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


async def test_claude_over_ws_with_two_clients(claude_env: ClaudeEnv) -> None:
    env = claude_env
    env.script(
        Rule("please accept", [bash("touch accepted.txt && echo made-it"), "Created it."]),
        Rule("then wait", [bash("sleep 1 && touch waited.txt"), "Waited."]),
    )
    async with (
        listening_server(env.home, "ws://127.0.0.1:0", env=env.env()) as srv,
        ws_connect(srv.url) as a,
        ws_connect(srv.url) as b,
    ):
        await a.initialize()
        await b.initialize()
        started = await a.call("thread/start", {"modelProvider": "claude", "cwd": str(env.work)})
        tid = started["thread"]["id"]
        await b.call("thread/resume", {"threadId": tid})
        await a.call("turn/start", {"threadId": tid, "input": text("please accept")})
        seen_a: list[dict[str, Any]] = []
        request = await b.wait_for("item/commandExecution/requestApproval", timeout=60)
        assert request["params"]["command"] == "touch accepted.txt && echo made-it"
        await b.send({"id": request["id"], "result": {"decision": "accept"}})
        done = await a.wait_for("turn/completed", timeout=60, seen=seen_a)
        assert done["params"]["turn"]["status"] == "completed"
        assert (env.work / "accepted.txt").exists()
        resolved = [e for e in seen_a if e.get("method") == "serverRequest/resolved"]
        assert [e["params"]["requestId"] for e in resolved] == [request["id"]]
        await b.wait_for("turn/completed", timeout=30)

        # b starts a turn and leaves once it is approved; the turn ends on its own, a sees it.
        await b.call("turn/start", {"threadId": tid, "input": text("then wait")})
        request = await a.wait_for("item/commandExecution/requestApproval", timeout=60)
        await a.send({"id": request["id"], "result": {"decision": "accept"}})
        await b.ws.aclose()
        done = await a.wait_for("turn/completed", timeout=60)
        assert done["params"]["turn"]["status"] == "completed"
        assert (env.work / "waited.txt").exists()
