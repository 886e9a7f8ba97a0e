"""The processes of an actor: its children (its threadline server), and waiting for some to be
gone. Linux /proc; elsewhere an actor reports no children and waits for nothing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["child_pids", "wait_gone"]


def wait_gone(pids: Sequence[int], timeout: float) -> bool:
    """Wait until none of `pids` runs (zombies count as gone); False on timeout."""
    deadline = time.monotonic() + timeout
    while any(_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def child_pids(pid: int) -> list[int]:
    """The direct children of `pid` (Linux /proc; empty elsewhere)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(set(found))
