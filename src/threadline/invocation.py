"""How the user runs threadline: the command that hints (`continue it with: …`) should name."""

from __future__ import annotations

import os
import shlex
import shutil
import sys

__all__ = ["command_name"]


def _shown(path: str) -> str:
    """`path` relative to the working directory when it lies below it, else as it is."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return relative if not relative.startswith("..") else absolute


def command_name(argv0: str | None = None) -> str:
    """`threadline` when that name on PATH runs this program; otherwise the path this process
    was started by (e.g. `.venv/bin/threadline`, or `python -m threadline`'s interpreter)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(argv0) == "__main__.py" or argv0 in ("-m", "-c", ""):
        return f"{shlex.quote(_shown(sys.executable))} -m threadline"
    if os.sep not in argv0:
        return argv0  # found on PATH by the shell
    on_path = shutil.which("threadline")
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(argv0):
        return "threadline"
    shown = _shown(argv0)
    if os.sep not in shown:
        shown = f".{os.sep}{shown}"  # a bare name would be looked up on PATH
    return shlex.quote(shown)
