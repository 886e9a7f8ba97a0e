"""`pytest -m <backend>` selects the tests that drive that backend (tests/support/markers.py):
its e2e tests, its fault-matrix cells and the unit tests of its code, nothing of the others."""

from __future__ import annotations

import subprocess
import sys

from tests.support.tools import ROOT

MODULES = [
    "tests/e2e/test_gemini.py",
    "tests/e2e/test_claude.py",
    "tests/matrix/test_prompts.py",
    "tests/unit/test_acp_mapping.py",
    "tests/unit/test_claude_mapping.py",
]


def selected(expression: str) -> list[str]:
    collect = ["--collect-only", "-q", "-p", "no:cacheprovider", "-m", expression]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *collect, *MODULES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


def test_a_marker_per_backend_selects_its_tests() -> None:
    gemini = selected("gemini")
    modules = {line.split("::")[0] for line in gemini}
    assert modules == {
        "tests/e2e/test_gemini.py",
        "tests/matrix/test_prompts.py",
        "tests/unit/test_acp_mapping.py",  # imports threadline.backends.gemini
    }, gemini
    cells = [line for line in gemini if "test_prompts" in line]
    assert cells and all("[gemini-" in line for line in cells), cells  # both gemini modes
    assert any("[gemini-headless-" in line for line in cells), cells
    claude = selected("claude and not slow")
    assert {line.split("::")[0] for line in claude} == {
        "tests/e2e/test_claude.py",
        "tests/matrix/test_prompts.py",
        "tests/unit/test_claude_mapping.py",
    }, claude
    assert not set(claude) & set(gemini)
    # a test module named after the generic acp backend; gemini's `acp` mode is not that backend
    acp = selected("acp")
    assert {line.split("::")[0] for line in acp} == {"tests/unit/test_acp_mapping.py"}, acp
