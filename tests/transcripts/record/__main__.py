"""`python -m tests.transcripts.record [claude|codex|gemini ...] [--out DIR]`."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from .core import CliRecorder, record_cli

CLIS = ("claude", "codex", "gemini")
DEFAULT_OUT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/record-transcripts",
        description="Record the pinned CLIs against the fake model servers into tests/transcripts.",
    )
    parser.add_argument("clis", nargs="*", metavar="CLI", help=f"{' | '.join(CLIS)} (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="default: tests/transcripts")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.clis) - set(CLIS))
    if unknown:
        parser.error(f"unknown CLI {', '.join(unknown)} (choose from {', '.join(CLIS)})")
    total = time.monotonic()
    for cli in args.clis or CLIS:
        started = time.monotonic()
        recorder: CliRecorder = importlib.import_module(f"{__package__}.{cli}").RECORDER
        written = record_cli(recorder, args.out)
        size = sum(p.stat().st_size for p in written)
        print(
            f"{cli}: {len(written)} files, {size / 1024:.0f} KB, {time.monotonic() - started:.1f} s"
        )
    print(f"recorded in {time.monotonic() - total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
