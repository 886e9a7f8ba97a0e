"""E. Prompts reach the model verbatim and never through a shell: a prompt that starts with
`-` / `--help`, one with newlines, one with a NUL, one full of shell metacharacters, and 1 MB
of text. The fake model server records what the CLI sent; `EXPECTED` documents, per backend,
the only changes a CLI itself makes (the identity everywhere else). No `pwned` file may appear,
the decoy file `x` must survive and no `y` may be written.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import trio

from tests.matrix.harness import (
    ALL_NAMES,
    BACKENDS,
    Bystander,
    Cells,
    Collector,
    Harness,
    Rule,
    Say,
    chosen,
    matrix_params,
    run_turn,
)
from tests.support.client import ROOT

ANSWER = "Received your prompt."
PROMPTS = {
    "starts with --help": "--help",
    "starts with -": "-n -p --version: is this a flag?",
    "newlines": "line one\nline two\n\n  indented line four\n",
    "NUL": "before\u0000after",
    "shell metacharacters": "$(touch pwned) ; rm -rf x && `echo hi` | cat > y",
    "1 MB": "0123456789abcdef" * 65536,
}
ALL = list(PROMPTS)
DEFAULT = {name: ALL for name in BACKENDS} | {
    "claude-print": ["starts with --help", "NUL", "1 MB"],
    "codex-exec": ALL,
}


def identity(prompt: str) -> str:
    return prompt


#: (backend name, prompt) → what the model receives, where the CLI changes it.
EXPECTED: dict[tuple[str, str], Callable[[str], str]] = {}
#: (backend name, prompt) → a failure the CLI itself sometimes produces (seen, not explained):
#: tolerated as long as it is readable and the thread's next turn is healthy.
FLAKY = {
    ("gemini-headless", "1 MB"): "gemini exited (exit code 0) without a result",
}


def expected(h: Harness, name: str) -> str:
    prompt = PROMPTS[name]
    if not h.has_cli:
        # the mock has no model: its answer echoes the prompt, stripped
        return f"mock reply: {prompt.strip()}"
    return EXPECTED.get((h.name, name), identity)(prompt)


def pwned(h: Harness) -> list[str]:
    """Files a shell running the prompt would have made: in the test's dirs (work dirs, the
    CLI's home) or in threadline's cwd. (Not a walk of the whole checkout: it blocks the
    test's event loop for seconds, the client stops reading, and the backpressure reaches
    the CLI.)"""
    # os.walk, not Path.rglob: a CLI running meanwhile creates and removes lock directories
    # (claude's `.claude.json.lock`), and rglob fails on one that vanishes mid-walk.
    found = [
        os.path.join(top, name)
        for top, _dirs, files in os.walk(h.tmp)
        for name in files
        if name in ("pwned", "y")
    ]
    found += [os.path.join(top, "pwned") for top, dirs, _ in os.walk(h.tmp) if "pwned" in dirs]
    found += [str(p) for p in (ROOT / "pwned", ROOT / "y") if p.exists()]
    return found


@matrix_params(DEFAULT, ALL_NAMES)
async def test_prompts_verbatim(nursery: trio.Nursery, backend: Harness, part: str) -> None:
    h = backend
    names = [n for n in PROMPTS if chosen(part, h.name, DEFAULT, n)]
    if not names:
        pytest.skip("nothing left for this part")
    h.script(Bystander.RULE, Rule("", Say(ANSWER)))
    decoy = h.work / "x"
    decoy.write_text("must survive")
    cells = Cells(h, "E")
    async with h.server(nursery) as srv:
        await srv.initialize()
        bystander = Bystander(h, srv)
        await bystander.open()
        tid = await h.thread(srv)
        for name in names:
            async with cells.cell(f"prompt {name}"):
                before = h.calls()
                collector = Collector(srv)
                await bystander.start(collector)
                turn = await collector.start(tid, PROMPTS[name])
                results = await collector.finish(timeout=120)
                bystander.check(results)
                result = results[turn]
                flaky = FLAKY.get((h.name, name))
                if flaky is not None and result.status == "failed" and flaky in result.error:
                    # gemini 0.61.0 headless, 1 MB on stdin, under load (3 of ~8 full runs;
                    # never alone): the CLI exits 0 before its result. Readable; the thread
                    # must go on.
                    again = await run_turn(srv, tid, "after the 1 MB prompt")
                    assert again.status == "completed", again.error or again.turn
                    cells.outcome = f"doc: flaky CLI failure, readable: {result.error[:60]}"
                    continue
                assert result.status == "completed", result.error or result.turn
                want = expected(h, name)
                if h.has_cli:
                    assert result.text == ANSWER, result.text
                    got = h.user_texts(after=before)
                    assert want in got, describe(want, got)
                else:
                    assert result.text == want, describe(want, [result.text])
                assert pwned(h) == [], pwned(h)
                assert decoy.read_text() == "must survive"
                if want != PROMPTS[name]:
                    cells.outcome = "doc: as documented in EXPECTED"
    cells.check()


def describe(want: str, got: list[str]) -> str:
    """Why `want` is not among the recorded texts: the closest one, and where it differs."""
    if not got:
        return "the model received no text"
    best = max(got, key=lambda g: _common_prefix(g, want))
    n = _common_prefix(best, want)
    return (
        f"not verbatim: {len(got)} texts; closest has len {len(best)} (want {len(want)}), "
        f"first difference at {n}: got {best[max(0, n - 20) : n + 40]!r}, "
        f"want {want[max(0, n - 20) : n + 40]!r}"
    )


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
