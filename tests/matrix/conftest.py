"""The `backend` fixture of the fault matrix: one `Harness` per backend (and per-turn mode),
built on the e2e fixtures, which start the fake model server, scrub the environment, skip a
missing CLI (fail under CI) and check the orphan rule after the test.

A test runs over `harness.BACKENDS` unless it parametrizes `backend_name` itself (the category
tests do, with `harness.matrix_params`: a default part and a `slow` part per backend). The outcome
each cell records with `harness.record()` is printed as a matrix at the end of the session
(faults x backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.matrix.harness import BACKENDS, RESULTS, Harness, MockEnv, make_harness
from tests.support.cli_env import env_fixtures
from threadline.backends.registry import BACKEND_IDS, SPECS

# Every CLI's `<id>_bin` and `<id>_env` fixture (tests/e2e/<id>_env.py).
globals().update(env_fixtures())


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def _backend_env(backend_name: str, request: pytest.FixtureRequest) -> Any:
    """The e2e fixture of the backend (resolved by pytest-trio), or None for the mock."""
    base = backend_name.partition("-")[0]
    if SPECS[base].cli is None:
        return None
    return request.getfixturevalue(f"{base}_env")


@pytest.fixture
async def backend(backend_name: str, _backend_env: Any, tmp_path: Path) -> AsyncIterator[Harness]:
    if _backend_env is not None:
        yield make_harness(backend_name, _backend_env, tmp_path)
        return
    env = MockEnv(tmp=tmp_path)
    yield make_harness(backend_name, env, tmp_path)
    await env.check_orphans()


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
    return (BACKEND_IDS.index(base) if base in BACKEND_IDS else 99, name)
