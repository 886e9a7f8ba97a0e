"""The scripted ACP agent tests/unit/fake_acp_agent.py as tests drive it: its launcher,
journal and release files (see the agent's docstring for its scripts and journal lines)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["AGENT", "Agent", "agent"]

AGENT = Path(__file__).resolve().parents[1] / "unit" / "fake_acp_agent.py"


class Agent:
    """The fake agent's directory: its launcher, journal and release files."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "agent"
        self.dir.mkdir()
        self.work = root / "work"
        self.work.mkdir()
        self.launcher = self.dir / "gemini"
        self.launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{AGENT}" "$@"\n')
        self.launcher.chmod(0o755)

    def journal(self, name: str = "journal") -> list[list[str]]:
        """What the agent did (`facts`: what it was given), as [kind, arg, rest] lines."""
        path = self.dir / name
        if not path.exists():
            return []
        return [line.split(" ", 2) for line in path.read_text().splitlines()]

    def pids(self) -> list[str]:
        return [entry[1] for entry in self.journal() if entry[0] == "start"]

    def prompts(self, text: str) -> list[list[str]]:
        return [e for e in self.journal() if e[0] == "prompt" and e[2] == text]

    def release(self, tag: str) -> None:
        (self.dir / f"release-{tag}").touch()


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    a = Agent(tmp_path)
    monkeypatch.setenv("FAKE_ACP_DIR", str(a.dir))
    yield a
