"""The developer's scripts: what scripts/function-length reports and how it exits; which tests
scripts/test-unit leaves out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "function-length"
TEST_UNIT = ROOT / "scripts" / "test-unit"

#: Tests asking for a real CLI in each way scripts/pytest_no_agent_cli.py knows, two that do not.
TESTS = """
import pytest

@pytest.fixture
def claude():
    return "claude"

@pytest.fixture
def gemini_env():
    return "env"

@pytest.fixture(params=["pinned-clis", "no-clis"])
def cli_env(request):
    return request.param

def test_plain():
    pass

def test_claude(claude):
    pass

def test_gemini(gemini_env):
    pass

def test_environments(cli_env):
    pass
"""


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=30
    )


def body(lines: int) -> str:
    """A function body of `lines` lines (the def line is one more)."""
    return "".join(f"    x{i} = {i}\n" for i in range(lines))


def test_reports_each_function_over_the_limit_longest_first(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("def short():\n" + body(3) + "\n\nasync def long():\n" + body(5))
    (package / "sub" / "b.py").write_text(
        "class C:\n    def method(self):\n" + body(6).replace("    ", "        ")
    )
    result = run("--max", "4", package)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{package / 'sub' / 'b.py'}:2: C.method is 7 lines (limit 4)",
        f"{package / 'a.py'}:7: long is 6 lines (limit 4)",
    ]
    assert "2 function(s) over 4 lines" in result.stderr


def test_a_function_counts_its_nested_functions_and_each_is_checked(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def outer():\n    def inner():\n" + body(4).replace("    ", "        "))
    result = run("--max", "5", source)
    assert result.stdout.splitlines() == [f"{source}:1: outer is 6 lines (limit 5)"]
    assert run("--max", "4", source).stdout.splitlines() == [
        f"{source}:1: outer is 6 lines (limit 4)",
        f"{source}:2: outer.inner is 5 lines (limit 4)",
    ]


def test_exits_0_when_all_fit(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("def f():\n" + body(80) + "\n\ndef g():\n    pass\n")
    result = run("--max", "81", source)
    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "no function over 81 lines (2 functions)\n",
        "",
    )
    assert run(source).returncode == 1  # 81 lines: over the default limit of 80


def test_test_unit_leaves_out_the_tests_that_run_an_agent_cli(tmp_path: Path) -> None:
    (tmp_path / "test_mixed.py").write_text(TESTS)
    result = subprocess.run(
        [str(TEST_UNIT), "-v", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ran = sorted(
        line.split("::")[1].split()[0] for line in result.stdout.splitlines() if " PASSED" in line
    )
    assert ran == ["test_environments[no-clis]", "test_plain"]
    assert "left out 3 tests that run a real agent CLI" in result.stdout
