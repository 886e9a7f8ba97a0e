"""One local Ray cluster (2 CPUs) for the fleet tests of a session; shut down at the end, and
every process it started must then be gone."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def descendants(root: int) -> set[int]:
    """Every live process below `root` (from /proc's parent links)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def running(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster for the fleet tests, shut down (every process of it gone) before
    the rest of the suite runs: later tests check that nothing they did not start runs."""
    import ray

    before = descendants(os.getpid())
    # Ray >= 2.59 turns token authentication on for a local cluster and, without a token
    # given, generates one in ~/.ray/auth_token: the run's own token keeps it in the
    # environment (nothing outside the checkout is written or read).
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        started = descendants(os.getpid()) - before
        ray.shutdown()
        deadline = time.monotonic() + 20
        while running(started) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert started, "no Ray process was seen"
    left = running(started)
    assert not left, f"processes left after ray.shutdown(): {sorted(left)}"
