"""Fixtures of the protocol fuzz suite, and its summary line (inputs sent, rate, RSS)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import FuzzSession, summary_lines


@pytest.fixture
def fuzz_session(tmp_path: Path) -> Iterator[Callable[..., FuzzSession]]:
    """Start a FuzzSession (one threadline process) for this test; closed at teardown."""
    sessions: list[FuzzSession] = []

    def start(**kwargs: Any) -> FuzzSession:
        n = len(sessions)
        home = tmp_path / f"home{n}"
        work = tmp_path / f"work{n}"
        home.mkdir()
        work.mkdir()
        session = FuzzSession(home, work, **kwargs)
        sessions.append(session)
        return session.start()

    yield start
    errors = []
    for session in sessions:
        try:
            session.close()
        except BaseException as exc:  # reported below, after every session is closed
            errors.append(exc)
    if errors:
        raise errors[0]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = summary_lines()
    if lines:
        terminalreporter.section("protocol fuzz")
        for line in lines:
            terminalreporter.write_line(line)
