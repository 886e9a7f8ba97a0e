"""The control surface end to end on the mock backend (threadline as a subprocess): per-turn
overrides and foreign model names, image input, `turn/steer`, `thread/fork`,
`thread/compact/start`, `thread/inject_items`, and thread management (name, unarchive, delete,
Git metadata, the paged turn and item lists) — also across a restart. The mock echoes what its
session sees (`/settings`, `/history`), so each test asserts what reached the agent. The real
CLIs are driven the same way in each backend's `test_<backend>_control.py`."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import ServerProcess, notifications, running_server
from tests.support.events import agent_text, turn

pytestmark = pytest.mark.e2e

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


async def start_turn(srv: ServerProcess, tid: str, prompt: str, **fields: Any) -> str:
    result = await srv.call("turn/start", {"threadId": tid, "input": text(prompt), **fields})
    return str(result["turn"]["id"])


async def settings_seen(srv: ServerProcess, tid: str, **fields: Any) -> tuple[str, list[Any]]:
    """Run a `/settings` turn with `fields` as overrides: (what the mock saw, the events)."""
    turn_id = await start_turn(srv, tid, "/settings", **fields)
    done, events = await srv.collect_turn(turn_id)
    assert done["params"]["turn"]["status"] == "completed", done
    return agent_text(events), events


def messages(events: list[Any]) -> list[str]:
    return [
        e["params"]["item"]["text"]
        for e in notifications(events, "item/completed")
        if e["params"]["item"]["type"] == "agentMessage"
    ]


def warnings(events: list[Any]) -> list[str]:
    return [e["params"]["message"] for e in notifications(events, "warning")]


async def test_overrides_apply_persist_and_survive_a_restart(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    policy = {"type": "readOnly"}
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(tmp_path)
        seen, events = await settings_seen(
            srv,
            tid,
            model="mock-2",
            effort="high",
            summary="concise",
            sandboxPolicy=policy,
            cwd=str(other),
            outputSchema={"type": "object"},
        )
        assert not warnings(events)
        for part in ("model=mock-2", "effort=high", "summary=concise", "sandbox=read-only"):
            assert part in seen, seen
        assert f"cwd={other}" in seen and "outputSchema=True" in seen
        # Overrides stick for the next turn; outputSchema is for its own turn only.
        seen, _ = await settings_seen(srv, tid)
        assert "model=mock-2" in seen and "effort=high" in seen and "outputSchema=False" in seen
        bad = await srv.error("turn/start", {"threadId": tid, "input": text("x"), "effort": "max"})
        assert bad["code"] == -32602 and "effort" in bad["message"]
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid})
        seen, _ = await settings_seen(srv, tid)
        assert "model=mock-2" in seen and "effort=high" in seen and "sandbox=read-only" in seen


async def test_a_foreign_model_name_is_not_passed_on(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        started = await srv.call(
            "thread/start",
            {"modelProvider": "mock", "cwd": str(tmp_path), "model": "gpt-5.2-codex"},
        )
        tid = started["thread"]["id"]
        warned = await srv.wait_method("warning")
        assert "gpt-5.2-codex" in warned["params"]["message"], warned
        assert started["model"] == "default"
        seen, events = await settings_seen(srv, tid, model="claude-sonnet-4-5")
        assert "model=None" in seen, seen
        assert any("claude-sonnet-4-5" in w for w in warnings(events)), events
        listed = await srv.call("model/list", {"modelProvider": "mock"})
        assert [m["isDefault"] for m in listed["data"]] == [True]


async def test_images_reach_the_agent_and_bad_ones_are_refused(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(tmp_path)
        inputs = [
            *text("What is in these?"),
            {"type": "image", "url": data_url},
            {"type": "localImage", "path": "shot.png"},
            {"type": "image", "url": "https://example.invalid/cat.png"},
        ]
        result = await srv.call("turn/start", {"threadId": tid, "input": inputs})
        done, events = await srv.collect_turn(result["turn"]["id"])
        assert done["params"]["turn"]["status"] == "completed"
        answer = agent_text(events)
        assert answer.count(f"[image: image/png, {len(PNG)} bytes]") == 2, answer
        assert "[image: https://example.invalid/cat.png]" in answer
        [user] = [
            e["params"]["item"]
            for e in notifications(events, "item/completed")
            if e["params"]["item"]["type"] == "userMessage"
        ]
        assert [c["type"] for c in user["content"]] == ["text", "image", "localImage", "image"]
        for item, needle in (
            ({"type": "localImage", "path": "missing.png"}, "missing.png"),
            ({"type": "localImage", "path": "notes.txt"}, "not an image"),
            ({"type": "image", "url": "data:text/plain;base64,aGk="}, "not a base64 image"),
            ({"type": "image", "url": "file:///etc/passwd"}, "not http"),
        ):
            error = await srv.error("turn/start", {"threadId": tid, "input": [item]})
            assert error["code"] == -32602 and needle in error["message"], error
        t, _ = await turn(srv, tid, "still fine")
        assert t["status"] == "completed"


async def test_steer_joins_the_running_turn(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(tmp_path)
        turn_id = await start_turn(srv, tid, "/sleep 1\nfirst part")
        await srv.wait_for(
            lambda e: (
                e.get("method") == "item/completed" and e["params"]["item"]["type"] == "userMessage"
            )
        )
        wrong = await srv.error(
            "turn/steer", {"threadId": tid, "input": text("x"), "expectedTurnId": "nope"}
        )
        assert wrong["code"] == -32600 and "expected active turn id" in wrong["message"]
        steered = await srv.call(
            "turn/steer",
            {"threadId": tid, "input": text("also this"), "expectedTurnId": turn_id},
        )
        assert steered == {"turnId": turn_id}
        done, events = await srv.collect_turn(turn_id)
        assert done["params"]["turn"]["status"] == "completed"
        assert "steered: also this" in agent_text(events)
        users = [
            e["params"]["item"]
            for e in notifications(events, "item/completed")
            if e["params"]["item"]["type"] == "userMessage"
        ]
        assert users[-1]["content"] == text("also this")
        idle = await srv.error(
            "turn/steer", {"threadId": tid, "input": text("late"), "expectedTurnId": turn_id}
        )
        assert idle["code"] == -32600 and "no active turn" in idle["message"]


async def test_fork_copies_history_and_leaves_the_source_alone(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        src = await srv.start_thread(tmp_path)
        first, _ = await turn(srv, src, "the source's first words")
        bad = await srv.error("thread/fork", {"threadId": src, "lastTurnId": "not-the-last"})
        assert bad["code"] == -32602 and "lastTurnId" in bad["message"]
        forked = await srv.call("thread/fork", {"threadId": src, "lastTurnId": first["id"]})
        fork = forked["thread"]["id"]
        assert fork != src and forked["thread"]["forkedFromId"] == src
        assert [t["id"] for t in forked["thread"]["turns"]] == [first["id"]]
        _, events = await turn(srv, fork, "the fork speaks\n/history")
        history = agent_text(events)
        assert "the source's first words" in history and "the fork speaks" in history
        _, events = await turn(srv, src, "/history")
        assert "the fork speaks" not in agent_text(events)
        assert "the source's first words" in agent_text(events)
        listed = await srv.call("thread/turns/list", {"threadId": fork, "sortDirection": "asc"})
        assert len(listed["data"]) == 2 and listed["data"][0]["id"] == first["id"]


async def test_compact_and_injected_history(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    earlier = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "The secret word is PLUM."}],
        },
    ]
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(tmp_path)
        bad = await srv.error("thread/inject_items", {"threadId": tid, "items": [1]})
        assert bad["code"] == -32602
        assert await srv.call("thread/inject_items", {"threadId": tid, "items": earlier}) == {}
        _, events = await turn(srv, tid, "/history\nwhat was the word?")
        [history, _reply] = messages(events)
        assert history.count("The secret word is PLUM.") == 1, history
        assert "User: Hi" in history
        assert history.index("PLUM") < history.index("what was the word?")
        # Sent once: the next turn carries only its own text.
        _, events = await turn(srv, tid, "/history")
        [history] = messages(events)
        said = [line for line in history.splitlines() if line.startswith("user:")]
        assert [("PLUM" in line) for line in said] == [True, False]  # sent once
        await srv.call("thread/compact/start", {"threadId": tid})
        done = await srv.wait_method("turn/completed", seen=(seen_events := []))
        assert done["params"]["turn"]["status"] == "completed"
        kinds = [e["params"]["item"]["type"] for e in notifications(seen_events, "item/started")]
        assert kinds == ["contextCompaction"]
        assert notifications(seen_events, "thread/compacted")
        _, events = await turn(srv, tid, "/history")
        assert "[compacted:" in agent_text(events) and "PLUM" not in agent_text(events)


async def test_management_and_history_lists_across_a_restart(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(tmp_path)
        turn_ids = [(await turn(srv, tid, f"turn {n}"))[0]["id"] for n in range(3)]
        await srv.call("thread/name/set", {"threadId": tid, "name": "  Release notes  "})
        named = await srv.wait_method("thread/name/updated")
        assert named["params"] == {"threadId": tid, "threadName": "Release notes"}
        git = {"branch": "main", "sha": "abc123", "originUrl": "https://example.invalid/r.git"}
        updated = await srv.call("thread/metadata/update", {"threadId": tid, "gitInfo": git})
        assert updated["thread"]["gitInfo"] == git
        updated = await srv.call(
            "thread/metadata/update", {"threadId": tid, "gitInfo": {"sha": None}}
        )
        assert updated["thread"]["gitInfo"] == {"branch": "main", "originUrl": git["originUrl"]}
        await srv.call("thread/archive", {"threadId": tid})
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        page = await srv.call("thread/turns/list", {"threadId": tid, "limit": 2})
        assert [t["id"] for t in page["data"]] == turn_ids[:0:-1]  # newest first
        assert page["data"][0]["itemsView"] == "summary"
        rest = await srv.call(
            "thread/turns/list", {"threadId": tid, "limit": 2, "cursor": page["nextCursor"]}
        )
        assert [t["id"] for t in rest["data"]] == [turn_ids[0]] and rest.get("nextCursor") is None
        items = await srv.call("thread/items/list", {"threadId": tid, "limit": 4})
        assert [e["turnId"] for e in items["data"]] == [turn_ids[0]] * 2 + [turn_ids[1]] * 2
        assert items["data"][0]["item"]["type"] == "userMessage"
        one = await srv.call(
            "thread/items/list", {"threadId": tid, "turnId": turn_ids[2], "sortDirection": "desc"}
        )
        assert [e["item"]["type"] for e in one["data"]] == ["agentMessage", "userMessage"]
        unarchived = await srv.call("thread/unarchive", {"threadId": tid})
        assert unarchived["thread"]["name"] == "Release notes"
        listed = await srv.call("thread/list", {})
        assert tid in [t["id"] for t in listed["data"]]
        await srv.call("thread/resume", {"threadId": tid})
        # The mock keeps no session files: asked to delete them, it says so.
        params = {"threadId": tid, "deleteBackendSession": True}
        assert await srv.call("thread/delete", params) == {}
        seen: list[Any] = []
        await srv.wait_method("thread/deleted", seen=seen)
        assert any("cannot delete its CLI's session files" in w for w in warnings(seen)), seen
        gone = await srv.error("thread/read", {"threadId": tid})
        assert gone["code"] == -32600
        assert tid not in [t["id"] for t in (await srv.call("thread/list", {}))["data"]]
