"""The thread's MCP servers (`config.mcp_servers`) on the Gemini CLI backend, end to end: the
real `gemini` (ACP, and headless `-p`) starts the test MCP server (tests/fakes/mcp_server.py),
the fake model calls its tools by the CLI's names (``mcp_<server>_<tool>``), and the client
sees `mcpToolCall` items, approvals, failures and warnings.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tests.e2e.gemini_env import GeminiEnv
from tests.fakes.gemini import FunctionCall, Rule
from tests.support.client import Message
from tests.support.events import (
    items_completed,
    items_started,
    notifications,
    requests_in,
    status,
    turn,
)
from tests.support.mcp import logged_calls, server_entry, servers

pytestmark = pytest.mark.e2e

HEADLESS = {"mode": "headless"}


def approve(decision: str, seen: list[Message]) -> Any:
    def on_request(message: Message) -> Any:
        assert message["method"] == "item/tool/requestApproval", message
        seen.append(message)
        return {"decision": decision}

    return on_request


def echo_rule(trigger: str, text: str) -> Rule:
    return Rule(trigger, [FunctionCall("mcp_srv_echo", {"text": text}), f"Echoed {text}."])


def mcp_result_text(item: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in item["result"]["content"])


# -- ACP ------------------------------------------------------------------------------------------


async def test_acp_mcp_echo_item_and_second_turn(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    env = gemini_env
    log = env.tmp / "mcp.jsonl"
    env.script(echo_rule("first echo", "hello"), Rule("second turn", ["Still here."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={"mcp_servers": servers(log)}
        )
        t, events = await turn(srv, tid, "first echo")
        assert status(t) == "completed", t
        assert not requests_in(events)  # policy never: nobody is asked
        [started] = items_started(events, "mcpToolCall")
        assert (started["server"], started["tool"], started["status"]) == (
            "srv",
            "echo",
            "inProgress",
        )
        assert started["arguments"] == {"text": "hello"}
        [done] = items_completed(events, "mcpToolCall")
        assert done["id"] == started["id"] and done["status"] == "completed", done
        assert mcp_result_text(done) == "echo: hello"
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hello"}}]

        t2, events2 = await turn(srv, tid, "second turn")
        assert status(t2) == "completed" and not items_started(events2, "mcpToolCall")

    # the CLI offers the server's tools as mcp_<server>_<tool>, and sent the result back
    first = env.fake.model_requests[0]
    assert {"mcp_srv_echo", "mcp_srv_fail", "mcp_srv_env"} <= set(first.tool_names)
    [response] = env.fake.model_requests[1].function_responses
    assert response["name"] == "mcp_srv_echo"
    assert "echo: hello" in json.dumps(response["response"])


@pytest.mark.parametrize("policy", ["untrusted", "on-request"])
async def test_acp_mcp_approval_decline_then_accept(
    nursery: trio.Nursery, gemini_env: GeminiEnv, policy: str
) -> None:
    env = gemini_env
    log = env.tmp / "mcp.jsonl"
    env.script(echo_rule("please decline", "no"), echo_rule("please accept", "yes"))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy=policy, config={"mcp_servers": servers(log)}
        )
        seen: list[Message] = []
        t, events = await turn(srv, tid, "please decline", approve("decline", seen))
        assert status(t) == "completed", t
        [request] = seen
        [item] = items_completed(events, "mcpToolCall")
        assert request["params"]["itemId"] == item["id"]
        assert request["params"]["tool"] == "mcp__srv__echo"
        assert request["params"]["arguments"] == {"text": "no"}
        assert item["status"] == "failed" and "declined" in item["error"]["message"]
        assert logged_calls(log) == []  # the tool never ran

        seen.clear()
        t, events = await turn(srv, tid, "please accept", approve("accept", seen))
        assert status(t) == "completed", t
        assert len(seen) == 1
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "completed" and mcp_result_text(item) == "echo: yes"
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "yes"}}]


async def test_acp_mcp_fail_and_crash(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    env = gemini_env
    log = env.tmp / "mcp.jsonl"
    env.script(
        Rule("make it fail", [FunctionCall("mcp_srv_fail", {"text": "oops"}), "It failed."]),
        Rule("make it crash", [FunctionCall("mcp_srv_crash", {"text": "bye"}), "It crashed."]),
        Rule("after the crash", ["Still fine."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={"mcp_servers": servers(log)}
        )
        t, events = await turn(srv, tid, "make it fail")
        assert status(t) == "completed", t
        [item] = items_completed(events, "mcpToolCall")
        assert (item["tool"], item["status"]) == ("fail", "failed"), item
        assert "fail" in item["error"]["message"]

        t, events = await turn(srv, tid, "make it crash")
        assert status(t) == "completed", t
        [item] = items_completed(events, "mcpToolCall")
        assert (item["tool"], item["status"]) == ("crash", "failed"), item
        assert item["error"]["message"]

        t, events = await turn(srv, tid, "after the crash")
        assert status(t) == "completed", t
    assert [c["tool"] for c in logged_calls(log)] == ["fail", "crash"]


async def test_acp_mcp_secret_by_env_reference(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    await _secret_by_reference(nursery, gemini_env, {})


# -- headless -------------------------------------------------------------------------------------


async def test_headless_mcp_echo_and_policy(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """`never`: the tool runs (an item with its result). Headless cannot ask: under any other
    policy Gemini denies MCP tools, and the item ends failed as declined (the tool never ran)."""
    env = gemini_env
    log = env.tmp / "mcp.jsonl"
    env.script(
        echo_rule("first echo", "hello"),
        echo_rule("untrusted echo", "no"),
        Rule("second turn", ["Still here."]),
    )
    config = {**HEADLESS, "mcp_servers": servers(log)}
    scratch = env.tmp / "scratch"  # threadline's TMPDIR: the CLI's settings go there
    scratch.mkdir()
    async with env.server(nursery, TMPDIR=str(scratch)) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never", config=config)
        t, events = await turn(srv, tid, "first echo")
        assert status(t) == "completed", t
        [item] = items_completed(events, "mcpToolCall")
        assert (item["server"], item["tool"], item["arguments"]) == (
            "srv",
            "echo",
            {"text": "hello"},
        )
        assert item["status"] == "completed", json.dumps(item)
        assert mcp_result_text(item) == "echo: hello"
        assert logged_calls(log) == [{"tool": "echo", "arguments": {"text": "hello"}}]
        t, events = await turn(srv, tid, "second turn")  # --resume, with the servers again
        assert status(t) == "completed" and not items_started(events, "mcpToolCall"), t
        assert env.fake.model_requests[-1].function_responses  # turn 1's call in the history

        tid = await srv.start_thread(
            env.work, modelProvider="gemini", approvalPolicy="untrusted", config=config
        )
        t, events = await turn(srv, tid, "untrusted echo")
        assert status(t) == "completed", t
        assert not requests_in(events)
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "failed" and "declined" in item["error"]["message"], item
        assert len(logged_calls(log)) == 1  # not run
    # the private home with the settings is gone with the turn
    assert not [p for p in scratch.iterdir() if p.name.startswith("threadline-gemini-")]


async def test_headless_mcp_secret_by_env_reference(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    await _secret_by_reference(nursery, gemini_env, HEADLESS)


# -- shared ---------------------------------------------------------------------------------------

SECRET = "s3cr3t-value-4815162342"


async def _secret_by_reference(
    nursery: trio.Nursery, env: GeminiEnv, config: dict[str, Any]
) -> None:
    """`env_vars: [MY_SECRET]`: the value reaches the server from threadline's environment,
    and never shows in threadline's state, its stderr, or the notifications."""
    log = env.tmp / "mcp.jsonl"
    env.script(
        Rule("read the secret", [FunctionCall("mcp_srv_env", {"name": "MY_SECRET"}), "Got it."])
    )
    entry = {**server_entry(log), "env_vars": ["MY_SECRET"]}
    async with env.server(nursery, MY_SECRET=SECRET) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={**config, "mcp_servers": {"srv": entry}}
        )
        t, events = await turn(srv, tid, "read the secret")
        assert status(t) == "completed", t
        [item] = items_completed(events, "mcpToolCall")
        assert mcp_result_text(item) == SECRET  # the server got it
        stderr = srv.stderr_text
    # The tool's own answer carries the value (the model asked for it): nothing else does.
    for event in events:
        text = json.dumps(event)
        if SECRET in text:
            assert event["params"]["item"]["type"] == "mcpToolCall", event
            assert SECRET not in json.dumps({**event["params"]["item"], "result": None})
    assert SECRET not in stderr
    for path in env.home.rglob("*"):
        if path.is_file():
            data = path.read_text(errors="replace")
            for answer in (f'"text":"{SECRET}"', f'"text": "{SECRET}"'):
                data = data.replace(answer, "")
            assert SECRET not in data, path


@pytest.mark.parametrize("config", [{}, HEADLESS], ids=["acp", "headless"])
async def test_mcp_server_failing_to_start_is_a_warning(
    nursery: trio.Nursery, gemini_env: GeminiEnv, config: dict[str, Any]
) -> None:
    env = gemini_env
    log = env.tmp / "mcp.jsonl"
    env.script(echo_rule("use the good one", "fine"))
    broken = server_entry(log, MCP_TEST_EXIT_AT_START="broken on purpose")
    mcp = {**servers(log), "broken": broken}
    async with env.server(nursery) as srv:
        tid = await env.open_thread(
            srv, approvalPolicy="never", config={**config, "mcp_servers": mcp}
        )
        t, events = await turn(srv, tid, "use the good one")
        assert status(t) == "completed", t
        warnings = [e["params"]["message"] for e in notifications(events, "warning")]
        assert any("'broken'" in w and "failed to start" in w for w in warnings), warnings
        assert not any("'srv'" in w for w in warnings), warnings
        [item] = items_completed(events, "mcpToolCall")
        assert item["status"] == "completed"  # the other server works
