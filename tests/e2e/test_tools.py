"""Tools for agents, end to end on the mock backend: threadline as a subprocess, its tool host
and the real bridge process, the mock acting as the MCP client a CLI would be (`/mcp`).

Client-defined tools (`dynamicTools`): each call is a `dynamicToolCall` item and an
`item/tool/call` request; what the client answers reaches the agent; every failure (error,
garbage, timeout, interrupt, a client gone) fails the call, never the server. Per-thread MCP
servers (`config.mcp_servers`): validated, called behind an approval, secrets by reference
only. The real CLIs are driven the same way in each backend's e2e tests."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import (
    ServerProcess,
    assert_items_balanced,
    descendants,
    notifications,
    running_server,
    wait_gone,
)
from tests.support.events import resolved_ids
from tests.support.mcp import (
    hold_call,
    interrupt_held_call,
    logged_calls,
    server_entry,
    tool_answer,
)

pytestmark = pytest.mark.e2e

LOOKUP = {
    "name": "lookup",
    "description": "Look a word up.",
    "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
NAMESPACE = {
    "type": "namespace",
    "name": "kb",
    "description": "The knowledge base.",
    "tools": [
        {
            "type": "function",
            "name": "search",
            "description": "Search it.",
            "inputSchema": {"type": "object"},
        }
    ],
}


def tool_calls(events: list[Any]) -> list[dict[str, Any]]:
    return [e for e in events if isinstance(e, dict) and e.get("method") == "item/tool/call"]


def items(events: list[Any], kind: str, method: str = "item/completed") -> list[dict[str, Any]]:
    return [
        e["params"]["item"]
        for e in notifications(events, method)
        if e["params"]["item"]["type"] == kind
    ]


def reply(events: list[Any]) -> str:
    return "\n".join(i["text"] for i in items(events, "agentMessage"))


async def wait_logged(srv: ServerProcess, text: str) -> None:
    with trio.fail_after(10):
        while text not in srv.stderr_text:  # noqa: ASYNC110 - the log is a plain string
            await trio.sleep(0.05)


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """The server's TMPDIR: short enough that the tool host's socket goes there (a unix
    socket's path is limited; under a longer one it goes to /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="tl-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    return {"TMPDIR": str(tmp), **extra}


async def start(srv: ServerProcess, workdir: Path, **params: Any) -> str:
    await srv.initialize()
    return await srv.start_thread(workdir, **params)


async def test_dynamic_tool_round_trip(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP, NAMESPACE])

        def client(request: dict[str, Any]) -> Any:
            args = request["params"]["arguments"]
            return tool_answer(f"{request['params']['tool']} found {args.get('q')}")

        prompt = '/mcp threadline lookup {"q": "trio"}\n/mcp threadline kb__search {"q": "mcp"}'
        done, events = await srv.run_turn(tid, prompt, on_request=client)
        assert done["params"]["turn"]["status"] == "completed", events
        calls = tool_calls(events)
        assert [(c["params"]["tool"], c["params"].get("namespace")) for c in calls] == [
            ("lookup", None),
            ("search", "kb"),
        ]
        first = calls[0]["params"]
        assert first["threadId"] == tid and first["turnId"] == done["params"]["turn"]["id"]
        assert first["arguments"] == {"q": "trio"}
        # the call is a dynamicToolCall item whose id is the callId, completed with the answer
        completed = items(events, "dynamicToolCall")
        assert [i["id"] for i in completed] == [c["params"]["callId"] for c in calls]
        assert completed[0]["status"] == "completed" and completed[0]["success"] is True
        assert completed[0]["contentItems"] == [{"type": "inputText", "text": "lookup found trio"}]
        assert completed[1]["namespace"] == "kb"
        # what the client answered reached the agent
        assert "lookup: lookup found trio" in reply(events)
        assert "kb__search: search found mcp" in reply(events)
        assert resolved_ids(events) == [c["id"] for c in calls]
        assert_items_balanced(events)
        # a second turn calls it again
        done, events = await srv.run_turn(
            tid, '/mcp threadline lookup {"q": "again"}', on_request=client
        )
        assert "lookup found again" in reply(events), events


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            {"error": {"code": -32000, "message": "lookup service down"}},
            "the client's tool failed: lookup service down",
        ),
        ({"result": {"contentItems": "nope"}}, "something unusable"),
        ({"result": tool_answer("no such word", success=False)}, "no such word"),
    ],
    ids=["error", "garbage", "unsuccessful"],
)
async def test_dynamic_tool_failures_fail_the_call_not_the_turn(
    nursery: trio.Nursery,
    home: Path,
    workdir: Path,
    short_tmp: Path,
    answer: dict[str, Any],
    expected: str,
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP])
        turn_id, call, events = await hold_call(srv, tid, '/mcp threadline lookup {"q": "x"}')
        await srv.send({"id": call["id"], **answer})
        done, events = await srv.collect_turn(turn_id, events=events)
        assert done["params"]["turn"]["status"] == "completed", events
        (item,) = items(events, "dynamicToolCall")
        assert item["status"] == "failed" and item["success"] is False, item
        assert expected in reply(events), reply(events)
        assert_items_balanced(events)


async def test_unanswered_call_times_out(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP], config={"toolCallTimeoutMs": 300})
        turn_id, call, events = await hold_call(srv, tid, '/mcp threadline lookup {"q": "x"}')
        _done, events = await srv.collect_turn(turn_id, events=events, on_request=lambda r: None)
        assert "did not answer the tool call within 0.3 s" in reply(events), events
        assert call["id"] in resolved_ids(events)
        (item,) = items(events, "dynamicToolCall")
        assert item["status"] == "failed"
        # a late answer is ignored, the server keeps serving
        await srv.send({"id": call["id"], "result": tool_answer("late")})
        await srv.run_turn(tid, "still here")


async def test_interrupt_during_a_pending_call(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP])
        events = await interrupt_held_call(srv, tid, '/mcp threadline lookup {"q": "x"}')
        assert [i["status"] for i in items(events, "dynamicToolCall")] == ["failed"]
        assert_items_balanced(events)
        done, _ = await srv.run_turn(tid, "next")
        assert done["params"]["turn"]["status"] == "completed"


async def test_client_gone_during_a_call_leaves_no_process(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP])
        await hold_call(srv, tid, '/mcp threadline lookup {"q": "x"}')
        tree = descendants(srv.pid)
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in tree]
        assert any(b"bridge.py" in line for line in cmdlines), cmdlines
        assert list(short_tmp.glob("threadline-tools-*/tools.sock"))
        await srv.close_stdin()
        assert await srv.wait(20) == 0
        assert await wait_gone(tree, 10) == []
    assert not list(short_tmp.glob("threadline-tools-*")), "the socket directory stays"


async def test_dynamic_tools_survive_a_restart(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        tid = await start(srv, workdir, dynamicTools=[LOOKUP])
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        _done, events = await srv.run_turn(
            tid,
            '/mcp threadline lookup {"q": "back"}',
            on_request=lambda r: tool_answer("back again"),
        )
        assert "lookup: back again" in reply(events), events


async def test_wrong_token_is_refused(
    nursery: trio.Nursery, home: Path, workdir: Path, short_tmp: Path
) -> None:
    async with running_server(nursery, home, env_for(short_tmp)) as srv:
        await start(srv, workdir, dynamicTools=[LOOKUP])
        (path,) = short_tmp.glob("threadline-tools-*/tools.sock")
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(path))
            sock.sendall(b"not-the-token\n")
            sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n')
            sock.settimeout(10)
            assert sock.recv(100) == b""  # closed without an answer
        await wait_logged(srv, "refused a tool connection: unknown token")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"dynamicTools": [{"name": "has space"}]}, "'has space'"),
        ({"dynamicTools": [LOOKUP, LOOKUP]}, "defined twice"),
        ({"dynamicTools": [{"name": "t", "inputSchema": {"type": "string"}}]}, "type 'object'"),
        ({"config": {"mcp_servers": {"threadline": {"command": "x"}}}}, "reserved"),
        ({"config": {"mcp_servers": {"s": {"args": ["x"]}}}}, "config.mcp_servers.s: give either"),
        ({"config": {"mcp_servers": {"s": {"command": 5}}}}, "config.mcp_servers.s"),
        ({"config": {"mcp_servers": ["x"]}}, "must be an object"),
    ],
)
async def test_bad_tool_config_is_refused(
    nursery: trio.Nursery, home: Path, workdir: Path, params: dict[str, Any], message: str
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        error = await srv.error(
            "thread/start", {"modelProvider": "mock", "cwd": str(workdir), **params}
        )
        assert error["code"] == -32602 and message in error["message"], error
        await srv.start_thread(workdir)  # the server goes on


def mcp_config(log: Path, **server: Any) -> dict[str, Any]:
    """`config` with the test MCP server as "srv", `server`'s keys added to its entry."""
    return {"mcp_servers": {"srv": {**server_entry(log), **server}}}


async def test_mcp_server_call_asks_first(
    nursery: trio.Nursery, home: Path, workdir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    async with running_server(nursery, home) as srv:
        tid = await start(srv, workdir, approvalPolicy="untrusted", config=mcp_config(log))
        prompt = '/mcp srv echo {"text": "hi"}'
        done, events = await srv.run_turn(tid, prompt)  # (the client declines)
        assert done["params"]["turn"]["status"] == "completed", events
        asked = [e for e in events if e.get("method") == "item/tool/requestApproval"]
        assert len(asked) == 1 and asked[0]["params"]["tool"] == "mcp__srv__echo", events
        assert not log.exists(), "the declined tool ran"
        (item,) = items(events, "mcpToolCall")
        assert item["status"] == "failed" and item["server"] == "srv" and item["tool"] == "echo"
        _done, events = await srv.run_turn(tid, prompt, on_request=lambda r: {"decision": "accept"})
        (item,) = items(events, "mcpToolCall")
        assert item["status"] == "completed", item
        assert item["result"]["content"] == [{"type": "text", "text": "echo: hi"}]
        assert [c["tool"] for c in logged_calls(log)] == ["echo"]
        assert_items_balanced(events)


async def test_mcp_secrets_by_reference_stay_out_of_state(
    nursery: trio.Nursery, home: Path, workdir: Path, tmp_path: Path
) -> None:
    secret, literal = "sk-REFERENCED-7f3a9", "LITERAL-VALUE-22c1"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    log = tmp_path / "calls.jsonl"
    config = mcp_config(log, env_vars=["MY_SECRET"])
    config["mcp_servers"]["srv"]["env"]["LITERAL_KEY"] = literal
    async with running_server(nursery, home, {"MY_SECRET": secret}) as srv:
        tid = await start(srv, workdir, approvalPolicy="never", config=config)
        _, events = await srv.run_turn(tid, '/mcp srv env_sha256 {"name": "MY_SECRET"}')
        assert f"env_sha256: sha256:{digest}" in reply(events), events
        seen = json.dumps(events) + srv.stderr_text
    stored = "".join(p.read_text(errors="replace") for p in home.rglob("*") if p.is_file())
    assert "MY_SECRET" in stored and "LITERAL_KEY" in stored  # (the names, by reference)
    for value in (secret, literal):
        assert value not in stored and value not in seen
    # after a restart the literal value is missing: a warning says so
    async with running_server(nursery, home, {"MY_SECRET": secret}) as srv:
        await srv.initialize()
        events = []
        await srv.call("thread/resume", {"threadId": tid})
        warning = await srv.wait_method("warning", seen=events)
        assert "LITERAL_KEY" in warning["params"]["message"], warning
        _done, events = await srv.run_turn(tid, '/mcp srv env_sha256 {"name": "MY_SECRET"}')
        assert f"sha256:{digest}" in reply(events), events


async def test_unresolvable_reference_leaves_the_server_out_with_a_warning(
    nursery: trio.Nursery, home: Path, workdir: Path, tmp_path: Path
) -> None:
    config = mcp_config(tmp_path / "calls.jsonl", env_vars=["NOT_SET_ANYWHERE_42"])
    env = {k: v for k, v in os.environ.items() if k != "NOT_SET_ANYWHERE_42"}
    async with running_server(nursery, home, env) as srv:
        await srv.initialize()
        events: list[Any] = []
        await srv.call(
            "thread/start", {"modelProvider": "mock", "cwd": str(workdir), "config": config}
        )
        warning = await srv.wait_method("warning", seen=events)
        assert "NOT_SET_ANYWHERE_42" in warning["params"]["message"]
        assert "'srv'" in warning["params"]["message"]
