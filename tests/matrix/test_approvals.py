"""D. Approvals fail closed. The model asks to run a real command (`touch approved-N.txt`);
the approval request is left unanswered past `config.approvalTimeoutMs`, answered with
garbage, with a JSON-RPC error, twice (decline, then accept: the first answer decides), after
the turn was cancelled, or the client disconnects while it is pending. In every case the
command does not run (checked on the file system) and the item ends `declined` wherever the
turn completes at all.

Only modes that can ask take part: the per-turn modes (claude print, codex exec, gemini
headless, opencode run) decide by policy and never send an approval request.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.matrix.harness import (
    ALL_NAMES,
    Bystander,
    Cells,
    Collector,
    Harness,
    Rule,
    Say,
    Shell,
    TurnResult,
    capabilities,
    chosen,
    is_request,
    matrix_params,
    run_turn,
)
from tests.support.client import Message, ServerProcess

APPROVAL = "item/commandExecution/requestApproval"
AFTER = "Understood, I did not run it."
HEALTHY = "Healthy again after the approval."

UNANSWERED, GARBAGE, RPC_ERROR, TWICE, AFTER_CANCEL, EOF = (
    "unanswered (approval timeout)",
    "answered with garbage",
    "answered with a JSON-RPC error",
    "answered twice (decline, accept)",
    "answered after turn/cancel",
    "client EOF while pending",
)
CASES = [UNANSWERED, GARBAGE, RPC_ERROR, TWICE, AFTER_CANCEL, EOF]
TAGS = {case: f"ask{n}" for n, case in enumerate(CASES)}
#: The modes that ask the client.
NAMES = [name for name in ALL_NAMES if capabilities(name).approvals]
DEFAULT = {
    "claude": [UNANSWERED, GARBAGE, TWICE, AFTER_CANCEL],
    "codex": CASES,
    "gemini": [UNANSWERED, GARBAGE, TWICE, AFTER_CANCEL],
    "opencode": [TWICE],
    "qwen": [TWICE],
    "mock": CASES,
}


def target(h: Harness, case: str) -> Path:
    return h.work / f"approved-{CASES.index(case)}.txt"


def script(h: Harness) -> None:
    h.script(
        Rule("healthy", Say(HEALTHY)),
        Bystander.RULE,
        *[Rule(TAGS[c], Shell(f"touch approved-{CASES.index(c)}.txt"), Say(AFTER)) for c in CASES],
    )


def declined(h: Harness, result: TurnResult, case: str) -> None:
    [ask] = [r for r in result.requests() if r["method"] == APPROVAL]
    assert f"approved-{CASES.index(case)}.txt" in str(ask["params"].get("command")), ask
    [item] = [
        i
        for i in result.items("completed", "commandExecution")
        if i["id"] == ask["params"]["itemId"]
    ]
    assert item["status"] == "declined", item
    assert not target(h, case).exists(), "the command ran"


async def settle(h: Harness, case: str) -> None:
    """Give a command that should not run a moment to show up anyway."""
    await trio.sleep(0.5)
    assert not target(h, case).exists(), "the command ran"


async def one_case(
    h: Harness, srv: ServerProcess, bystander: Bystander, case: str, cells: Cells
) -> None:
    config = {"approvalTimeoutMs": 1500} if case == UNANSWERED else {}
    tid = await h.thread(srv, config=config)
    answers: dict[str, Any] = {
        UNANSWERED: None,
        GARBAGE: "yes, sure, whatever",
        TWICE: {"decision": "decline"},
        AFTER_CANCEL: None,
    }

    def on_request(message: Message) -> Any:
        if message["method"] != APPROVAL:
            return None
        if case == RPC_ERROR:
            return None  # answered below, as an error
        return answers[case]

    collector = Collector(srv, on_request)
    await bystander.start(collector)
    turn = await collector.start(tid, h.prompt(TAGS[case]))
    ask = await collector.wait(is_request(turn))
    assert ask["method"] == APPROVAL, ask
    if case == RPC_ERROR:
        error = {"code": -32000, "message": "the client could not decide"}
        await srv.send({"id": ask["id"], "error": error})
    elif case == TWICE:
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})
    elif case == AFTER_CANCEL:
        await srv.call("turn/cancel", {"threadId": tid, "turnId": turn})
    results = await collector.finish(timeout=60)
    result = results[turn]
    bystander.check(results)
    if case == AFTER_CANCEL:
        assert result.status == "interrupted", result.turn
        await srv.send({"id": ask["id"], "result": {"decision": "accept"}})
    else:
        assert result.status == "completed", result.error or result.turn
    declined(h, result, case)
    if case == UNANSWERED:
        [auto] = [e for e in result.events if e.get("method") == "item/approval/autoDecided"]
        assert auto["params"]["reason"] == "timeout" and auto["params"]["decision"] == "decline"
    await settle(h, case)
    healthy = await run_turn(srv, tid, h.prompt("healthy"))
    assert healthy.status == "completed", healthy.error or healthy.turn
    assert healthy.text == HEALTHY, healthy.text
    assert not target(h, case).exists(), "the command ran later"
    cells.outcome = f"{result.status}, declined, not run"


async def eof_case(nursery: trio.Nursery, h: Harness, cells: Cells) -> None:
    async with h.server(nursery) as srv:
        await srv.initialize()
        tid = await h.thread(srv)
        collector = Collector(srv)
        turn = await collector.start(tid, h.prompt(TAGS[EOF]))
        ask = await collector.wait(is_request(turn))
        assert ask["method"] == APPROVAL, ask
        await srv.close_stdin()
        assert await srv.wait(30) == 0, srv.stderr_text[-3000:]
        # whatever threadline still wrote about the turn before it exited
        with contextlib.suppress(trio.TooSlowError):
            await collector.finish(timeout=2)
        result = collector.done.get(turn)
    await settle(h, EOF)
    assert not h.leftovers(), h.leftovers()
    if result is not None:
        declined(h, result, EOF)
        cells.outcome = f"{result.status}, declined, not run"
    else:
        cells.outcome = "exit 0, not run (no turn/completed)"


@matrix_params(DEFAULT, NAMES)
async def test_approvals_fail_closed(nursery: trio.Nursery, backend: Harness, part: str) -> None:
    h = backend
    cases = [c for c in CASES if chosen(part, h.name, DEFAULT, c)]
    if not cases:
        pytest.skip("nothing left for this part")
    script(h)
    cells = Cells(h, "D")
    in_server = [c for c in cases if c != EOF]
    if in_server:
        async with h.server(nursery) as srv:
            await srv.initialize()
            bystander = Bystander(h, srv)
            await bystander.open()
            for case in in_server:
                async with cells.cell(case):
                    await one_case(h, srv, bystander, case, cells)
    if EOF in cases:
        async with cells.cell(EOF):
            await eof_case(nursery, h, cells)
    cells.check()
