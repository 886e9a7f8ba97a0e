from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.markers import mark_backends, register_markers


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A marker per backend on every test that drives it (`pytest -m claude`)."""
    mark_backends(items)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many messages the e2e tests checked against Codex's own generated schema
    (tests/support/codex_conformance.py); per method with -v."""
    from tests.support import codex_conformance as conformance

    if not conformance.used():
        return  # no test server was started in this session
    checker = conformance.session_checker()
    if checker is None:
        terminalreporter.write_line(
            f"Codex conformance: not checked: {conformance.unavailable_reason()}"
        )
        return
    by_kind: dict[str, int] = {}
    for (kind, _method), n in checker.counts.items():
        by_kind[kind] = by_kind.get(kind, 0) + n
    checked = sum(n for kind, n in by_kind.items() if kind != "skipped")
    detail = ", ".join(f"{kind} {n}" for kind, n in sorted(by_kind.items()))
    terminalreporter.write_line(
        f"Codex {checker.version} conformance: {checked} messages checked against its "
        f"generated schema ({detail or 'none'})"
    )
    if terminalreporter.config.option.verbose > 0:
        for (kind, method), n in sorted(checker.counts.items()):
            terminalreporter.write_line(f"  {kind:13} {method:45} {n}")
