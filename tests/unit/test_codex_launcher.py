"""`native_binary`: the Codex backend runs the native binary behind the npm launcher."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from threadline.backends.codex.invocation import _NPM_TARGETS, native_binary

TARGET = _NPM_TARGETS.get((sys.platform, platform.machine().lower()))


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(TARGET is None, reason="no npm package for this platform")
@pytest.mark.parametrize("layout", ["sibling", "nested", "vendor"])
def test_npm_launcher_resolves_to_the_native_binary(tmp_path: Path, layout: str) -> None:
    assert TARGET is not None
    triple, package = TARGET
    modules = tmp_path / "node_modules"
    root = modules / "@openai" / "codex"
    launcher = executable(root / "bin" / "codex.js")
    bin_link = modules / ".bin" / "codex"
    bin_link.parent.mkdir(parents=True)
    bin_link.symlink_to(os.path.relpath(launcher, bin_link.parent))
    tail = Path("vendor") / triple / "bin" / "codex"
    base = {
        "sibling": modules / "@openai" / package,
        "nested": root / "node_modules" / "@openai" / package,
        "vendor": root,
    }[layout]
    native = executable(base / tail)
    binary, env = native_binary(str(bin_link))
    assert binary == str(native)
    assert env == {"CODEX_MANAGED_BY_NPM": "1", "CODEX_MANAGED_PACKAGE_ROOT": str(root)}


def test_anything_else_is_run_as_given(tmp_path: Path) -> None:
    plain = executable(tmp_path / "codex")
    assert native_binary(str(plain)) == (str(plain), {})
    # a launcher whose platform package is missing: the launcher itself
    launcher = executable(tmp_path / "pkg" / "bin" / "codex.js")
    assert native_binary(str(launcher)) == (str(launcher), {})
