"""The `backend` fixture of the fault matrix: one `Harness` per backend (and per-turn mode),
built on the e2e fixtures, which start the fake model server, scrub the environment, skip a
missing CLI (fail under CI) and check the orphan rule after the test.

A test runs over `DEFAULT` unless it parametrizes `backend_name` itself (the category tests
do, with `harness.matrix_params`: a default part and a `slow` part per backend). The outcome
each cell records with `harness.record()` is printed as a matrix at the end of the session
(faults x backends)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.claude_env import claude_bin, claude_env, cmdline
from tests.e2e.codex_env import codex_bin, codex_env
from tests.e2e.gemini_env import gemini_bin, gemini_env
from tests.e2e.opencode_env import opencode_bin, opencode_env
from tests.e2e.qwen_env import qwen_bin, qwen_env
from tests.matrix.harness import RESULTS, Harness, MockEnv, make_harness

__all__ = [
    "claude_bin",
    "claude_env",
    "codex_bin",
    "codex_env",
    "gemini_bin",
    "gemini_env",
    "opencode_bin",
    "opencode_env",
    "qwen_bin",
    "qwen_env",
]

DEFAULT = ["claude", "codex", "gemini", "opencode", "qwen", "mock"]


@pytest.fixture(params=DEFAULT)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def _backend_env(backend_name: str, request: pytest.FixtureRequest) -> Any:
    """The e2e fixture of the backend (resolved by pytest-trio), or None for the mock."""
    base = backend_name.partition("-")[0]
    if base == "mock":
        return None
    return request.getfixturevalue(f"{base}_env")


@pytest.fixture
async def backend(backend_name: str, _backend_env: Any, tmp_path: Path) -> AsyncIterator[Harness]:
    if _backend_env is not None:
        yield make_harness(backend_name, _backend_env, tmp_path)
        return
    env = MockEnv(tmp=tmp_path, home=tmp_path / "home", work=tmp_path / "work")
    env.home.mkdir()
    env.work.mkdir()
    harness = make_harness(backend_name, env, tmp_path)
    yield harness
    left = await harness.wait_no_leftovers(5)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {[(p, cmdline(p)[:3]) for p in left]}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The matrix of this run: `ok` (the generic assertions held: a readable failure, or the
    CLI's noise ignored), `doc` (the backend's documented behaviour held instead), `FAIL`,
    `-` (not run). With -v, what the user saw in each cell."""
    if not RESULTS:
        return
    names = sorted({n for row in RESULTS.values() for n in row}, key=_order)
    write = terminalreporter.write_line
    width = max(len(f"{c}: {f}") for c, f in RESULTS)
    cols = [max(len(n), 4) for n in names]
    write("")
    write("fault matrix (ok: readable failure or noise ignored; doc: documented behaviour)")
    write(" " * width + " | " + " | ".join(n.ljust(w) for n, w in zip(names, cols, strict=True)))
    for (category, fault), row in sorted(RESULTS.items()):
        cells = [_code(row.get(n)).ljust(w) for n, w in zip(names, cols, strict=True)]
        write(f"{category}: {fault}".ljust(width) + " | " + " | ".join(cells))
    if terminalreporter.config.option.verbose > 0:
        for (category, fault), row in sorted(RESULTS.items()):
            for name in names:
                if name in row:
                    write(f"  {category}: {fault} [{name}]: {row[name]}")


def _code(outcome: str | None) -> str:
    if outcome is None:
        return "-"
    if outcome == "FAIL":
        return "FAIL"
    return "doc" if outcome.startswith("doc") else "ok"


def _order(name: str) -> tuple[int, str]:
    base = name.partition("-")[0]
    order = ["claude", "codex", "gemini", "opencode", "qwen", "mock"]
    return (order.index(base) if base in order else 99, name)
