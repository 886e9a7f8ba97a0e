"""`threadline run`: a terminal client built on `threadline.client`."""

from .run import RunOptions, run_main

__all__ = ["RunOptions", "run_main"]
