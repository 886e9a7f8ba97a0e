"""The control surface (issue #17) on the ACP backends, each against its real pinned CLI and
the fake model server: what the model API receives is what is asserted.

- images: an ACP `image` block reaches the API in its own image form (Gemini `inlineData`,
  Chat Completions `image_url`);
- `turn/start.model` / `effort` reach the next model request and stay for later turns
  (gemini and opencode without a new agent process, qwen on a new `qwen --acp --model`);
  after a threadline restart opencode's loaded session keeps the thread's model (its own
  record would bring back the session's last one);
- a model name of another provider: a warning, and the thread's model stays;
- `approvalPolicy: never` switches the live session's mode (no approval asked);
- `turn/steer` on qwen: the text reaches the model within the running turn;
- `thread/fork` on opencode: the fork's request carries the history, the source's next one
  not the fork's turn; on gemini and qwen a clear error;
- `thread/compact/start`: opencode's and qwen's compaction request reaches the model;
- `thread/inject_items`: the injected text reaches the model once;
- `model/list`: the agent's own models;
- `thread/delete` with `deleteBackendSession`: gemini's and qwen's session files go, and the
  session leaves OpenCode's database.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.gemini_env import MODEL as GEMINI_MODEL
from tests.e2e.gemini_env import GeminiEnv, acp_pids
from tests.e2e.opencode_env import OpenCodeEnv, opencode_pids
from tests.e2e.qwen_env import SLEEP_NOTE, QwenEnv, shell_call
from tests.e2e.qwen_env import acp_pids as qwen_pids
from tests.fakes import gemini as g
from tests.fakes import openai_chat as oc
from tests.support.client import ServerProcess, assert_items_balanced, notifications
from tests.support.events import agent_text, is_method, no_requests, requests_in

pytestmark = pytest.mark.e2e

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
PIXEL_URL = "data:image/png;base64," + base64.b64encode(PIXEL).decode()
INJECTED = "INJECTED-FACT-7: the launch code is tangerine."


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


async def run(
    srv: ServerProcess,
    tid: str,
    inputs: str | list[dict[str, Any]],
    on_request: Any = no_requests,
    timeout: float = 90,
    **params: Any,
) -> tuple[dict[str, Any], list[Any]]:
    """One turn with `turn/start` params `params` (model, effort, approvalPolicy, ...)."""
    items = [text(inputs)] if isinstance(inputs, str) else inputs
    started = await srv.call("turn/start", {"threadId": tid, "input": items, **params})
    done, events = await srv.collect_turn(
        started["turn"]["id"], on_request=on_request, timeout=timeout
    )
    assert_items_balanced(events)
    return done["params"]["turn"], events


async def compact(srv: ServerProcess, tid: str) -> tuple[dict[str, Any], list[Any]]:
    """`thread/compact/start`, then its turn to the end."""
    await srv.call("thread/compact/start", {"threadId": tid})
    seen: list[Any] = []
    started = await srv.wait_method("turn/started", timeout=30, seen=seen)
    done, events = await srv.collect_turn(started["params"]["turn"]["id"], events=seen, timeout=90)
    assert_items_balanced(events)
    return done["params"]["turn"], events


def warnings(events: list[Any]) -> list[str]:
    return [str(w["params"]["message"]) for w in notifications(events, "warning")]


def compacted(events: list[Any]) -> bool:
    """The turn showed Codex's `contextCompaction` item, started and completed."""
    kinds = [
        (e["method"], e["params"]["item"]["type"])
        for e in events
        if is_method("item/started")(e) or is_method("item/completed")(e)
    ]
    return (
        kinds.count(("item/started", "contextCompaction")) == 1
        and kinds.count(("item/completed", "contextCompaction")) == 1
    )


async def inject(srv: ServerProcess, tid: str) -> None:
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": INJECTED}],
    }
    await srv.call("thread/inject_items", {"threadId": tid, "items": [item]})


async def models(srv: ServerProcess, provider: str) -> list[dict[str, Any]]:
    listed = await srv.call("model/list", {})
    return [m for m in listed["data"] if m["id"].startswith(provider + "/")]


# -- gemini ----------------------------------------------------------------------------------------


def inline_images(request: g.RecordedRequest) -> list[bytes]:
    return [
        base64.b64decode(part["inlineData"]["data"])
        for content in request.contents
        for part in content.get("parts") or []
        if "inlineData" in part
    ]


async def test_gemini_acp_control(nursery: trio.Nursery, gemini_env: GeminiEnv) -> None:
    """Image, live model switch (persisted), a foreign model, approvalPolicy never as mode
    yolo, inject_items once, model/list; fork and compact refused with a clear error."""
    env = gemini_env
    picture = env.work / "pixel.png"
    picture.write_bytes(PIXEL)
    env.script(
        g.Rule("look at this", ["A red pixel."]),
        g.Rule("switch model", ["On pro now."]),
        g.Rule("still pro", ["Still pro."]),
        g.Rule("a codex model", ["Back to default."]),
        g.Rule("run it unasked", [g.ShellCommand("echo unasked-ok"), "Ran it."]),
        g.Rule("what was injected", ["Tangerine."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t0 = time.monotonic()
        t, events = await run(
            srv, tid, [text("look at this"), {"type": "localImage", "path": str(picture)}]
        )
        env.timings["first turn (agent start)"] = time.monotonic() - t0
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        assert inline_images(env.fake.model_requests[-1]) == [PIXEL]
        [pid] = acp_pids(srv)

        # model: session/set_model on the live session, kept for the next turn
        t, events = await run(srv, tid, "switch model", model="gemini-2.5-pro")
        assert t["status"] == "completed" and agent_text(events) == "On pro now.", t
        t, _ = await run(srv, tid, "still pro")
        assert [r.model for r in env.fake.model_requests[-2:]] == ["gemini-2.5-pro"] * 2
        assert acp_pids(srv) == [pid], "the model switch started another agent"

        # a Codex model name: not passed to the CLI, a warning, the thread's model stays
        t, events = await run(srv, tid, "a codex model", model="gpt-5.2-codex")
        assert t["status"] == "completed", t
        [warning] = warnings(events)
        assert "gpt-5.2-codex" in warning and "gemini-2.5-pro" in warning, warning
        assert env.fake.model_requests[-1].model == "gemini-2.5-pro"

        # approvalPolicy never: the session's mode is yolo, the command runs unasked
        t, events = await run(srv, tid, "run it unasked", approvalPolicy="never")
        assert t["status"] == "completed" and requests_in(events) == [], events
        assert "unasked-ok" in json.dumps(env.fake.function_responses(-1))

        # history injected: in the next request, once
        await inject(srv, tid)
        t, _ = await run(srv, tid, "what was injected")
        assert t["status"] == "completed", t
        assert "\n".join(env.fake.user_texts(-1)).count(INJECTED) == 1

        listed = await models(srv, "gemini")
        assert "gemini-2.5-pro" in [m["model"] for m in listed], listed
        assert [m["model"] for m in listed if m["isDefault"]] == [GEMINI_MODEL], listed

        # no session/fork, no compaction command over gemini's ACP
        error = await srv.error("thread/fork", {"threadId": tid})
        assert "gemini" in error["message"].lower(), error
        error = await srv.error("thread/compact/start", {"threadId": tid})
        assert "gemini" in error["message"].lower(), error

        # thread/delete with deleteBackendSession: Gemini's session files go too
        sid = env.thread_record(tid)["backend_session_id"]
        assert env.session_files(sid)
        await srv.call("thread/delete", {"threadId": tid, "deleteBackendSession": True})
        assert env.session_files(sid) == []


async def test_gemini_headless_images_and_mentions(
    nursery: trio.Nursery, gemini_env: GeminiEnv
) -> None:
    """`gemini -p` per turn: a data: URL image and a mentioned file go as `@<path>` (the image
    as `inlineData`, the file's text), a new model reaches the next spawn."""
    env = gemini_env
    notes = env.work / "notes.txt"
    notes.write_text("NOTE-CONTENT-42\n")
    env.script(g.Rule("look at these", ["Seen both."]), g.Rule("on pro", ["Pro here."]))
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": "headless"})
        inputs = [
            text("look at these"),
            {"type": "image", "url": PIXEL_URL},
            {"type": "mention", "name": "notes", "path": "notes.txt"},
        ]
        t, events = await run(srv, tid, inputs)
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        last = env.fake.model_requests[-1]
        assert inline_images(last) == [PIXEL]
        assert "NOTE-CONTENT-42" in "\n".join(last.user_texts)
        t, _ = await run(srv, tid, "on pro", model="gemini-2.5-pro")
        assert t["status"] == "completed", t
        assert env.fake.model_requests[-1].model == "gemini-2.5-pro"


# -- opencode --------------------------------------------------------------------------------------

#: Effort levels (OpenCode "variants") and image input for both fake models.
_MODEL_EXTRAS = {
    "modalities": {"input": ["text", "image"], "output": ["text"]},
    "variants": {"low": {"reasoningEffort": "low"}, "high": {"reasoningEffort": "high"}},
}


def with_model_extras(env: OpenCodeEnv) -> None:
    config = json.loads(env.cli_env["OPENCODE_CONFIG_CONTENT"])
    for model in config["provider"][oc.PROVIDER]["models"].values():
        model.update(_MODEL_EXTRAS)
    env.cli_env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)


def opencode_sessions(env: OpenCodeEnv) -> set[str]:
    """The session ids in OpenCode's database (its `session` table)."""
    db = Path(env.cli_env["XDG_DATA_HOME"]) / "opencode" / "opencode.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM session")}


def image_urls(request: oc.RecordedRequest) -> list[str]:
    return [
        str(part["image_url"]["url"])
        for m in request.messages
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


async def test_opencode_acp_control(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    """Image, live model and effort (persisted, and kept by a restarted threadline's loaded
    session), fork (history in, the fork's turn not in the source), compact, inject_items."""
    env = opencode_env
    with_model_extras(env)
    env.script(
        oc.Rule("look at this", ["A red pixel."]),
        oc.Rule("go small", ["Small now."]),
        oc.Rule("still small", ["Still small."]),
        oc.Rule("after restart", ["Restarted small."]),
        oc.Rule("FORK-ONLY question", ["Fork answer."]),
        oc.Rule("source again", ["Source answer."]),
        oc.Rule("what was injected", ["Tangerine."]),
        oc.Rule("run it unasked", [oc.bash_call("echo unasked-ok"), "Ran it."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t, events = await run(srv, tid, [text("look at this"), {"type": "image", "url": PIXEL_URL}])
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        assert image_urls(env.fake.model_requests[-1]) == [PIXEL_URL]
        [pid] = opencode_pids(srv, "acp")

        t, events = await run(srv, tid, "go small", model="fake-small", effort="high")
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        t, _ = await run(srv, tid, "still small")
        sent = [(r.model, r.body.get("reasoning_effort")) for r in env.fake.model_requests[-2:]]
        assert sent == [("fake-small", "high")] * 2, sent
        assert opencode_pids(srv, "acp") == [pid], "the switch started another agent"

        listed = await models(srv, "opencode")
        assert {m["model"] for m in listed} == {"fake/fake-model", "fake/fake-small"}, listed
        assert [m["model"] for m in listed if m["isDefault"]] == ["fake/fake-model"], listed

    # A restarted threadline loads the session on a new agent: the thread's model still.
    async with env.server(nursery) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        t, _ = await run(srv, tid, "after restart")
        assert t["status"] == "completed", t
        assert env.fake.model_requests[-1].model == "fake-small"

        forked = await srv.call("thread/fork", {"threadId": tid})
        fork = forked["thread"]["id"]
        t, _ = await run(srv, fork, "FORK-ONLY question")
        assert t["status"] == "completed", t
        history = env.fake.user_texts(-1)
        assert any("go small" in u for u in history) and any("FORK-ONLY" in u for u in history)
        t, _ = await run(srv, tid, "source again")
        assert t["status"] == "completed", t
        source = "\n".join(env.fake.user_texts(-1))
        assert "after restart" in source and "FORK-ONLY" not in source

        compactions = len([r for r in env.fake.side_requests if r.side_call == "compaction"])
        t, events = await compact(srv, tid)
        assert t["status"] == "completed" and compacted(events), t
        after = [r for r in env.fake.side_requests if r.side_call == "compaction"]
        assert len(after) == compactions + 1, env.fake.side_requests

        await inject(srv, tid)
        t, _ = await run(srv, tid, "what was injected")
        assert t["status"] == "completed", t
        assert "\n".join(env.fake.user_texts(-1)).count(INJECTED) == 1

        # approvalPolicy never: OpenCode's permissions are its agent's environment, so the
        # session moves to an agent that asks nothing (restart), and keeps its model
        [pid] = opencode_pids(srv, "acp")
        t, events = await run(srv, tid, "run it unasked", approvalPolicy="never")
        assert t["status"] == "completed" and requests_in(events) == [], t
        assert "unasked-ok" in json.dumps(env.fake.tool_results(-1))
        assert env.fake.model_requests[-1].model == "fake-small"
        assert set(opencode_pids(srv, "acp")) - {pid}, "no new agent for the new permissions"


async def test_opencode_run_control(nursery: trio.Nursery, opencode_env: OpenCodeEnv) -> None:
    """`opencode run` per turn: a data: URL image (`--file`), model and effort (`--model`,
    `--variant`) at the next spawn, fork (`--session <source> --fork`)."""
    env = opencode_env
    with_model_extras(env)
    env.script(
        oc.Rule("look at this", ["A red pixel."]),
        oc.Rule("go small", ["Small now."]),
        oc.Rule("FORK-ONLY question", ["Fork answer."]),
        oc.Rule("source again", ["Source answer."]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": "run"})
        t, events = await run(srv, tid, [text("look at this"), {"type": "image", "url": PIXEL_URL}])
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        assert image_urls(env.fake.model_requests[-1]) == [PIXEL_URL]
        t, _ = await run(srv, tid, "go small", model="fake/fake-small", effort="high")
        assert t["status"] == "completed", t
        last = env.fake.model_requests[-1]
        assert (last.model, last.body.get("reasoning_effort")) == ("fake-small", "high")

        forked = await srv.call("thread/fork", {"threadId": tid})
        t, _ = await run(srv, forked["thread"]["id"], "FORK-ONLY question")
        assert t["status"] == "completed", t
        history = "\n".join(env.fake.user_texts(-1))
        assert "go small" in history and "FORK-ONLY" in history
        t, _ = await run(srv, tid, "source again")
        assert t["status"] == "completed", t
        assert "FORK-ONLY" not in "\n".join(env.fake.user_texts(-1))
        # the model and effort stayed, on the source and on its fork (settings copied)
        sent = [(r.model, r.body.get("reasoning_effort")) for r in env.fake.model_requests[-2:]]
        assert sent == [("fake-small", "high")] * 2, sent

        # thread/delete with deleteBackendSession: the session leaves OpenCode's database
        sid = env.thread_record(tid)["backend_session_id"]
        assert opencode_sessions(env) >= {sid}
        await srv.call("thread/delete", {"threadId": tid, "deleteBackendSession": True})
        assert sid not in opencode_sessions(env)


# -- qwen ------------------------------------------------------------------------------------------

#: qwen's request that compresses the conversation (`/compress`): its last user message.
COMPRESS_PROMPT = "First, reason in your <analysis> block"


async def test_qwen_acp_control(nursery: trio.Nursery, qwen_env: QwenEnv) -> None:
    """Image, steer within the running turn, a model qwen does not list (a new agent, the
    history kept), compact; fork refused."""
    env = qwen_env
    env.script(
        oc.Rule("look at this", ["A red pixel."]),
        oc.Rule(
            "take your time",
            [shell_call(f"sleep 3 {SLEEP_NOTE}"), "Slept without news."],
        ),
        oc.Rule("BANANAS please", ["Bananas noted."]),
        oc.Rule("on the small model", ["Small here."]),
        oc.Rule(COMPRESS_PROMPT, ["<state_snapshot>fake snapshot</state_snapshot>"]),
    )
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, approvalPolicy="never")
        t, events = await run(srv, tid, [text("look at this"), {"type": "image", "url": PIXEL_URL}])
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        assert image_urls(env.fake.model_requests[-1]) == [PIXEL_URL]
        [pid] = qwen_pids(srv)

        # steer while the command runs: qwen takes it with the command's result
        started = await srv.call("turn/start", {"threadId": tid, "input": [text("take your time")]})
        turn_id = started["turn"]["id"]
        seen: list[Any] = []
        await srv.wait_for(
            lambda e: (
                is_method("item/started")(e) and e["params"]["item"]["type"] == "commandExecution"
            ),
            seen=seen,
        )
        steered = await srv.call(
            "turn/steer",
            {"threadId": tid, "input": [text("BANANAS please")], "expectedTurnId": turn_id},
        )
        assert steered["turnId"] == turn_id
        done, events = await srv.collect_turn(turn_id, events=seen, timeout=90)
        assert done["params"]["turn"]["status"] == "completed", done
        # (taken at qwen's next model call, with the command's result: no answer in between)
        assert agent_text(events) == "Bananas noted.", agent_text(events)
        last = env.fake.model_requests[-1]
        roles = [m.get("role") for m in last.messages[-2:]]
        assert roles == ["tool", "user"] and "BANANAS please" in last.user_texts[-1], roles

        # a model qwen's settings do not list: a new `qwen --acp --model`, history kept; an
        # effort: qwen's /effort command (no model call, not in the conversation)
        t, events = await run(srv, tid, "on the small model", model=oc.SMALL_MODEL, effort="high")
        assert t["status"] == "completed" and warnings(events) == [], (t, warnings(events))
        last = env.fake.model_requests[-1]
        assert (last.model, last.body.get("reasoning")) == (oc.SMALL_MODEL, {"effort": "high"})
        assert not any("/effort" in u for u in last.user_texts), last.user_texts
        assert any("take your time" in u for u in env.fake.user_texts(-1))
        assert qwen_pids(srv) != [pid]

        t, events = await compact(srv, tid)
        assert t["status"] == "completed" and compacted(events), (t.get("error"), warnings(events))
        assert COMPRESS_PROMPT in env.fake.user_texts(-1)[-1]

        error = await srv.error("thread/fork", {"threadId": tid})
        assert "qwen" in error["message"].lower(), error

        # thread/delete with deleteBackendSession: qwen's record of the session goes too
        sid = env.thread_record(tid)["backend_session_id"]
        assert env.session_files(sid)
        await srv.call("thread/delete", {"threadId": tid, "deleteBackendSession": True})
        assert env.session_files(sid) == []
