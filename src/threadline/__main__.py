"""`python -m threadline` and the `threadline` console script."""

from __future__ import annotations

import sys

from .cli import main as _main

__all__ = ["main"]


def main() -> None:
    sys.exit(_main())


if __name__ == "__main__":
    main()
