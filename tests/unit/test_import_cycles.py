"""scripts/import-cycles: finds import cycles in a package, `TYPE_CHECKING` imports included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import-cycles"
SRC = SCRIPT.parents[1] / "src" / "threadline"


def run(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(package)], capture_output=True, text=True, check=False
    )


def make_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


CYCLES = {
    "closed under TYPE_CHECKING": (
        {
            "service.py": "from .threads import Thread\n",
            "threads.py": (
                "from typing import TYPE_CHECKING\n"
                "from . import turns\n"
                "if TYPE_CHECKING:\n"
                "    from .service import Service\n"
            ),
            "turns.py": "",
        },
        "pkg.service -> pkg.threads -> pkg.service",
    ),
    "across subpackages, from inside a function": (
        {
            "a/__init__.py": "",
            "a/low.py": "def f() -> None:\n    from ..b import high\n",
            "b/__init__.py": "",
            "b/high.py": "from ..a.low import f\n",
        },
        "pkg.a.low -> pkg.b.high -> pkg.a.low",
    ),
    "a package's __init__ and a module reading it": (
        {"a/__init__.py": "from .low import f\nVALUE = 1\n", "a/low.py": "from . import VALUE\n"},
        "pkg.a -> pkg.a.low -> pkg.a",
    ),
}


@pytest.mark.parametrize("case", CYCLES)
def test_a_cycle_is_reported(tmp_path: Path, case: str) -> None:
    files, cycle = CYCLES[case]
    result = run(make_package(tmp_path, files))
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"import cycle: {cycle}"


def test_a_layered_package_passes(tmp_path: Path) -> None:
    package = make_package(
        tmp_path,
        {
            "service.py": "from .threads import Thread\nfrom .turns import Turn\n",
            "threads.py": "from .turns import Turn\nfrom .turn_host import Host\n",
            "turns.py": "from .turn_host import Host\n",
            "turn_host.py": "import os\n",
        },
    )
    result = run(package)
    assert result.returncode == 0, result.stdout
    assert "no import cycles among 5 modules" in result.stdout


def test_the_engine_is_in_no_cycle() -> None:
    result = run(SRC)
    assert "threadline.server" not in result.stdout, result.stdout
