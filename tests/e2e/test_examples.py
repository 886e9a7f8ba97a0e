"""The examples in examples/ run as documented."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client import ROOT

pytestmark = pytest.mark.e2e


def test_orchestrate_routes_approvals_by_policy(tmp_path: Path, home: Path) -> None:
    work = tmp_path / "project"
    (work / "important").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "orchestrate.py"), "--cwd", str(work)],
        capture_output=True,
        text=True,
        env={**os.environ, "THREADLINE_HOME": str(home)},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(maxsplit=1) for line in done.stdout.splitlines())
    assert lines == {
        "greeter": "completed: Hello from the greeter.",
        "lister": "completed: Listed.",
        "risky": "completed: Tried to delete.",
    }
    assert (work / "listing.txt").read_text() == "listing\n"  # allowed command ran
    assert (work / "important").is_dir()  # declined command did not
