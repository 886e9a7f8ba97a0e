"""P10: memory per idle thread with the real CLIs, before and after the idle policy releases
them, and the first turn after a release against a cold CLI resume.

For each real agent CLI (claude, gemini, codex, opencode), against the project's fake model
server (tests/fakes, 127.0.0.1 only), in the same run:
1. threadline (default idle policy: 10 min) opens T threads in one directory and runs one turn
   on each; the RSS of threadline's whole process tree (CLIs included) minus its RSS before
   the first thread, per thread: "live".
2. A new threadline on the same state with `THREADLINE_IDLE_TIMEOUT=1` resumes the T threads
   and waits until their CLIs are released (their processes gone); the growth per thread past
   the first (whose resume also loads the backend's code): "released" (goal <= 200 KB). A
   shared process (codex: one app-server per environment; gemini, opencode: one agent per
   directory) stops with the last of its threads the policy releases. The row's note
   extrapolates both to 100 threads (goal: <= 2 GB in all, CLIs included).
3. The first turn on a released thread (`turn/start` → first `item/agentMessage/delta`: the
   CLI is reopened on the thread's conversation) against the CLI spawned cold to resume the
   same kind of session (P2's cold commands), alternately; goal <= 1.1x.

Usage: python benchmarks/p10_memory.py [--quick] [--threads T] [--cli NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import Result, Threadline, cold_first_output, median_row, print_table
from p2_second_turn import CLIS, COLD_PROMPT, Setup

#: How long the released CLIs may take to exit.
RELEASE_WAIT = 30.0


def tree_rss_kb(pid: int) -> int:
    """The summed RSS of `pid` and all its descendants, in kB."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    parents[int(name)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, stack = {pid}, [pid]
    while stack:
        parent = stack.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in tree:
                tree.add(child)
                stack.append(child)
    total = 0
    for member in tree:
        try:
            with open(f"/proc/{member}/status") as fh:
                total += next((int(x.split()[1]) for x in fh if x.startswith("VmRSS:")), 0)
        except OSError:
            continue
    return total


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _server(s: Setup, **extra: str) -> Threadline:
    env = {**s.env, **s.threadline_env, "THREADLINE_HOME": str(s.state), **extra}
    tl = Threadline(env)
    tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
    return tl


def _live(s: Setup, count: int) -> tuple[list[str], float]:
    """Open `count` threads with a turn each; (their ids, kB per thread with its CLI live)."""
    tl = _server(s)
    try:
        time.sleep(0.3)
        before = tree_rss_kb(tl.proc.pid)
        tids = []
        for _ in range(count):
            tid = tl.call("thread/start", {"cwd": str(s.work), **s.thread_params})["thread"]["id"]
            tl.turn(tid, "first turn")
            tids.append(tid)
        time.sleep(0.5)
        return tids, (tree_rss_kb(tl.proc.pid) - before) / count
    finally:
        tl.close()


def _released(
    s: Setup, tids: list[str], spare: list[str]
) -> tuple[float, list[float], list[float]]:
    """Resume `tids` on a server that releases idle CLIs after 1 s; (kB per released thread
    past the first — whose resume also loads the backend's code —, first turns after a
    release, cold resumes)."""
    tl = _server(s, THREADLINE_IDLE_TIMEOUT="1")
    try:
        _resume_and_release(tl, tids[:1])
        before = tree_rss_kb(tl.proc.pid)
        _resume_and_release(tl, tids[1:])
        per = (tree_rss_kb(tl.proc.pid) - before) / max(len(tids) - 1, 1)
        warm: list[float] = []
        cold: list[float] = []
        for i in range(len(spare)):
            warm.append(tl.turn(tids[i], "after the release")[0])
            # A session this server never loaded: a loaded one has a writer (codex refuses a
            # second), and the cold CLI resumes a session nobody holds.
            sid = _session_id(s, spare[i])
            cold.append(cold_first_output(s.cold_argv(sid), s.env, s.work, COLD_PROMPT, s.is_first))
        return per, warm, cold
    finally:
        tl.close()


def _resume_and_release(tl: Threadline, tids: list[str]) -> None:
    """Resume `tids` and wait until the idle policy has stopped every CLI (a shared agent
    stops with the last thread it releases)."""
    for tid in tids:
        tl.call("thread/resume", {"threadId": tid})
    time.sleep(0.3)
    deadline = time.monotonic() + RELEASE_WAIT
    while _cli_count(tl.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)


def _cli_count(pid: int) -> int:
    return sum(1 for n in os.listdir("/proc") if n.isdigit() and _ppid(int(n)) == pid)


def _session_id(s: Setup, tid: str) -> str:
    record: dict[str, Any] = json.loads((s.state / "threads" / tid / "meta.json").read_text())
    return str(record["backend_session_id"])


def measure(name: str, count: int, runs: int) -> list[Result]:
    make, live_label, cold_label = CLIS[name]
    with tempfile.TemporaryDirectory(prefix=f"p10-{name}-") as tmp, make(Path(tmp)) as s:
        tids, live = _live(s, count + runs)
        tids, spare = tids[:count], tids[count:]
        if name == "gemini":
            # gemini cannot load a session saved in the same minute, and threadline waits for
            # the next one (docs/backends.md); a real release comes 10 minutes after the
            # thread's last turn, so the measure starts in the next minute too.
            time.sleep(61 - time.time() % 60)
        released, warm, cold = _released(s, tids, spare)
    return [
        Result(
            "P10",
            f"{name}: RSS per idle thread, CLI live ({live_label}) / released ({count} threads)",
            f"{live:,.0f} kB / {released:,.0f} kB",
            "-",
            None,
            "released <= 200 kB",
            released <= 200,
            f"100 threads would take {100 * live / 1024:,.0f} MB with their CLIs live,"
            f" {100 * released / 1024:,.1f} MB released (goal: <= 2 GB in all)",
        ),
        median_row(
            "P10",
            f"{name}: first turn/start → first delta after a release vs cold `{cold_label}`",
            warm,
            cold,
            1.1,
            note=f"min {min(warm) * 1000:.1f} / {min(cold) * 1000:.1f} ms; "
            f"spread {statistics.pstdev(warm) * 1000:.0f} ms",
        ),
    ]


def run(
    quick: bool = False, threads: int | None = None, clis: list[str] | None = None
) -> list[Result]:
    count = max(threads or (3 if quick else 10), 2)
    runs = min(count, 1 if quick else 5)
    results: list[Result] = []
    # Quick mode: claude (a process per thread: the idle policy's main case) and codex (one
    # shared app-server).
    for name in clis or (["claude", "codex"] if quick else list(CLIS)):
        results += measure(name, count, runs)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="3 threads, one run per CLI")
    parser.add_argument("--threads", type=int, default=None, help="threads per CLI (10)")
    parser.add_argument("--cli", action="append", choices=list(CLIS), help="only these CLIs")
    args = parser.parse_args()
    print_table(run(args.quick, args.threads, args.cli))


if __name__ == "__main__":
    main()
