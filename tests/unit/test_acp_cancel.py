"""An interrupted ACP turn ends without waiting for the agent's (late) answer to its cancelled
`session/prompt`, and that answer is still consumed: the session stays busy until it comes,
the next prompt waits for it, whatever the agent sends for the cancelled prompt is dropped, and
an agent that never answers is replaced after the interrupt grace. Another thread's turn on
the same agent process goes on undisturbed.

The agent is tests/unit/fake_acp_agent.py (a scripted ACP agent, run as the `gemini` binary):
it answers a cancelled prompt only once the test releases it, so a turn that waited for the
answer would not complete before the release.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.support.client import assert_items_balanced
from tests.support.fake_acp import Agent, agent
from tests.support.inproc import InProcClient, inproc_server
from threadline.backends.gemini.backend import GeminiBackend
from threadline.server.config import ServerConfig

# The fixture comes from fake_acp.py (referenced here so it counts as used).
_FIXTURES = (agent,)


def server(tmp_path: Path, grace: float) -> Any:
    config = ServerConfig(default_backend="gemini", interrupt_grace=grace)
    return inproc_server({"gemini": GeminiBackend()}, tmp_path / "home", config=config)


async def open_thread(client: InProcClient, agent: Agent) -> str:
    return await client.start_thread(
        modelProvider="gemini", cwd=str(agent.work), config={"cliPath": str(agent.launcher)}
    )


def delta_of(tid: str, text: str) -> Any:
    return lambda e: (
        e.get("method") == "item/agentMessage/delta"
        and e["params"]["threadId"] == tid
        and e["params"]["delta"] == text
    )


def of_thread(events: list[dict[str, Any]], tid: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("params", {}).get("threadId") == tid]


def texts(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["params"]["delta"] for e in events if e.get("method") == "item/agentMessage/delta"
    )


async def cancel_held_turn(client: InProcClient, tid: str, tag: str) -> list[dict[str, Any]]:
    """Start a `hold:` turn, cancel it once it streamed, collect it: it must end interrupted
    while the agent has not answered (the test has not released it)."""
    turn_id = (await client.start_turn(tid, f"hold:{tag}"))["turn"]["id"]
    seen: list[dict[str, Any]] = []
    seen.append(await client.wait_for(delta_of(tid, f"held {tag}"), seen=seen))
    await client.call("turn/cancel", {"threadId": tid, "turnId": turn_id})
    done, events = await client.collect_turn(turn_id, timeout=10)
    events = seen + events
    assert done["params"]["turn"]["status"] == "interrupted", done
    mine = of_thread(events, tid)
    assert_items_balanced(mine)
    assert texts(mine) == f"held {tag}"
    return events


async def test_next_prompt_waits_for_the_late_answer_and_drops_its_updates(
    tmp_path: Path, agent: Agent
) -> None:
    async with server(tmp_path, grace=30) as client:
        tid = await open_thread(client, agent)
        await cancel_held_turn(client, tid, "a")
        # (The agent answers only after the release below: the turn did not wait for it.)
        assert not [e for e in agent.journal() if e[0] == "answer"]

        turn_id = (await client.start_turn(tid, "say:second"))["turn"]["id"]
        await trio.sleep(0.3)
        assert agent.prompts("say:second") == [], "a prompt overlapped the unanswered one"
        agent.release("a")  # -> "LATE a" for the cancelled prompt, then its answer
        done, events = await client.collect_turn(turn_id, timeout=10)
        assert done["params"]["turn"]["status"] == "completed", done
        assert_items_balanced(events)
        assert texts(events) == "second", events
        assert "LATE" not in str(events)

        with trio.fail_after(5):  # (threadline's answer to the late write may trail)
            while not any(e[0] == "reply" for e in agent.journal()):  # noqa: ASYNC110
                await trio.sleep(0.01)
        journal = agent.journal()
        kinds = [e[0] if e[0] != "prompt" else f"prompt {e[2]}" for e in journal[1:]]
        kinds.remove("reply")
        assert kinds == ["new", "prompt hold:a", "cancel", "answer", "prompt say:second", "answer"]
        # the cancelled prompt's late file write was refused
        assert ["reply", "write-a", "error"] in journal
        assert not (agent.work / "late-a.txt").exists()
        assert len(agent.pids()) == 1, "the agent was restarted"


async def test_an_agent_that_never_answers_is_replaced_after_the_grace(
    tmp_path: Path, agent: Agent
) -> None:
    async with server(tmp_path, grace=0.5) as client:
        tid = await open_thread(client, agent)
        await cancel_held_turn(client, tid, "never")
        assert len(agent.pids()) == 1

        _, events = await client.run_turn(tid, "say:again", timeout=15)
        assert events[-1]["params"]["turn"]["status"] == "completed", events[-1]
        assert_items_balanced(events)
        assert texts(events) == "again"
        assert len(agent.pids()) == 2, "the hung agent was not replaced"
        # ... and the next turn stays on the new one.
        _, events = await client.run_turn(tid, "say:third", timeout=15)
        assert texts(events) == "third"
        assert len(agent.pids()) == 2


async def test_cancel_leaves_another_threads_turn_on_the_same_agent_alone(
    tmp_path: Path, agent: Agent
) -> None:
    async with server(tmp_path, grace=30) as client:
        ta = await open_thread(client, agent)
        tb = await open_thread(client, agent)
        turn_b = (await client.start_turn(tb, "slow:b"))["turn"]["id"]
        seen_b = [await client.wait_for(delta_of(tb, "b start"), keep_others=True)]

        events = await cancel_held_turn(client, ta, "x")
        seen_b += of_thread(events, tb)

        agent.release("b")
        done, events = await client.collect_turn(turn_b, timeout=10)
        events_b = seen_b + of_thread(events, tb)
        assert_items_balanced(events_b)
        assert done["params"]["turn"]["status"] == "completed", done
        assert texts(events_b) == "b start b end"
        assert len(agent.pids()) == 1, "two agent processes for one cwd"

        # thread A's next turn waits for its cancelled prompt's answer, then runs normally
        turn_id = (await client.start_turn(ta, "say:after"))["turn"]["id"]
        agent.release("x")
        done, events = await client.collect_turn(turn_id, timeout=10)
        assert done["params"]["turn"]["status"] == "completed", done
        assert_items_balanced(events)
        assert texts(events) == "after"
