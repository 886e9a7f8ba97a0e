"""The unified diff a file change item shows."""

from __future__ import annotations

import difflib

__all__ = ["file_diff"]


def file_diff(name: str, old: str | None, new: str) -> str:
    """`old` → `new` as a unified diff headed `a/<name>` and `b/<name>`; from `/dev/null`
    when `old` is None (a new file)."""
    return "".join(
        difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile="/dev/null" if old is None else f"a/{name}",
            tofile=f"b/{name}",
        )
    )
