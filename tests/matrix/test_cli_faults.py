"""A. The CLI itself misbehaves: killed with SIGKILL mid-turn, exits non-zero before its
first line, prints non-JSON, truncated JSON or a 10 MB line, hangs (per-turn timeout), is
missing or not executable.

Faults a real CLI cannot be made to produce come from fault_cli.py in front of the real CLI
(`config.cliPath`), triggered by the first stdout line carrying the scripted answer's marker,
so they land mid-turn on top of the real protocol. Every fault runs on its own thread while a
bystander thread runs a turn alongside; then the fault is disarmed and the same thread must
take a healthy turn.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.matrix.harness import (
    Bystander,
    Cells,
    Collector,
    Harness,
    Rule,
    Say,
    Stall,
    TurnResult,
    chosen,
    matrix_params,
    run_turn,
)
from tests.support.client import ServerProcess

MARK = "QZX7"  # the scripted answer's marker: the wrapper's trigger
ANSWER = f"{MARK} is how this answer starts, and it goes on for a while."
HEALTHY = "Healthy again after the fault."
QUERY_TIMED_OUT = "Query timed out"


def script(h: Harness) -> None:
    h.script(
        Rule("healthy", Say(HEALTHY)),
        Bystander.RULE,
        Rule("stall", Stall(ANSWER)),
        Rule("answer", Say(ANSWER)),
    )


@dataclass
class Fault:
    """One cell: what the thread is given, and what the user must see."""

    name: str
    wrapper: str | None = None  # fault_cli.py's FAULT
    tag: str = "answer"
    #: "completed" (the CLI's noise is ignored) or "failed"
    status: str = "failed"
    needles: tuple[str, ...] = ()


FAULTS = [
    Fault("sigkill mid-turn", tag="stall", needles=("SIGKILL",)),
    Fault(
        "exit 3 before output",
        "exit-before-output:3",
        needles=("3", "fault-cli: exiting with status 3"),
    ),
    Fault("non-JSON lines", "garbage-after:0", status="completed"),
    Fault(
        "truncated JSON, then exit",
        "truncate-after:0",
        needles=("1", "fault-cli: stdout cut"),
    ),
    Fault("10 MB line", "huge-line-after:0", status="completed"),
    Fault("hang (turn timeout)", "hang-after:0"),
    Fault("binary missing"),
    Fault("binary not executable"),
]


#: Where the CLI's own last words may be missing from the message, and why (documented CLI
#: behaviour): the cell then checks the exit code only.
LOST_WORDS = {
    ("qwen", "truncated JSON, then exit"): "doc: failed with the exit code; qwen runs as two node "
    "processes, and once the outer one is gone the inner one writes EPIPE traces on stderr, "
    "which can fill the message's tail of the CLI's stderr",
}


def readable(result: TurnResult) -> str:
    message = result.error
    assert message, result.turn
    assert "Traceback" not in message and "internal error" not in message, message
    return message


async def one_fault(
    h: Harness, srv: ServerProcess, bystander: Bystander, fault: Fault, cells: Cells
) -> None:
    cwd = h.new_cwd(fault.name)
    config: dict[str, Any] = {}
    wrapper = None
    broken: Path | None = None
    if fault.wrapper is not None and h.has_cli:
        wrapper = h.fault_cli(fault.wrapper, trigger=MARK)
        config["cliPath"] = str(wrapper.path)
    if fault.name.startswith("hang"):
        config["turnTimeoutMs"] = h.timeout_ms
    if fault.name.startswith("sigkill"):
        config.update(h.own_process_config)
    if fault.name.startswith("binary"):
        # a pass-through launcher, missing / not executable until it is repaired
        wrapper = h.fault_cli("none")
        wrapper.disarm()
        if fault.name == "binary missing":
            broken = wrapper.path.with_name("missing-cli")
        else:
            broken = wrapper.path
            broken.chmod(0o644)
        config["cliPath"] = str(broken)
    if wrapper is not None and broken is not None:
        await refused_then_repaired(h, srv, cwd, config, fault, broken, wrapper.path)
        cells.outcome = "thread/start refused (install hint), then works once repaired"
        return
    tag = "stall" if h.backend == "mock" and fault.name.startswith("hang") else fault.tag
    tid = await h.thread(srv, cwd, config=config)

    collector = Collector(srv)
    await bystander.start(collector)
    turn = await collector.start(tid, h.prompt(tag))
    if fault.name.startswith("sigkill"):
        # mid-turn: the model's answer has started streaming (and then stalls)
        await h.wait_until(lambda: h.calls("stall") > 0, "the model was called", 90)
        await h.wait_until(lambda: bool(h.cli_pids(srv, cwd)), "the CLI runs")
        await trio.sleep(0.3)
        [pid] = h.cli_pids(srv, cwd)
        os.kill(pid, signal.SIGKILL)
    results = await collector.finish(timeout=h.timeout_ms / 1000 + 60)
    result = results[turn]
    bystander.check(results)

    if fault.status == "completed":
        assert result.status == "completed", result.turn
        assert result.text == ANSWER, result.text
        cells.outcome = "completed (ignored)"
    else:
        assert result.status == "failed", result.turn
        message = readable(result)
        if fault.name.startswith("hang"):
            assert message == QUERY_TIMED_OUT, message
        lost = LOST_WORDS.get((h.name, fault.name))
        for needle in (f"(exit code {fault.needles[0]})",) if lost else fault.needles:
            assert needle in message, (needle, message)
        cells.outcome = lost or f"failed: {message[:60]}"

    # the same thread goes on once the CLI is sound again
    if wrapper is not None:
        wrapper.disarm()
    healthy = await run_turn(srv, tid, h.prompt("healthy"), timeout=90)
    assert healthy.status == "completed", healthy.error or healthy.turn
    assert healthy.text == HEALTHY, healthy.text


async def refused_then_repaired(
    h: Harness,
    srv: ServerProcess,
    cwd: Path,
    config: dict[str, Any],
    fault: Fault,
    broken: Path,
    sound: Path,
) -> None:
    """A CLI missing or not executable: thread/start is refused readably (a thread whose CLI
    vanishes later is tests/support/missing_cli.py's case); the server goes on serving, and
    the repaired CLI runs the next thread."""
    error = await srv.error("thread/start", {"cwd": str(cwd), **h.params(config=config)})
    message = error["message"]
    assert "Traceback" not in message and str(broken) in message, message
    expected = "not found" if fault.name == "binary missing" else "not executable"
    assert expected in message, message
    if fault.name == "binary not executable":
        broken.chmod(0o755)
    tid = await h.thread(srv, cwd, config={**config, "cliPath": str(sound)})
    healthy = await run_turn(srv, tid, h.prompt("healthy"), timeout=90)
    assert healthy.status == "completed", healthy.error or healthy.turn
    assert healthy.text == HEALTHY, healthy.text


def applies(h: Harness, fault: Fault) -> bool:
    if not h.has_cli:
        return fault.name.startswith("hang")  # the mock has no CLI: only its turn can hang
    return True


SIGKILL, EXIT, GARBAGE, TRUNCATED, HUGE, HANG, MISSING, NOT_EXEC = (f.name for f in FAULTS)
#: What runs in the default run; everything else is `slow` (scripts/reliability).
DEFAULT = {
    "claude": [SIGKILL, TRUNCATED, HANG, MISSING],
    "codex": [SIGKILL, TRUNCATED, HANG, MISSING],
    "gemini": [SIGKILL, MISSING],
    "opencode": [SIGKILL],
    "qwen": [SIGKILL],
    "mock": [HANG],
    "claude-print": [SIGKILL, TRUNCATED],
    "codex-exec": [SIGKILL, TRUNCATED],
}


@matrix_params(DEFAULT)
async def test_cli_faults(nursery: trio.Nursery, backend: Harness, part: str) -> None:
    h = backend
    faults = [f for f in FAULTS if applies(h, f) and chosen(part, h.name, DEFAULT, f.name)]
    if not faults:
        pytest.skip("nothing left for this part")
    script(h)
    cells = Cells(h, "A")
    async with h.server(nursery) as srv:
        await srv.initialize()
        bystander = Bystander(h, srv)
        await bystander.open()
        for fault in faults:
            async with cells.cell(fault.name):
                await one_fault(h, srv, bystander, fault, cells)
    left = await h.wait_no_leftovers(2)
    assert left == [], left
    cells.check()
