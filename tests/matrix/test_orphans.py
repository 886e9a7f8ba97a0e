"""C. Nothing is left running: client EOF, SIGTERM and SIGINT to threadline while a command
the model asked for (`sleep 300`, approved) runs; `turn/cancel` during that command (the
sleep itself must die); `thread/archive` during a running turn; and `turn/cancel` sent right
after `turn/start`, before any output (with THREADLINE_INTERRUPT_GRACE=60, so a missed native
interrupt shows as a timeout, not as a slow pass).

"Nothing left" is checked in the process table: every process carrying the test's marker
variable (the e2e fixture's, inherited by threadline, the CLI and the commands it runs) must be
gone within 2 s, not just the pids the test knows.
"""

from __future__ import annotations

import signal
import time
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
    Shell,
    Stall,
    TurnResult,
    chosen,
    matrix_params,
    run_turn,
)
from tests.support.client import Message, ServerProcess

SLEEP_S = 300
HEALTHY = "Healthy again after the cancel."
GRACE = {"THREADLINE_INTERRUPT_GRACE": "60"}
PROMPT_LIMIT = 10.0  # seconds a cancel may take to end the turn (the grace is 60)

EOF, SIGTERM, SIGINT, CANCEL_SLEEP, ARCHIVE, CANCEL_EARLY = (
    "client EOF",
    "SIGTERM to threadline",
    "SIGINT to threadline",
    "turn/cancel during sleep 300",
    "thread/archive during a turn",
    "turn/cancel right after turn/start",
)
SHUTDOWNS = {EOF: None, SIGTERM: signal.SIGTERM, SIGINT: signal.SIGINT}

DEFAULT = {
    "claude": [SIGTERM, CANCEL_SLEEP, CANCEL_EARLY],
    "codex": [EOF, SIGTERM, SIGINT, CANCEL_SLEEP, ARCHIVE, CANCEL_EARLY],
    "gemini": [SIGTERM, CANCEL_SLEEP],
    "opencode": [CANCEL_SLEEP],
    "qwen": [CANCEL_SLEEP],
    "mock": [EOF, SIGTERM, SIGINT, CANCEL_SLEEP, ARCHIVE, CANCEL_EARLY],
    "claude-print": [CANCEL_SLEEP, CANCEL_EARLY],
    "codex-exec": [CANCEL_SLEEP, CANCEL_EARLY],
}


def script(h: Harness) -> None:
    h.script(
        Rule("healthy", Say(HEALTHY)),
        Bystander.RULE,
        Rule("stalling", Stall("The bystander starts to answer, then nothing more")),
        # Not a bare `sleep`: claude 2.1.332 refuses a command that starts with one.
        Rule("sleeper", Shell(f"true && sleep {SLEEP_S}"), Say("Slept.")),
        Rule("quick", Say("A quick answer, streamed slowly to leave time.", delay_ms=100)),
    )


def accept_all(message: Message) -> Any:
    return {"decision": "accept"}


async def start_sleeper(h: Harness, srv: ServerProcess, collector: Collector, tid: str) -> str:
    """A turn whose approved command (`sleep 300`) is running."""
    turn = await collector.start(tid, h.prompt("sleeper"))
    await collector.until(lambda: bool(h.sleepers(SLEEP_S)), "sleep 300 runs", 60)
    return turn


async def gone(h: Harness, what: str, pred: Any, timeout: float = 2) -> None:
    """`pred()` (a /proc check) must hold within `timeout` s."""
    await h.wait_until(pred, what, timeout)


async def shutdown_case(nursery: trio.Nursery, h: Harness, how: str, cells: Cells) -> None:
    """threadline goes away (stdin EOF or a signal) while a command runs and a second thread
    streams: both turns end, threadline exits 0, and no process of the test remains."""
    async with h.server(nursery, **GRACE) as srv:
        await srv.initialize()
        tid = await h.thread(srv)
        other = await h.thread(srv, h.work2)
        collector = Collector(srv, accept_all)
        sleeper = await start_sleeper(h, srv, collector, tid)
        streaming = await collector.start(other, h.prompt("stalling"))
        if h.has_cli:
            await h.wait_until(lambda: h.calls("stalling") > 0, "the second turn streams", 60)
        t0 = time.monotonic()
        signum = SHUTDOWNS[how]
        if signum is None:
            await srv.close_stdin()
        else:
            srv.signal(signum)
        rc = await srv.wait(30)
        elapsed = time.monotonic() - t0
        assert rc == 0, srv.stderr_text[-3000:]
        if signum is not None:
            # a signal lets threadline finish both turns for the client before it exits
            results = await collector.finish(timeout=5)
            assert results[sleeper].status == "interrupted", results[sleeper].turn
            assert results[streaming].status == "interrupted", results[streaming].turn
        await gone(h, "every process of the test ended", lambda: not h.leftovers())
        cells.outcome = f"exit 0 in {elapsed:.1f} s, 0 left"


async def cancel_sleep(h: Harness, srv: ServerProcess, bystander: Bystander, cells: Cells) -> None:
    tid = await h.thread(srv)  # (on ACP: the bystander's agent, another session)
    collector = Collector(srv, accept_all)
    turn = await start_sleeper(h, srv, collector, tid)
    await bystander.start(collector)
    t0 = time.monotonic()
    assert await srv.call("turn/cancel", {"threadId": tid, "turnId": turn}) == {}
    results = await collector.finish(timeout=PROMPT_LIMIT)
    elapsed = time.monotonic() - t0
    result = results[turn]
    assert result.status == "interrupted", result.turn
    await gone(h, "the cancelled sleep ended", lambda: not h.sleepers(SLEEP_S))
    bystander.check(results)
    healthy = await run_turn(srv, tid, h.prompt("healthy"))
    assert healthy.status == "completed", healthy.error or healthy.turn
    assert healthy.text == HEALTHY, healthy.text
    cells.outcome = f"interrupted in {elapsed:.1f} s, sleep gone"


async def archive_running(
    h: Harness, srv: ServerProcess, bystander: Bystander, cells: Cells
) -> None:
    cwd = h.new_cwd("archive")
    tid = await h.thread(srv, cwd)
    collector = Collector(srv, accept_all)
    turn = await start_sleeper(h, srv, collector, tid)
    await bystander.start(collector)
    t0 = time.monotonic()
    assert await srv.call("thread/archive", {"threadId": tid}) == {}
    results = await collector.finish(timeout=PROMPT_LIMIT)
    elapsed = time.monotonic() - t0
    assert results[turn].status == "interrupted", results[turn].turn
    await gone(h, "the sleep of the archived thread ended", lambda: not h.sleepers(SLEEP_S))
    await gone(h, "the archived thread's CLI ended", lambda: not h.cli_pids(srv, cwd))
    bystander.check(results)
    cells.outcome = f"interrupted in {elapsed:.1f} s, CLI and sleep gone"


async def cancel_early(h: Harness, srv: ServerProcess, bystander: Bystander, cells: Cells) -> None:
    tid = await h.thread(srv)
    collector = Collector(srv, accept_all)
    await bystander.start(collector)
    turn = await collector.start(tid, h.prompt("quick"))
    t0 = time.monotonic()
    assert await srv.call("turn/cancel", {"threadId": tid, "turnId": turn}) == {}
    results = await collector.finish(timeout=PROMPT_LIMIT + 20)
    elapsed = time.monotonic() - t0
    result: TurnResult = results[turn]
    assert result.status == "interrupted", result.turn
    assert elapsed < PROMPT_LIMIT, f"the cancel took {elapsed:.1f} s"
    bystander.check(results)
    healthy = await run_turn(srv, tid, h.prompt("healthy"))
    assert healthy.status == "completed", healthy.error or healthy.turn
    assert healthy.text == HEALTHY, healthy.text
    cells.outcome = f"interrupted in {elapsed:.1f} s"


@matrix_params(DEFAULT)
async def test_no_orphans(nursery: trio.Nursery, backend: Harness, part: str) -> None:
    h = backend
    cases = [
        c
        for c in (EOF, SIGTERM, SIGINT, CANCEL_SLEEP, ARCHIVE, CANCEL_EARLY)
        if chosen(part, h.name, DEFAULT, c)
    ]
    if not cases:
        pytest.skip("nothing left for this part")
    script(h)
    cells = Cells(h, "C")
    for case in cases:
        if case in SHUTDOWNS:
            async with cells.cell(case):
                await shutdown_case(nursery, h, case, cells)
    in_server = [c for c in cases if c not in SHUTDOWNS]
    if in_server:
        async with h.server(nursery, **GRACE) as srv:
            await srv.initialize()
            bystander = Bystander(h, srv)
            await bystander.open()
            for case in in_server:
                run = {CANCEL_SLEEP: cancel_sleep, ARCHIVE: archive_running}.get(case, cancel_early)
                async with cells.cell(case):
                    await run(h, srv, bystander, cells)
        await gone(h, "every process of the test ended", lambda: not h.leftovers())
    cells.check()
