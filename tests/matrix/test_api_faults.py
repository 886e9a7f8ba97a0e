"""B. The model API misbehaves (the fake model servers): HTTP 401, 429 without and with
Retry-After, 500, and a stream cut in the middle of the answer.

The e2e fixtures turn the CLIs' own retries off where the CLI allows it (claude:
CLAUDE_CODE_MAX_RETRIES=0; codex: request/stream_max_retries=0; gemini: maxAttempts=1).
OpenCode has no such switch: it retries 429/5xx five times with a backoff from 2 s unless the
answer says when to retry (Retry-After, or `retry-after-ms`, which the matrix sends on its 500
so the retries are immediate), and it retries a cut stream the same way (~70 s): those cells
are `slow`. All faults run on one thread, each followed by a healthy turn, while a bystander
thread runs a turn alongside each fault. A 401 says what to do on every backend: the
backend's `login_fix` (`unauthorized`; Codex's own words and its `httpConnectionFailed` value
move to `additionalDetails`). An API that cannot be used at all: test_api_reach.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import trio

from tests.matrix.harness import (
    Bystander,
    Cells,
    Collector,
    Cut,
    Harness,
    HttpFail,
    Rule,
    Say,
    Step,
    chosen,
    matrix_params,
    run_turn,
)
from threadline.backends.registry import SPECS

HEALTHY = "Healthy again after the API failure."
PARTIAL = "This answer is cut off in the middle"


@dataclass
class Fault:
    name: str
    tag: str
    #: the codexErrorInfo a client sees (None: not checked)
    info: str | dict[str, object] | None


FAULTS = [
    Fault("HTTP 401", "auth401", "unauthorized"),
    Fault("HTTP 429 (no Retry-After)", "quota429", None),
    Fault("HTTP 429 (Retry-After: 1)", "later429", None),
    Fault("HTTP 500", "broken500", None),
    Fault("stream cut midway", "cutstream", None),
]
#: codexErrorInfo where a backend reports what its CLI reports instead (none today).
INFO: dict[tuple[str, str], str | dict[str, object]] = {}
#: Where a cut stream does not fail the turn, and why (documented CLI behaviour).
CUT_COMPLETES = {
    "claude": "completed: the CLI retries a cut stream (2.1.332: up to 3 times, even with "
    "CLAUDE_CODE_MAX_RETRIES=0) and ends the turn with the text its last try received "
    "(empty when that try was cut before any text)",
    "claude-print": "completed: as claude (retry without streaming)",
    "gemini": "completed with the partial text: gemini --acp ends the prompt normally "
    "(stopReason end_turn, no error) after a stream without a finish reason",
}
F401, F429, F429RA, F500, FCUT = (f.name for f in FAULTS)


def steps(h: Harness, fault: Fault) -> Step:
    match fault.name:
        case "HTTP 401":
            return HttpFail(401, "invalid key (injected)")
        case "HTTP 429 (no Retry-After)":
            return HttpFail(429, "rate limited (injected)")
        case "HTTP 429 (Retry-After: 1)":
            return HttpFail(429, "rate limited (injected)", (("retry-after", "1"),))
        case "HTTP 500":
            return HttpFail(500, "the model broke (injected)", h.no_backoff)
        case _:
            return Cut(PARTIAL)


DEFAULT = {
    "claude": [F401, F429, F429RA, F500, FCUT],
    "codex": [F401, F429, F429RA, F500, FCUT],
    "gemini": [F401, F429, F429RA, F500, FCUT],
    "opencode": [F401, F500],
    "qwen": [F401, F429RA, F500, FCUT],
    "mock": [F401, F429, F429RA, F500, FCUT],
    "claude-print": [F500],
    "codex-exec": [F401, F500],
}


@matrix_params(DEFAULT)
async def test_api_faults(nursery: trio.Nursery, backend: Harness, part: str) -> None:
    h = backend
    faults = [f for f in FAULTS if chosen(part, h.name, DEFAULT, f.name)]
    if not faults:
        pytest.skip("nothing left for this part")
    # (claude keeps a failed prompt and sends it again with the next one: the healthy rule
    # must win, so it goes first)
    h.script(
        Rule("healthy", Say(HEALTHY)),
        Bystander.RULE,
        *[Rule(f.tag, steps(h, f)) for f in FAULTS],
    )
    cells = Cells(h, "B")
    async with h.server(nursery) as srv:
        await srv.initialize()
        bystander = Bystander(h, srv)
        await bystander.open()
        tid = await h.thread(srv)
        for fault in faults:
            async with cells.cell(fault.name):
                collector = Collector(srv)
                await bystander.start(collector)
                turn = await collector.start(tid, h.prompt(fault.tag))
                results = await collector.finish(timeout=150)
                bystander.check(results)
                result = results[turn]
                if fault.name == FCUT and h.name in CUT_COMPLETES:
                    assert result.status == "completed", result.turn
                    final = result.turn["items"][-1]["text"]
                    if h.backend == "claude":  # its last retry may be cut before any text
                        assert PARTIAL.startswith(final), final
                    else:
                        assert final and PARTIAL.startswith(final), final
                    cells.outcome = f"doc: {CUT_COMPLETES[h.name]}"
                    healthy = await run_turn(srv, tid, h.prompt("healthy"))
                    assert healthy.status == "completed", healthy.error or healthy.turn
                    continue
                assert result.status == "failed", result.turn
                message = result.error
                assert message and "Traceback" not in message, message
                assert "internal error" not in message, message
                error = result.turn["error"]
                # announced once more as the final `error` notification
                finals = [
                    e
                    for e in result.events
                    if e.get("method") == "error" and not e["params"]["willRetry"]
                ]
                assert [e["params"]["error"] for e in finals] == [error], finals
                info = INFO.get((h.name, fault.name), fault.info)
                if info is not None and h.has_cli:
                    assert error["codexErrorInfo"] == info, error
                if fault.name == F401 and h.has_cli:
                    # says what to do, once, and names the URL the credentials were sent to
                    fix = SPECS[h.backend].login_fix
                    assert fix is not None and message.count(fix) == 1, message
                    assert "HTTP 401 from http://127.0.0.1:" in message, message
                # the error is not shown as if the model had said it
                assert result.text in ("", PARTIAL[: len(result.text)]), result.text
                cells.outcome = f"failed: {message[:70]}"
                if not h.has_cli:
                    cells.outcome = (
                        "doc: no model API: the mock's /fail stands in (" + message + ")"
                    )
                healthy = await run_turn(srv, tid, h.prompt("healthy"))
                assert healthy.status == "completed", healthy.error or healthy.turn
                assert healthy.text == HEALTHY, healthy.text
    left = await h.wait_no_leftovers(2)
    assert left == [], left
    cells.check()
