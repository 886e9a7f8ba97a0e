"""The control surface on the Codex backend (#17), end to end: threadline as a subprocess
driving the real `codex` CLI against the fake Responses API. Each check is on what the model
API receives: images in its own `input_image` form, skills and file mentions, the model
(another provider's name dropped), reasoning effort and summary, the output schema
(`text.format`), the sandbox and cwd (Codex's environment context), steered input within the
running turn, a fork's history, the compaction request, injected items; all kept after a
restart, and Codex's files gone with `thread/delete`.

One test per mode, each a thread's life through every control (a fresh CLI per check would
cost seconds each)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.codex_env import CodexEnv
from tests.fakes.openai_responses import MODEL, RecordedRequest, Rule, Step, Text
from tests.support.client import ServerProcess, assert_items_balanced, notifications
from tests.support.events import agent_text, items_completed, items_started, no_requests

pytestmark = pytest.mark.e2e

#: A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
COMPACT_PROMPT = "CONTEXT CHECKPOINT COMPACTION"  # Codex's own compaction request
SUMMARY = "SUMMARY-7: the thread so far, compacted."
INJECTED = "INJECTED-FACT-3: the deploy key rotates on Fridays."
STALL_MS = 60_000
OTHER_MODEL = "gpt-6-luna"  # in codex's bundled catalogue: no "model metadata" warning
SKILL_BODY = "SKILL-BODY-5: sort the imports first."
FOREIGN = "claude-sonnet-4-5"  # the claude backend's


def skill_file(env: CodexEnv) -> Path:
    """A skill of the work dir's (Codex loads a thread's skills when it starts the thread)."""
    return env.work / ".codex" / "skills" / "tidy" / "SKILL.md"


def prepare(env: CodexEnv) -> None:
    """The fake's answers, and a skill in the work dir."""
    skill = skill_file(env)
    skill.parent.mkdir(parents=True)
    skill.write_text(f"---\nname: tidy\ndescription: tidies up\n---\n{SKILL_BODY}\n")
    env.script(
        Rule("describe the picture", ['{"answer": 1}']),
        Rule(
            "stall now",
            [Step([Text("A partial answer that stalls.")], stall_after_first_delta_ms=STALL_MS)],
        ),
        Rule("STEER-NOW", ["Steered answer."]),
        Rule(COMPACT_PROMPT, [SUMMARY]),
    )


def body(request: RecordedRequest) -> dict[str, Any]:
    assert isinstance(request.body, dict)
    return request.body


def last_user_content(request: RecordedRequest) -> list[dict[str, Any]]:
    """The content parts of the request's last user message."""
    [*_, last] = [i for i in request.input if i.get("role") == "user"]
    return list(last["content"])


def reasoning(request: RecordedRequest) -> tuple[str, str]:
    """The request's reasoning effort and summary."""
    wanted = body(request)["reasoning"]
    return wanted["effort"], wanted["summary"]


def images(request: RecordedRequest) -> list[str]:
    return [p["image_url"] for p in last_user_content(request) if p.get("type") == "input_image"]


def text_of(request: RecordedRequest) -> str:
    return json.dumps(request.input)


def assistant_texts(request: RecordedRequest) -> list[str]:
    return [
        str(part.get("text", ""))
        for item in request.input
        if item.get("role") == "assistant"
        for part in item.get("content") or []
        if isinstance(part, dict)
    ]


async def turn_with(
    srv: ServerProcess, tid: str, inputs: list[dict[str, Any]] | str, **params: Any
) -> tuple[dict[str, Any], list[Any]]:
    """One turn with `params` on its turn/start; (the completed turn, its events)."""
    if isinstance(inputs, str):
        inputs = [{"type": "text", "text": inputs}]
    result = await srv.call("turn/start", {"threadId": tid, "input": inputs, **params})
    done, events = await srv.collect_turn(result["turn"]["id"], on_request=no_requests, timeout=60)
    assert_items_balanced(events)
    return done["params"]["turn"], events


def rollouts(env: CodexEnv, session: str) -> list[Path]:
    return list(env.codex_home.glob(f"*sessions/**/rollout-*-{session}.jsonl"))


def warnings(events: list[Any]) -> list[str]:
    return [str(e["params"]["message"]) for e in notifications(events, "warning")]


async def check_overrides_and_images(env: CodexEnv, srv: ServerProcess, tid: str) -> None:
    """Images reach the model as `input_image`s; another provider's model name is dropped
    with a warning (Codex's default model runs); model, effort, summary and output schema
    reach the model, and all but the schema stay for the next turn; skills and mentions."""
    (env.work / "dot.png").write_bytes(PNG)
    inputs = [
        {"type": "text", "text": "describe the picture"},
        {"type": "localImage", "path": "dot.png"},
        {"type": "image", "url": PNG_URL},
    ]
    t1, events = await turn_with(srv, tid, inputs, model=FOREIGN)
    assert t1["status"] == "completed", t1
    [warning] = [w for w in warnings(events) if FOREIGN in w]
    assert "not a codex model" in warning, warning
    request = env.fake.model_requests[-1]
    assert images(request) == [PNG_URL, PNG_URL]  # the local file read, the data URL as is
    assert body(request)["model"] == MODEL  # the one config.toml names
    assert FOREIGN not in json.dumps(body(request))

    overrides = {"model": OTHER_MODEL, "effort": "high", "summary": "detailed"}
    t2, events = await turn_with(srv, tid, "describe the picture", outputSchema=SCHEMA, **overrides)
    assert t2["status"] == "completed", t2
    assert agent_text(events) == '{"answer": 1}'
    assert not [w for w in warnings(events) if "not a codex model" in w]
    request = env.fake.model_requests[-1]
    assert body(request)["model"] == OTHER_MODEL
    assert reasoning(request) == ("high", "detailed")
    assert body(request)["text"]["format"]["type"] == "json_schema"
    assert body(request)["text"]["format"]["schema"] == SCHEMA
    assert images(request) == []

    # a skill goes in as Codex's own (its SKILL.md reaches the model), a file mention as text
    inputs = [
        {"type": "text", "text": "describe the picture again"},
        {"type": "skill", "name": "tidy", "path": str(skill_file(env))},
        {"type": "mention", "name": "notes", "path": "notes.md"},
    ]
    t3, _ = await turn_with(srv, tid, inputs)
    assert t3["status"] == "completed", t3
    request = env.fake.model_requests[-1]
    assert SKILL_BODY in text_of(request) and "@notes.md" in text_of(request)
    assert body(request)["model"] == OTHER_MODEL
    assert reasoning(request) == ("high", "detailed")
    assert "format" not in (body(request).get("text") or {})  # the schema was that turn's only


async def check_steer(env: CodexEnv, srv: ServerProcess, tid: str) -> None:
    """`turn/steer` on a turn whose answer stalls: the steered text reaches the model within
    the same turn, which completes once with the answer to it."""
    result = await srv.call(
        "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "stall now"}]}
    )
    turn_id = result["turn"]["id"]
    events: list[Any] = []
    await srv.wait_method("item/agentMessage/delta", timeout=60, seen=events)
    steer = {"type": "text", "text": "STEER-NOW"}
    answer = await srv.call(
        "turn/steer", {"threadId": tid, "expectedTurnId": turn_id, "input": [steer]}
    )
    assert answer == {"turnId": turn_id}, answer
    done, events = await srv.collect_turn(turn_id, timeout=60, events=events)
    assert done["params"]["turn"]["status"] == "completed", done
    assert len(notifications(events, "turn/completed")) == 1
    assert "Steered answer." in agent_text(events)
    request = env.fake.model_requests[-1]
    assert request.locate()[0] == "STEER-NOW"
    assert "stall now" in request.user_texts  # the same Codex turn, its start still there
    # the turn's input and the steered input, each shown once
    user = items_completed(events, "userMessage")
    assert [c.get("text") for i in user for c in i["content"]] == ["stall now", "STEER-NOW"]


async def check_inject_and_compact(env: CodexEnv, srv: ServerProcess, tid: str) -> None:
    """Injected items reach the next request once; `thread/compact/start` sends Codex's
    compaction request and its summary replaces the history."""
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": INJECTED}],
    }
    assert await srv.call("thread/inject_items", {"threadId": tid, "items": [item]}) == {}
    t, _ = await turn_with(srv, tid, "what rotates on Fridays")
    assert t["status"] == "completed", t
    assert text_of(env.fake.model_requests[-1]).count(INJECTED) == 1

    before = len(env.fake.model_requests)
    assert await srv.call("thread/compact/start", {"threadId": tid}) == {}
    events: list[Any] = []
    started = await srv.wait_method("turn/started", timeout=30, seen=events)
    done, events = await srv.collect_turn(started["params"]["turn"]["id"], events=events)
    assert done["params"]["turn"]["status"] == "completed", done
    compactions = [i["type"] for i in items_started(events)]
    assert compactions == ["contextCompaction"], compactions
    assert [i["type"] for i in items_completed(events, "contextCompaction")] == [
        "contextCompaction"
    ]
    [compaction] = env.fake.model_requests[before:]
    assert COMPACT_PROMPT in text_of(compaction)

    t, _ = await turn_with(srv, tid, "after the compaction")
    assert t["status"] == "completed", t
    # Codex keeps the user's messages and puts the summary in place of the rest
    after = env.fake.model_requests[-1]
    assert SUMMARY in text_of(after)
    assert not [t for t in assistant_texts(after) if "Steered answer." in t]


async def check_fork(env: CodexEnv, srv: ServerProcess, tid: str, **params: Any) -> None:
    """`thread/fork`: the fork's next request carries the source's history; the source's next
    does not carry the fork's turn."""
    fork = await srv.call("thread/fork", {"threadId": tid, **params})
    fid = fork["thread"]["id"]
    assert fid != tid
    t, _ = await turn_with(srv, fid, "FORK-ONLY turn")
    assert t["status"] == "completed", t
    forked = env.fake.model_requests[-1]
    assert "describe the picture" in text_of(forked) and "FORK-ONLY" in text_of(forked)
    t, _ = await turn_with(srv, tid, "back on the source")
    assert t["status"] == "completed", t
    source = env.fake.model_requests[-1]
    assert "describe the picture" in text_of(source) and "FORK-ONLY" not in text_of(source)
    assert forked.headers.get("thread-id") != source.headers.get("thread-id")


async def check_sandbox_and_cwd(env: CodexEnv, srv: ServerProcess, tid: str) -> None:
    """A new sandbox policy and cwd reach Codex: the environment it describes to the model
    changes (its cwd, and a workspace-write sandbox's writable root)."""
    other = env.tmp / "elsewhere"
    other.mkdir()
    policy = {"type": "workspaceWrite", "networkAccess": False}
    t, _ = await turn_with(srv, tid, "where are we", sandboxPolicy=policy, cwd=str(other))
    assert t["status"] == "completed", t
    [*_, context] = [u for u in env.fake.user_texts(-1) if "<environment_context>" in u]
    assert f"<cwd>{other}</cwd>" in context, context
    assert f'<entry access="write"><path>{other}</path>' in context, context


async def check_kept_after_restart(env: CodexEnv, nursery: trio.Nursery, tid: str) -> None:
    """A new threadline resumes the thread with its model, effort and summary; deleting the
    thread with its CLI session removes Codex's files of it."""
    async with env.server(nursery) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        t, _ = await turn_with(srv, tid, "describe the picture once more")
        assert t["status"] == "completed", t
        request = env.fake.model_requests[-1]
        assert body(request)["model"] == OTHER_MODEL
        assert reasoning(request) == ("high", "detailed")
        # thread/delete with deleteBackendSession: Codex's rollout of the thread goes too
        session = env.thread_record(tid)["backend_session_id"]
        assert rollouts(env, session)
        await srv.call("thread/delete", {"threadId": tid, "deleteBackendSession": True})
        assert not rollouts(env, session)
        # the shared app-server that held the thread goes on serving, and never writes the
        # deleted rollout again
        other = await srv.start_thread(env.work, modelProvider="codex")
        t, _ = await turn_with(srv, other, "still here?")
        assert t["status"] == "completed", t
    assert not rollouts(env, session)


async def test_app_server_control_surface(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    env = codex_env
    prepare(env)
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv)
        t0 = time.monotonic()
        await check_overrides_and_images(env, srv, tid)
        env.timings["images + overrides (3 turns)"] = time.monotonic() - t0
        # model/list: Codex's own list, from the thread's running app-server
        models = (await srv.call("model/list", {}))["data"]
        codex = [m for m in models if m["id"].startswith("codex/")]
        assert MODEL in [m["model"] for m in codex] and OTHER_MODEL in [m["model"] for m in codex]
        assert sum(m["isDefault"] for m in codex) == 1, codex
        # an image by http(s) URL: Codex refuses those, so threadline does before the turn
        before = len(env.fake.model_requests)
        remote = [
            {"type": "text", "text": "and this?"},
            {"type": "image", "url": "https://example.com/cat.png"},
        ]
        error = await srv.error("turn/start", {"threadId": tid, "input": remote})
        assert error["code"] == -32602 and "data: URL" in error["message"], error
        assert len(env.fake.model_requests) == before
        t0 = time.monotonic()
        await check_steer(env, srv, tid)
        env.timings["steer"] = time.monotonic() - t0
        t0 = time.monotonic()
        await check_fork(env, srv, tid)
        env.timings["fork"] = time.monotonic() - t0
        t0 = time.monotonic()
        await check_inject_and_compact(env, srv, tid)
        env.timings["inject + compact"] = time.monotonic() - t0
        await check_sandbox_and_cwd(env, srv, tid)
    await check_kept_after_restart(env, nursery, tid)


async def test_exec_control_surface(nursery: trio.Nursery, codex_env: CodexEnv) -> None:
    """`codex exec`: the same settings as flags of each spawn, a fork by `codex exec fork`;
    injected items go in as a transcript block with the next turn; no compaction."""
    env = codex_env
    prepare(env)
    async with env.server(nursery) as srv:
        tid = await env.open_thread(srv, config={"mode": "exec"})
        t0 = time.monotonic()
        await check_overrides_and_images(env, srv, tid)
        env.timings["images + overrides (3 spawns)"] = time.monotonic() - t0
        t0 = time.monotonic()
        await check_fork(env, srv, tid)
        env.timings["fork (2 spawns)"] = time.monotonic() - t0

        item = {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": INJECTED}],
        }
        assert await srv.call("thread/inject_items", {"threadId": tid, "items": [item]}) == {}
        for question in ("what rotates on Fridays", "and on Mondays"):
            t, _ = await turn_with(srv, tid, question)
            assert t["status"] == "completed", t
            assert text_of(env.fake.model_requests[-1]).count(INJECTED) == 1  # sent once

        error = await srv.error("thread/compact/start", {"threadId": tid})
        assert "compact" in error["message"] and "codex" in error["message"].lower(), error
        await check_sandbox_and_cwd(env, srv, tid)
    await check_kept_after_restart(env, nursery, tid)
