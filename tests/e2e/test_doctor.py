"""`threadline doctor`: one line per backend, and a non-zero exit when the selected backend is
unusable. Runs against the pinned CLIs that scripts/install-clis puts in .tools/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client import ROOT

pytestmark = pytest.mark.e2e

TOOLS = ROOT / ".tools" / "node_modules" / ".bin"
PINNED = {"claude": "2.1.197", "codex": "0.169.0", "gemini": "0.61.0", "opencode": "1.18.33"}


def doctor(path: str, backend: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": path,
        "HOME": str(tmp),  # no credentials from the real home
        "THREADLINE_HOME": str(tmp / "state"),
        "AGENT_BACKEND": backend,
    }
    return subprocess.run(
        [sys.executable, "-m", "threadline", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


def lines_by_backend(stdout: str) -> dict[str, str]:
    return {line.split()[1]: line for line in stdout.splitlines()}


def test_all_pinned_clis_found_with_versions_modes_and_capabilities(tmp_path: Path) -> None:
    if not TOOLS.is_dir():
        if os.environ.get("CI"):
            pytest.fail("the pinned CLIs are not installed (scripts/install-clis)")
        pytest.skip("the pinned CLIs are not installed (scripts/install-clis)")
    path = os.pathsep.join([str(TOOLS), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    done = doctor(path, "claude", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_by_backend(done.stdout)
    assert set(lines) == {*PINNED, "mock"}
    for backend, version in PINNED.items():
        line = lines[backend]
        assert line.startswith("ok "), line
        assert f"version={version}" in line and "path=/" in line, line
        assert "[approvals,interrupt,resume]" in line, line  # the default mode
        assert "credentials:" in line, line
    assert "stream*[approvals,interrupt,resume] print[resume]" in lines["claude"]
    assert "app-server*" in lines["codex"] and "exec[" in lines["codex"]
    assert lines["mock"].startswith("ok ")


def test_missing_selected_backend_exits_non_zero(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done = doctor(str(empty), "gemini", tmp_path)
    assert done.returncode == 1
    lines = lines_by_backend(done.stdout)
    assert lines["gemini"].startswith("-- ") and "not found" in lines["gemini"]
    assert "AGENT_BACKEND=gemini is not usable here" in done.stderr
    # the offline mock is always usable
    assert doctor(str(empty), "mock", tmp_path).returncode == 0
