"""Where the agent CLIs that the tests and benchmarks run are installed, and at which versions.

`TOOLS_DIR` is `$THREADLINE_TOOLS_DIR` (relative to the checkout unless absolute), default
`.tools`: the npm prefix `scripts/install-clis` fills with the catalog's pinned versions;
`scripts/test-latest` points it at `.tools-latest`, which holds the newest releases.

`python -m tests.support.tools` prints one `cli npm-package pinned-version` line per CLI
installed from npm: the pins `scripts/install-clis` reads, whose one source of truth is
`threadline.backends.registry` (the only import: benchmarks use this module too).

`find_cli(name)` is where every test and benchmark looks a CLI up: `TOOLS_BIN`, then PATH."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from threadline.backends.registry import SPECS

__all__ = ["ROOT", "TOOLS_BIN", "TOOLS_DIR", "cli_versions", "find_cli", "pins"]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOOLS_DIR = ".tools"
TOOLS_DIR = ROOT / (os.environ.get("THREADLINE_TOOLS_DIR") or DEFAULT_TOOLS_DIR)
TOOLS_BIN = TOOLS_DIR / "node_modules" / ".bin"


def find_cli(name: str) -> Path | None:
    """The CLI `name` installed under `TOOLS_DIR` (scripts/install-clis), else on PATH."""
    local = TOOLS_BIN / name
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(name)
    return Path(found) if found else None


def pins() -> list[tuple[str, str, str]]:
    """(cli, npm package, pinned version) of every CLI installed from npm, in catalog order."""
    return [
        (spec.cli, spec.npm_package, spec.pinned_version)
        for spec in SPECS.values()
        if spec.cli and spec.npm_package and spec.pinned_version
    ]


def cli_versions() -> dict[str, str]:
    """The version each CLI in `TOOLS_DIR` must report: the pin in the default directory;
    in another one (the newest releases), the version npm installed there."""
    if TOOLS_DIR == ROOT / DEFAULT_TOOLS_DIR:
        return {cli: version for cli, _, version in pins()}
    found = {}
    for cli, package, _ in pins():
        manifest = TOOLS_DIR / "node_modules" / package / "package.json"
        found[cli] = str(json.loads(manifest.read_text())["version"])
    return found


if __name__ == "__main__":
    for row in pins():
        print(*row)
