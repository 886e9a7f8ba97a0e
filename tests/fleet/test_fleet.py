"""`threadline[ray]`: a fleet of threadline servers on a local Ray cluster (mock backend).

40 concurrent turns over 4 actors lose or misroute nothing; approvals reach the caller and are
answered through the fleet (and fail closed); an actor killed mid-turn ends its turns `failed`
with a readable error, its server is gone, and its threads resume on another actor with their
history."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="threadline[ray] is not installed")

from ray.exceptions import RayActorError  # noqa: E402

from threadline.fleet import Fleet  # noqa: E402
from threadline.fleet.procs import wait_gone  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

Message = dict[str, Any]


def mock_fleet(size: int, home: Path, **options: Any) -> Fleet:
    return Fleet(size, home=home, env={"AGENT_BACKEND": "mock"}, **options)


def problems_of(tid: str, messages: list[Message], text: str) -> list[str]:
    """What is wrong with one turn's stream: a message of another thread or turn, a lost or
    extra delta, a turn not started or completed exactly once."""
    problems = [
        f"{m['method']} of {m['params'].get('threadId')}"
        for m in messages
        if m["params"].get("threadId") != tid
    ]
    methods = Counter(m["method"] for m in messages)
    if methods["turn/started"] != 1 or methods["turn/completed"] != 1:
        problems.append(
            f"{tid}: turn/started x{methods['turn/started']}, "
            f"turn/completed x{methods['turn/completed']}"
        )
    turn_id = messages[-1]["params"]["turn"]["id"]
    problems += [
        f"{tid}: {m['method']} of turn {m['params']['turnId']}"
        for m in messages
        if m["params"].get("turnId", turn_id) != turn_id
    ]
    if messages[-1]["method"] != "turn/completed":
        problems.append(f"{tid}: ends with {messages[-1]['method']}")
    elif messages[-1]["params"]["turn"]["status"] != "completed":
        problems.append(f"{tid}: turn {messages[-1]['params']['turn']['status']}")
    deltas = "".join(
        m["params"]["delta"] for m in messages if m["method"] == "item/agentMessage/delta"
    )
    if deltas != text:
        problems.append(f"{tid}: deltas {deltas!r}, want {text!r}")
    final = [
        m["params"]["item"]["text"]
        for m in messages
        if m["method"] == "item/completed" and m["params"]["item"]["type"] == "agentMessage"
    ]
    if final != [text]:
        problems.append(f"{tid}: agentMessage {final!r}")
    return problems


def test_forty_concurrent_turns_on_four_actors_lose_and_misroute_nothing(
    home: Path, workdir: Path
) -> None:
    with mock_fleet(4, home) as fleet:
        tids = [fleet.start_thread({"cwd": str(workdir)})["thread"]["id"] for _ in range(40)]
        per_actor = Counter(id(fleet.actor_of(tid)) for tid in tids)
        assert sorted(per_actor.values()) == [10, 10, 10, 10]  # least-loaded placement
        texts = {
            tid: f"thread {i:02d} says {secrets.token_hex(6)}: alpha beta gamma delta epsilon"
            for i, tid in enumerate(tids)
        }
        # Every turn is started before any is read.
        turns = {tid: fleet.run_turn(tid, f"/text {text}") for tid, text in texts.items()}

        async def read_all() -> list[list[Message]]:
            async def read(tid: str) -> list[Message]:
                return [m async for m in turns[tid]]

            return await asyncio.gather(*(read(tid) for tid in tids))

        seen = dict(zip(tids, asyncio.run(read_all()), strict=True))
    problems = [p for tid in tids for p in problems_of(tid, seen[tid], texts[tid])]
    assert problems == []
    assert sum(len(messages) for messages in seen.values()) >= 40 * 12


def command_item(messages: list[Message]) -> dict[str, Any]:
    [item] = [
        m["params"]["item"]
        for m in messages
        if m["method"] == "item/completed" and m["params"]["item"]["type"] == "commandExecution"
    ]
    return item


def test_approvals_go_to_the_caller_and_fail_closed(home: Path, workdir: Path) -> None:
    with mock_fleet(1, home, approval_timeout=2.0) as fleet:
        tid = fleet.start_thread({"cwd": str(workdir)})["thread"]["id"]

        # The request is in the stream; the caller answers it through the fleet.
        messages, answered = [], []
        for message in fleet.run_turn(tid, "/run echo ran > ran.txt"):
            messages.append(message)
            if "id" in message:
                assert message["method"] == "item/commandExecution/requestApproval"
                assert message["params"]["command"] == "echo ran > ran.txt"
                answered.append(fleet.answer(message, {"decision": "accept"}))
        assert answered == [True]
        assert command_item(messages)["status"] == "completed"
        assert (workdir / "ran.txt").read_text() == "ran\n"
        assert messages[-1]["params"]["turn"]["status"] == "completed"

        # A handler that raises declines.
        def broken(request: Message) -> Any:
            raise RuntimeError("handler bug")

        messages = list(fleet.run_turn(tid, "/run echo no > broken.txt", on_request=broken))
        assert command_item(messages)["status"] == "declined"
        assert not (workdir / "broken.txt").exists()

        # The caller stops reading: its request is declined then and there.
        for message in fleet.run_turn(tid, "/run echo gone > gone.txt"):
            if "id" in message:
                break
        assert fleet.answer(message, {"decision": "accept"}) is False
        turns = fleet.read(tid)["thread"]["turns"]
        while turns[-1]["status"] == "inProgress":
            time.sleep(0.05)
            turns = fleet.read(tid)["thread"]["turns"]
        assert not (workdir / "gone.txt").exists()

        # Nobody answers: declined once the approval timeout passes; a late answer is refused.
        messages = list(fleet.run_turn(tid, "/run echo late > late.txt"))
        [request] = [m for m in messages if "id" in m]
        assert command_item(messages)["status"] == "declined"
        assert not (workdir / "late.txt").exists()
        assert fleet.answer(request, {"decision": "accept"}) is False


def test_a_killed_actor_fails_its_turns_and_its_threads_resume_on_another(
    home: Path, workdir: Path
) -> None:
    with mock_fleet(2, home) as fleet:
        tids = [fleet.start_thread({"cwd": str(workdir)})["thread"]["id"] for _ in range(4)]
        for i, tid in enumerate(tids):
            assert (
                list(fleet.run_turn(tid, f"/text first {i}"))[-1]["params"]["turn"]["status"]
                == "completed"
            )
        victim = fleet.actor_of(tids[0])
        doomed = [tid for tid in tids if fleet.actor_of(tid) is victim]
        spared = [tid for tid in tids if tid not in doomed]
        assert len(doomed) == 2
        server_pids = ray.get(victim.info.remote())["children"]
        assert server_pids

        running = {tid: iter(fleet.run_turn(tid, "/text working\n/sleep 60")) for tid in doomed}
        for stream in running.values():  # each turn is streaming when the actor dies
            assert any(m["method"] == "item/agentMessage/delta" for m in stream)
        others = {tid: fleet.run_turn(tid, "/text other\n/sleep 1\n/text done") for tid in spared}
        ray.kill(victim)

        for tid, stream in running.items():
            last = list(stream)[-1]
            assert last["method"] == "turn/completed"
            turn = last["params"]["turn"]
            assert last["params"]["threadId"] == tid and turn["id"]
            assert turn["status"] == "failed"
            error = turn["error"]["message"]
            assert error.startswith("the threadline actor died: ")
            assert error.endswith("; resume the thread on another actor")
            assert "ray.kill" in error
        for stream in others.values():
            assert list(stream)[-1]["params"]["turn"]["status"] == "completed"
        assert wait_gone(server_pids, 10), "the dead actor's threadline server is still running"

        for tid in doomed:
            assert fleet.resume(tid)["thread"]["id"] == tid
            assert fleet.actor_of(tid) is not victim
            i = tids.index(tid)
            turns = fleet.read(tid)["thread"]["turns"]
            assert turns[0]["status"] == "completed"
            assert any(item.get("text") == f"first {i}" for item in turns[0]["items"])
            # The turn the actor died in, as its server recorded it on the way out.
            assert [t["status"] for t in turns[1:]] in (["interrupted"], ["failed"])
            after = list(fleet.run_turn(tid, "/text again"))
            assert after[-1]["params"]["turn"]["status"] == "completed"
            assert (
                "".join(
                    m["params"]["delta"] for m in after if m["method"] == "item/agentMessage/delta"
                )
                == "again"
            )


def died_within(actor: Any, seconds: float) -> bool:
    """Whether Ray reports `actor` dead within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ray.get(actor.info.remote(), timeout=seconds)
        except RayActorError:
            return True
        time.sleep(0.1)
    return False


def test_a_crashed_server_takes_its_actor_down_and_its_threads_resume(
    home: Path, workdir: Path
) -> None:
    with mock_fleet(2, home) as fleet:
        tid = fleet.start_thread({"cwd": str(workdir)})["thread"]["id"]
        actor = fleet.actor_of(tid)
        [server] = ray.get(actor.info.remote())["children"]
        stream = iter(fleet.run_turn(tid, "/text working\n/sleep 60"))
        assert any(m["method"] == "item/agentMessage/delta" for m in stream)
        os.kill(server, signal.SIGKILL)

        last = list(stream)[-1]
        assert last["method"] == "turn/completed"
        assert last["params"]["turn"]["status"] == "failed"
        assert "resume the thread on another" in last["params"]["turn"]["error"]["message"]
        # The actor went with its server: Ray reports it dead, the fleet resumes elsewhere.
        assert died_within(actor, 30)
        assert fleet.resume(tid)["thread"]["id"] == tid
        assert fleet.actor_of(tid) is not actor
        after = list(fleet.run_turn(tid, "/text again"))
        assert after[-1]["params"]["turn"]["status"] == "completed"


def test_interrupt_ends_the_turn_interrupted(home: Path, workdir: Path) -> None:
    with mock_fleet(1, home) as fleet:
        tid = fleet.start_thread({"cwd": str(workdir)})["thread"]["id"]
        events = fleet.run_turn(tid, "/text working\n/sleep 60")
        stream = iter(events)
        assert any(m["method"] == "item/agentMessage/delta" for m in stream)
        assert events.turn_id is not None
        fleet.interrupt(tid, events.turn_id)
        last = list(stream)[-1]
        assert last["method"] == "turn/completed"
        assert last["params"]["turn"]["status"] == "interrupted"
        assert events.completed == last
