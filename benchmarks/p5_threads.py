"""P5: 100 concurrent threads on one threadline process, and its memory per idle thread.

One `threadline` process (AGENT_BACKEND=mock: the in-process scripted agent, no CLI), one stdio
connection:
1. 100 threads are started, then one turn on each is started at once (all 100 `turn/start`
   requests written before any event is read). Every prompt is unique (`/text thread 017 ...
   <random token> ...`: the mock streams that text back word by word), so a lost, duplicated or
   misrouted event shows: each thread's `item/agentMessage/delta`s must concatenate to exactly
   its own prompt's text, its agentMessage `item/completed` must carry that text, every
   notification must carry the threadId/turnId of the thread and turn it belongs to, every
   `item/started` needs its `item/completed`, and every turn exactly one `turn/started` and one
   `turn/completed` (status completed). Row: problems found, of all events checked.
2. RSS per idle thread: threadline's RSS (/proc/<pid>/status VmRSS) once the 100 turns are over
   and the threads idle, then again after more threads (one finished turn each, run 100 at a
   time) bring the total to 1000 (400 in quick mode). The figure is the slope between the two,
   (RSS(1000) - RSS(100)) / 900, which leaves out start-up and the allocator's first growth;
   the note also gives (RSS(100) - RSS(before)) / 100. Goal: <= 200 KB per idle thread.

Usage: python benchmarks/p5_threads.py [--quick]
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from _harness import Result, Threadline, base_env, print_table

CONCURRENT = 100
#: Threads started (each with one finished turn) before the first RSS reading, so that lazy
#: imports and caches are warm.
WARMUP = 20


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def settled_rss_kb(pid: int) -> int:
    """RSS once idle: background flushes of the thread logs done, the reading stable."""
    last = rss_kb(pid)
    for _ in range(20):
        time.sleep(0.2)
        now = rss_kb(pid)
        if now == last:
            break
        last = now
    return last


class Driver(Threadline):
    """Pipelined requests: send many, then read until all are answered."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.results: dict[int, Any] = {}
        self.notes: list[dict[str, Any]] = []

    def pump(self) -> None:
        msg = self.read()
        if "method" in msg:
            if "id" in msg:
                raise RuntimeError(f"unexpected server request {msg['method']}")
            self.notes.append(msg)
        elif "error" in msg:
            raise RuntimeError(f"request {msg.get('id')}: {msg['error']}")
        else:
            self.results[msg["id"]] = msg["result"]

    def answers(self, ids: list[int]) -> list[Any]:
        while any(i not in self.results for i in ids):
            self.pump()
        return [self.results.pop(i) for i in ids]

    def start_threads(self, n: int, cwd: str) -> list[str]:
        ids = [self.send("thread/start", {"cwd": cwd}) for _ in range(n)]
        return [r["thread"]["id"] for r in self.answers(ids)]

    def run_turns(self, prompts: dict[str, str]) -> tuple[dict[str, str], float]:
        """Start one turn per thread at once; read until every turn completed. Returns
        ({thread id: turn id}, seconds from the first turn/start to the last turn/completed)."""
        t0 = time.perf_counter()
        seen = len(self.notes)
        ids = {
            tid: self.send("turn/start", {"threadId": tid, "input": [{"type": "text", "text": p}]})
            for tid, p in prompts.items()
        }
        answers = self.answers(list(ids.values()))
        turns = {tid: r["turn"]["id"] for tid, r in zip(ids, answers, strict=True)}
        pending = set(turns)
        while True:
            for msg in self.notes[seen:]:
                if msg["method"] == "turn/completed":
                    pending.discard(msg["params"]["threadId"])
            seen = len(self.notes)
            if not pending:
                break
            self.pump()
        return turns, time.perf_counter() - t0


def prompt_text(i: int) -> str:
    return f"thread {i:04d} says {secrets.token_hex(6)}: alpha beta gamma delta epsilon"


def check(
    notes: list[dict[str, Any]], turns: dict[str, str], expected: dict[str, str]
) -> tuple[list[str], int]:
    """Problems found in the turns' notifications, and how many events were checked."""
    problems: list[str] = []
    checked = 0
    started: dict[str, int] = defaultdict(int)
    completed: dict[str, list[str]] = defaultdict(list)
    deltas: dict[str, list[str]] = defaultdict(list)
    agent_items: dict[str, set[str]] = defaultdict(set)
    open_items: dict[str, set[str]] = defaultdict(set)
    final_text: dict[str, list[str]] = defaultdict(list)
    for msg in notes:
        method, params = msg["method"], msg.get("params") or {}
        tid = params.get("threadId")
        if tid is None or method in ("thread/started", "thread/status/changed"):
            continue  # not part of a turn
        checked += 1
        if tid not in turns:
            problems.append(f"{method} for an unknown thread {tid}")
            continue
        turn_id = params.get("turnId") or (params.get("turn") or {}).get("id")
        if turn_id != turns[tid]:
            problems.append(f"{method} on {tid} with turn {turn_id}, not {turns[tid]}")
            continue
        item = params.get("item") or {}
        if method == "turn/started":
            started[tid] += 1
        elif method == "turn/completed":
            completed[tid].append(params["turn"]["status"])
        elif method == "item/started":
            open_items[tid].add(item["id"])
            if item.get("type") == "agentMessage":
                agent_items[tid].add(item["id"])
        elif method == "item/completed":
            if item["id"] not in open_items[tid]:
                problems.append(f"item/completed of an item never started on {tid}")
            open_items[tid].discard(item["id"])
            if item.get("type") == "agentMessage":
                final_text[tid].append(item.get("text", ""))
        elif method == "item/agentMessage/delta":
            if params.get("itemId") not in agent_items[tid]:
                problems.append(f"a delta on {tid} for an item not started")
            deltas[tid].append(params["delta"])
    for tid, want in expected.items():
        if started[tid] != 1:
            problems.append(f"{tid}: {started[tid]} turn/started")
        if completed[tid] != ["completed"]:
            problems.append(f"{tid}: turn/completed {completed[tid]}")
        if "".join(deltas[tid]) != want:
            problems.append(f"{tid}: deltas {''.join(deltas[tid])!r}, want {want!r}")
        if final_text[tid] != [want]:
            problems.append(f"{tid}: agentMessage item/completed {final_text[tid]!r}")
        if open_items[tid]:
            problems.append(f"{tid}: items never completed {sorted(open_items[tid])}")
    return problems, checked


def run(quick: bool = False) -> list[Result]:
    total = 400 if quick else 1000
    with tempfile.TemporaryDirectory(prefix="p5-") as tmp:
        base = Path(tmp)
        work, state = base / "work", base / "state"
        work.mkdir()
        state.mkdir()
        env = base_env(
            {
                "AGENT_BACKEND": "mock",
                "THREADLINE_HOME": str(state),
                "THREADLINE_LOG_FILE": str(base / "threadline.log"),
            }
        )
        tl = Driver(env)
        try:
            tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
            pid = tl.proc.pid
            warm = tl.start_threads(WARMUP, str(work))
            tl.run_turns({tid: f"/text warm-up {i}" for i, tid in enumerate(warm)})
            rss_before = settled_rss_kb(pid)

            tids = tl.start_threads(CONCURRENT, str(work))
            expected = {tid: prompt_text(i) for i, tid in enumerate(tids)}
            tl.notes.clear()
            turns, wall = tl.run_turns({tid: f"/text {text}" for tid, text in expected.items()})
            problems, checked = check(tl.notes, turns, expected)
            tl.notes.clear()
            rss_100 = settled_rss_kb(pid)

            count = CONCURRENT
            while count < total:
                batch = tl.start_threads(min(CONCURRENT, total - count), str(work))
                tl.run_turns(
                    {tid: f"/text {prompt_text(count + i)}" for i, tid in enumerate(batch)}
                )
                tl.notes.clear()
                count += len(batch)
            rss_total = settled_rss_kb(pid)
            loaded = tl.call("thread/loaded/list", {"limit": 1000})["data"]
            if len(loaded) < min(total + WARMUP, 1000):
                raise RuntimeError(f"only {len(loaded)} threads loaded, not {total + WARMUP}")
        finally:
            tl.close()
    slope = (rss_total - rss_100) / (total - CONCURRENT)
    first = (rss_100 - rss_before) / CONCURRENT
    return [
        Result(
            "P5",
            f"{CONCURRENT} concurrent threads: events lost/misrouted",
            f"{len(problems)} of {checked}",
            "-",
            None,
            "0",
            not problems,
            f"{CONCURRENT} concurrent turns took {wall * 1000:.0f} ms (wall)"
            + (f"; first problem: {problems[0]}" if problems else ""),
        ),
        Result(
            "P5",
            "RSS per idle thread",
            f"{slope:.1f} KB",
            "-",
            None,
            "<= 200 KB",
            slope <= 200,
            f"slope {CONCURRENT}→{total} threads (RSS {rss_100 / 1024:.1f} → "
            f"{rss_total / 1024:.1f} MB); first {CONCURRENT} threads: {first:.1f} KB each "
            f"(from {rss_before / 1024:.1f} MB)",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="400 threads instead of 1000")
    args = parser.parse_args()
    print_table(run(args.quick))


if __name__ == "__main__":
    main()
