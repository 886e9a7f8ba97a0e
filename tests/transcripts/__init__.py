"""Recorded output of the real CLIs (scripts/record-transcripts; README.md here)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["HERE", "transcript"]

HERE = Path(__file__).resolve().parent


def transcript(cli: str, name: str) -> Path:
    """The recording `name` of `cli` (``tests/transcripts/<cli>/<name>``)."""
    path = HERE / cli / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run scripts/record-transcripts {cli}")
    return path
