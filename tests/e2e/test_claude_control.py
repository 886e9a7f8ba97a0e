"""The control surface on the Claude Code backend end to end: threadline as a subprocess, the
real `claude` CLI against the scripted fake Anthropic API (tests/fakes/anthropic.py).

Each test asserts what the model API received: images as Anthropic image blocks, a model and an
effort in the next model request (applied without restarting the CLI in stream mode, and kept
for later turns), a foreign model name left out, steer text inside the running turn, a fork's
history, the compaction request, injected history sent once; `model/list` from the running
claude; `thread/delete` with `deleteBackendSession` removing claude's transcript. Every
message threadline writes is validated against schemas/ by the test client.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv, wait_claude_pid
from tests.fakes.anthropic import RecordedRequest, Rule, Step, Text, ToolUse
from tests.support.client import ServerProcess, notifications
from tests.support.events import agent_text, items_completed, items_started, status, turn
from threadline.backends.registry import SPECS

pytestmark = pytest.mark.e2e

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG64 = base64.b64encode(PNG).decode()
NOTES = "The notes say: the build runs on Tuesdays."
#: What claude asks the model for when it compacts (its own prompt; the fake's rule matches it).
COMPACT_ASK = "detailed summary of the conversation"
SUMMARY = "<summary>The user talked about PAPAYA.</summary>"


# -- helpers ---------------------------------------------------------------------------------------


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def last_user(request: RecordedRequest) -> list[dict[str, Any]]:
    """The blocks of the latest user message of `request` (claude appends system ones)."""
    return blocks([m for m in request.messages if m.get("role") == "user"][-1])


def user_texts(request: RecordedRequest) -> list[str]:
    """Every text block of the user messages the model was sent, in order."""
    return [
        str(block.get("text", ""))
        for m in request.messages
        if m.get("role") == "user"
        for block in blocks(m)
        if block.get("type") == "text"
    ]


def said(request: RecordedRequest, needle: str) -> int:
    """How many user text blocks of `request` contain `needle`."""
    return sum(needle in t for t in user_texts(request))


def turn_requests(env: ClaudeEnv) -> list[RecordedRequest]:
    """The model requests of the conversation (not claude's one-token probe of a new model)."""
    return [r for r in env.fake.model_requests if isinstance(r.body, dict) and r.body.get("tools")]


def requests_saying(env: ClaudeEnv, needle: str) -> list[RecordedRequest]:
    return [r for r in turn_requests(env) if said(r, needle)]


def effort(request: RecordedRequest) -> Any:
    config = request.body.get("output_config") if isinstance(request.body, dict) else None
    return config.get("effort") if isinstance(config, dict) else None


def warnings(events: list[Any]) -> list[str]:
    return [e["params"]["message"] for e in notifications(events, "warning")]


async def start_turn(
    srv: ServerProcess, tid: str, inputs: list[dict[str, Any]], **fields: Any
) -> str:
    result = await srv.call("turn/start", {"threadId": tid, "input": inputs, **fields})
    return str(result["turn"]["id"])


async def run(
    srv: ServerProcess, tid: str, inputs: list[dict[str, Any]], **fields: Any
) -> tuple[dict[str, Any], list[Any]]:
    """One turn with these input items and `turn/start` fields: (the turn, its events)."""
    done, events = await srv.collect_turn(await start_turn(srv, tid, inputs, **fields), timeout=60)
    turn_done = done["params"]["turn"]
    assert turn_done["status"] == "completed", turn_done
    return turn_done, events


async def steer(srv: ServerProcess, tid: str, turn_id: str, words: str) -> None:
    params = {"threadId": tid, "input": text(words), "expectedTurnId": turn_id}
    assert await srv.call("turn/steer", params) == {"turnId": turn_id}


def completions(events: list[Any], turn_id: str) -> int:
    return sum(
        e["params"]["turn"]["id"] == turn_id for e in notifications(events, "turn/completed")
    )


# -- stream mode: images, live overrides, a foreign model, a new cwd -----------------------------


async def test_stream_images_and_overrides(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    env = claude_env
    (env.work / "notes.txt").write_text(NOTES + "\n")
    (env.work / "shot.png").write_bytes(PNG)
    other = env.tmp / "elsewhere"
    other.mkdir()
    env.script(Rule("", ["Seen."]))
    async with env.server(nursery) as srv:
        await srv.initialize()
        started = await srv.call(
            "thread/start",
            {"modelProvider": "claude", "cwd": str(env.work), "model": "gpt-5.2-codex"},
        )
        tid = started["thread"]["id"]
        # A Codex model name is not passed to claude: a warning, and claude's default model.
        warned = await srv.wait_method("warning")
        assert "gpt-5.2-codex" in warned["params"]["message"], warned
        inputs = [
            *text("What is in these pictures?"),
            {"type": "image", "url": f"data:image/png;base64,{PNG64}"},
            {"type": "localImage", "path": "shot.png"},
            {"type": "image", "url": "https://example.invalid/cat.png"},
            {"type": "mention", "name": "notes", "path": "notes.txt"},
        ]
        await run(srv, tid, inputs)
        pid = await wait_claude_pid(srv)
        # model/list: what the running claude listed (its aliases and their efforts)
        listed = (await srv.call("model/list", {"modelProvider": "claude"}))["data"]
        [default] = [m for m in listed if m["isDefault"]]
        assert default["model"] == "default" and default["id"] == "claude/default"
        assert default["description"] != SPECS["claude"].models[0][2], default
        assert {"opus", "sonnet", "haiku"} <= {m["model"] for m in listed}
        assert "xhigh" in [e["reasoningEffort"] for e in default["supportedReasoningEfforts"]]

        # model and effort: applied to the live CLI (same process), in the next request ...
        await run(srv, tid, text("second: switch"), model="claude-sonnet-4-6", effort="high")
        assert await wait_claude_pid(srv) == pid
        # ... and kept for the turn after; a foreign name then keeps the thread's model
        _, events = await run(srv, tid, text("third: same again"), model="gpt-5.2")
        assert any("gpt-5.2" in w for w in warnings(events)), events
        # cwd: claude restarts in the new directory, resuming the conversation there
        await run(srv, tid, text("fourth: moved"), cwd=str(other))
        moved = await wait_claude_pid(srv)
        assert moved != pid and os.readlink(f"/proc/{moved}/cwd") == str(other)
        # thread/delete with deleteBackendSession: claude's transcript goes too
        sid = env.thread_record(tid)["backend_session_id"]
        transcript = f"projects/*/{sid}.jsonl"
        assert list(env.config_dir.glob(transcript))
        await srv.call("thread/delete", {"threadId": tid, "deleteBackendSession": True})
        assert not list(env.config_dir.glob(transcript))

    first, second, third, fourth = turn_requests(env)
    assert first.model and first.model.startswith("claude-"), first.model
    assert "gpt" not in json.dumps(first.body.get("model"))
    # the images, in the API's own image blocks, in the turn's user message
    images = [b for b in last_user(first) if b.get("type") == "image"]
    assert [i["source"]["type"] for i in images] == ["base64", "base64", "url"], images
    assert images[0]["source"] == {"type": "base64", "media_type": "image/png", "data": PNG64}
    assert images[1]["source"]["data"] == PNG64
    assert images[2]["source"]["url"] == "https://example.invalid/cat.png"
    # the mention is claude's own `@path`, and claude attached the file
    assert any("@notes.txt" in t for t in user_texts(first)), user_texts(first)
    assert NOTES in json.dumps(first.messages)
    assert second.model == third.model == fourth.model == "claude-sonnet-4-6"
    assert effort(second) == effort(third) == effort(fourth) == "high"
    assert effort(first) != "high"
    # the restarted CLI carries the whole conversation
    assert said(fourth, "What is in these pictures?") == 1 and said(fourth, "third: same") == 1


# -- stream mode: steer, inject_items, fork, compact ---------------------------------------------


async def _steer(srv: ServerProcess, tid: str) -> None:
    """Steer while a tool runs (joins the turn's next model call), while the model gives its
    last answer (claude runs it right after: still the same turn), and just before an
    interrupt."""
    turn_id = await start_turn(srv, tid, text("slow task: wait a bit"))
    seen: list[Any] = []
    await srv.wait_for(
        lambda e: (
            e.get("method") == "item/started" and e["params"]["item"]["type"] == "commandExecution"
        ),
        seen=seen,
    )
    await steer(srv, tid, turn_id, "steer one: mention BANANA")
    done, events = await srv.collect_turn(turn_id, timeout=60, events=seen)
    assert done["params"]["turn"]["status"] == "completed"
    assert completions(events, turn_id) == 1 and agent_text(events) == "Noted BANANA."

    turn_id = await start_turn(srv, tid, text("long answer please"))
    seen = []
    await srv.wait_method("item/agentMessage/delta", seen=seen)
    await steer(srv, tid, turn_id, "steer two: and CHERRY")
    done, events = await srv.collect_turn(turn_id, timeout=60, events=seen)
    assert done["params"]["turn"]["status"] == "completed"
    [long_answer, cherry] = [i["text"] for i in items_completed(events, "agentMessage")]
    assert long_answer.startswith("A long answer") and cherry == "Noted CHERRY."
    steered = [i for i in items_completed(events, "userMessage") if "CHERRY" in json.dumps(i)]
    assert len(steered) == 1

    # interrupted with a steer still queued: claude drops it (no turn of its own runs later)
    turn_id = await start_turn(srv, tid, text("long answer again"))
    seen = []
    await srv.wait_method("item/agentMessage/delta", seen=seen)
    await steer(srv, tid, turn_id, "steer three: never seen")
    await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
    done, events = await srv.collect_turn(turn_id, timeout=60, events=seen)
    assert done["params"]["turn"]["status"] == "interrupted"
    assert completions(events, turn_id) == 1


async def test_stream_steer_inject_fork_compact(
    nursery: trio.Nursery, claude_env: ClaudeEnv
) -> None:
    env = claude_env
    sleeper = ToolUse("Bash", {"command": "sleep 2", "description": "Wait a bit"})
    env.script(
        Rule(COMPACT_ASK, [SUMMARY]),
        Rule("steer one", ["Noted BANANA."]),
        Rule("steer two", ["Noted CHERRY."]),
        Rule("slow task", [sleeper, "Waited."]),
        Rule(
            "long answer",
            [Step([Text("A long answer, streamed slowly.")], delay_ms=150, chunk_size=6)],
        ),
        Rule("", ["Fine."]),
    )
    earlier = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "The secret word is PAPAYA."}],
        },
    ]
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never")
        assert await srv.call("thread/inject_items", {"threadId": tid, "items": earlier}) == {}
        t, _ = await turn(srv, tid, "what was the word?")
        assert status(t) == "completed"
        await _steer(srv, tid)

        forked = await srv.call("thread/fork", {"threadId": tid})
        fork = forked["thread"]["id"]
        t, _ = await turn(srv, fork, "the fork asks")
        assert status(t) == "completed"
        t, _ = await turn(srv, tid, "the source asks")
        assert status(t) == "completed"

        await srv.call("thread/compact/start", {"threadId": tid})
        seen: list[Any] = []
        done = await srv.wait_method("turn/completed", timeout=60, seen=seen)
        assert done["params"]["turn"]["status"] == "completed", done
        assert [i["type"] for i in items_started(seen)] == ["contextCompaction"]
        t, _ = await turn(srv, tid, "what came next?")
        assert status(t) == "completed"

    # injected history: in the next turn's request, once; later only as that turn's history
    asked = requests_saying(env, "what was the word?")[0]
    assert said(asked, "The secret word is PAPAYA.") == 1
    source = requests_saying(env, "the source asks")[0]
    assert said(source, "The secret word is PAPAYA.") == 1
    assert not requests_saying(env, "steer three")
    # steer one reached the model inside the running turn: next to the tool's result
    joined = requests_saying(env, "steer one")[0]
    assert any(b.get("type") == "tool_result" for b in last_user(joined))
    assert said(joined, "slow task") == 1
    # the fork carries the history; the source never sees the fork's turn
    fork_request = requests_saying(env, "the fork asks")[0]
    assert said(fork_request, "steer two") == 1 and said(fork_request, "what was the word?") == 1
    assert said(source, "the fork asks") == 0 and said(source, "steer two") == 1
    # compaction: claude's summary request, then the summary instead of the conversation
    assert requests_saying(env, COMPACT_ASK)
    [after] = requests_saying(env, "what came next?")
    assert "The user talked about PAPAYA." in json.dumps(after.messages)
    assert said(after, "what was the word?") == 0


# -- print mode --------------------------------------------------------------------------------


async def test_print_mode_controls(nursery: trio.Nursery, claude_env: ClaudeEnv) -> None:
    """Print mode: an image, model and effort at the next spawn, an output schema (claude's
    StructuredOutput call is the final message), a fork and a compaction."""
    env = claude_env
    schema = {
        "type": "object",
        "properties": {"fruit": {"type": "string"}},
        "required": ["fruit"],
        "additionalProperties": False,
    }
    env.script(
        Rule(COMPACT_ASK, [SUMMARY]),
        Rule("structured", [ToolUse("StructuredOutput", {"fruit": "PAPAYA"})]),
        Rule("", ["Fine."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": "print"})
        image = {"type": "image", "url": f"data:image/png;base64,{PNG64}"}
        await run(srv, tid, [*text("print: look"), image])
        await run(srv, tid, text("print: switch"), model="claude-haiku-5-5", effort="low")
        _, events = await run(srv, tid, text("print: structured please"), outputSchema=schema)
        [final] = items_completed(events, "agentMessage")
        assert json.loads(final["text"]) == {"fruit": "PAPAYA"}
        assert not items_started(events, "dynamicToolCall")
        forked = await srv.call("thread/fork", {"threadId": tid})
        await run(srv, forked["thread"]["id"], text("print: the fork asks"))
        await srv.call("thread/compact/start", {"threadId": tid})
        done = await srv.wait_method("turn/completed", timeout=60)
        assert done["params"]["turn"]["status"] == "completed", done
        await run(srv, tid, text("print: what came next?"))

    look, switch, structured, fork_request, *_compact, after = turn_requests(env)
    [png] = [b for b in last_user(look) if b.get("type") == "image"]
    assert png["source"]["data"] == PNG64
    assert switch.model == structured.model == "claude-haiku-5-5"
    assert effort(switch) == effort(structured) == "low" and effort(look) != "low"
    tools = [t.get("name") for t in structured.body.get("tools") or []]
    assert "StructuredOutput" in tools and "StructuredOutput" not in [
        t.get("name") for t in switch.body.get("tools") or []
    ]
    assert said(fork_request, "print: look") == 1 and said(fork_request, "print: structured") == 1
    assert requests_saying(env, COMPACT_ASK)
    assert "The user talked about PAPAYA." in json.dumps(after.messages)
    assert said(after, "print: look") == 0 and said(after, "print: the fork asks") == 0
