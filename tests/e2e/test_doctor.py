"""`threadline doctor`: one line per backend, and a non-zero exit when the selected backend is
unusable. Runs against the CLIs in tests.support.tools.TOOLS_DIR: the pinned ones that
scripts/install-clis puts in .tools/, or the newest (scripts/test-latest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.client import ROOT
from tests.support.tools import TOOLS_BIN, cli_versions
from threadline.backends.registry import SPECS

pytestmark = pytest.mark.e2e


def doctor(
    path: str, backend: str | None, tmp: Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": path,
        "HOME": str(tmp),  # no credentials from the real home
        "THREADLINE_HOME": str(tmp / "state"),
        **({"AGENT_BACKEND": backend} if backend else {}),
        **extra,
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
    """Each backend's line, with the indented detail lines under it."""
    lines: dict[str, str] = {}
    backend = None
    for line in stdout.splitlines():
        if line[:3] in ("ok ", "-- ", "!! "):
            backend = line.split()[1]
            lines[backend] = line
        elif line.startswith("  ") and backend is not None:
            lines[backend] += "\n" + line.strip()
        else:
            backend = None
    return lines


def test_all_pinned_clis_found_with_versions_modes_and_capabilities(tmp_path: Path) -> None:
    if not TOOLS_BIN.is_dir():
        if os.environ.get("CI"):
            pytest.fail("the pinned CLIs are not installed (scripts/install-clis)")
        pytest.skip("the pinned CLIs are not installed (scripts/install-clis)")
    versions = cli_versions()
    path = os.pathsep.join([str(TOOLS_BIN), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    done = doctor(path, "claude", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_by_backend(done.stdout)
    assert set(lines) == set(SPECS)
    for backend, version in versions.items():
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


def test_a_fresh_machine_gets_install_commands_and_a_mock_to_try(tmp_path: Path) -> None:
    """No CLI, no AGENT_BACKEND: doctor succeeds (the mock works) and says how to install
    each CLI, naming its npm package at the pinned version."""
    empty = tmp_path / "bin"
    empty.mkdir()
    done = doctor(str(empty), None, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = lines_by_backend(done.stdout)
    for spec in SPECS.values():
        if spec.cli is None:
            assert lines[spec.id].startswith("ok "), lines[spec.id]
            continue
        line = lines[spec.id]
        assert line.startswith("-- ") and "not found" in line, line
        assert f"`npm install -g {spec.npm_package}@{spec.pinned_version}`" in line, line
    summary = done.stdout.strip().splitlines()[-1]
    assert f"1 of {len(SPECS)} backends usable here (mock)" in summary, summary
    # the command to try is the one this doctor was started by (here, from the checkout)
    python = os.path.relpath(sys.executable, ROOT)
    python = sys.executable if python.startswith("..") else python
    assert f"Try one: {python} -m threadline run --backend mock" in summary, summary


def test_missing_credentials_name_the_variable_or_login_command(tmp_path: Path) -> None:
    if not TOOLS_BIN.is_dir():
        pytest.skip("the pinned CLIs are not installed (scripts/install-clis)")
    path = os.pathsep.join([str(TOOLS_BIN), os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    done = doctor(path, None, tmp_path)
    lines = lines_by_backend(done.stdout)
    assert (
        "credentials: none found: set ANTHROPIC_API_KEY, or run `claude login`" in (lines["claude"])
    )
    assert (
        "credentials: none found: run `codex login` (or `printenv OPENAI_API_KEY | codex"
        in (lines["codex"])
    )
    assert "set GEMINI_API_KEY" in lines["gemini"]
    assert "`opencode auth login`" in lines["opencode"]
    # a key in the environment, or a login file in the CLI's home, counts (never its value)
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "auth.json").write_text("{}")
    done = doctor(path, None, tmp_path, ANTHROPIC_API_KEY="sk-secret-value")
    lines = lines_by_backend(done.stdout)
    assert "credentials: ANTHROPIC_API_KEY set" in lines["claude"]
    assert "credentials: logged in (~/.codex/auth.json)" in lines["codex"]
    assert "sk-secret-value" not in done.stdout + done.stderr
    # with credentials, the suggested first run is a real agent
    assert "Try one:" in done.stdout and "run --backend claude" in done.stdout


def test_an_outdated_cli_is_reported(tmp_path: Path) -> None:
    """A CLI older than the oldest version the tests passed on is usable but flagged, with
    the upgrade command."""
    old = tmp_path / "claude"
    old.write_text("#!/bin/sh\necho '1.0.0 (Claude Code)'\n")
    old.chmod(0o755)
    done = doctor(str(tmp_path), "claude", tmp_path, BACKEND_CLI_PATH=str(old))
    assert done.returncode == 0, done.stdout + done.stderr
    line = lines_by_backend(done.stdout)["claude"]
    spec = SPECS["claude"]
    assert line.startswith("!! ") and "version=1.0.0" in line, line
    assert f"older than the oldest version threadline is tested with ({spec.oldest_tested})" in line
    assert f"`npm install -g {spec.npm_package}@{spec.pinned_version}`" in line


def test_tmux_for_the_tui_mode_is_reported(tmp_path: Path) -> None:
    """The tui mode needs tmux: doctor says where it is, or how to install it."""
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (scripts/install-clis installs it)")
    path = os.pathsep.join([os.path.dirname(tmux), os.path.dirname(sys.executable)])
    done = doctor(path, None, tmp_path)
    [line] = [x for x in done.stdout.splitlines() if "tmux:" in x]
    assert line.startswith(f"tmux: {tmux} (tmux "), line
    assert "claude" in line and "codex" in line, line
    empty = tmp_path / "bin"
    empty.mkdir()
    done = doctor(str(empty), None, tmp_path)
    [line] = [x for x in done.stdout.splitlines() if "tmux:" in x]
    assert line.startswith("tmux: not found") and "apt-get install tmux" in line, line
