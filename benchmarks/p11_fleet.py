"""P11: events/s through a fleet on Ray (`threadline[ray]`) against one local threadline.

The workload (mock backend): T threads, one turn each, all started at once; each prompt is a
unique `/text` of W words that the mock streams back word by word. Events are every
notification of the turns (deltas, items, status, turn/started, turn/completed).

- Baseline: one `threadline` process on stdio, read by a raw line reader (P5's driver): the
  server's own throughput, no Ray.
- Fleet: `Fleet(n)` for n = 1, 2, 4 actors on a local Ray cluster (`ray.init()`, every CPU),
  the T threads placed over them, every turn's stream read at once from one asyncio loop
  (`async for` over `Fleet.run_turn`). Timed from the first `turn/start` to the last
  `turn/completed`; actor start-up is outside the timing.

Every run is checked as P5 checks (each thread's deltas spell exactly its own prompt, every
event carries its own thread and turn, one turn/started and one turn/completed per turn):
lost or misrouted events are the goal (0); the ratio fleet/baseline is reported. On a machine
with few cores, n actors share them with Ray's own processes: the ratio shows what the fleet
costs there, not what more machines add.

Usage: python benchmarks/p11_fleet.py [--quick] [--threads T] [--words W]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import Result, base_env, print_table
from p5_threads import Driver, check

ACTORS = (1, 2, 4)


def prompts(threads: int, words: int, tag: str) -> list[str]:
    body = " ".join(f"w{i}" for i in range(words))
    return [f"thread {i:03d} of {tag} says {body}" for i in range(threads)]


def single_server(texts: list[str], home: Path, work: Path) -> tuple[float, list[str], int]:
    """(events/s, problems, events) of the turns on one threadline over stdio."""
    env = base_env({"AGENT_BACKEND": "mock", "THREADLINE_HOME": str(home)})
    tl = Driver(env)
    try:
        tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
        tids = tl.start_threads(len(texts), str(work))
        expected = dict(zip(tids, texts, strict=True))
        tl.notes.clear()
        turns, wall = tl.run_turns({tid: f"/text {text}" for tid, text in expected.items()})
        problems, _checked = check(tl.notes, turns, expected)
        events = sum(1 for msg in tl.notes if (msg.get("params") or {}).get("threadId") in turns)
    finally:
        tl.close()
    return events / wall, problems, events


def through_fleet(fleet: Any, texts: list[str], work: Path) -> tuple[float, list[str], int]:
    """(events/s, problems, events) of the turns through `fleet`."""
    tids = [fleet.start_thread({"cwd": str(work)})["thread"]["id"] for _ in texts]
    expected = dict(zip(tids, texts, strict=True))

    async def read_all() -> list[list[dict[str, Any]]]:
        streams = [fleet.run_turn(tid, f"/text {text}") for tid, text in expected.items()]

        async def read(stream: Any) -> list[dict[str, Any]]:
            return [message async for message in stream]

        return await asyncio.gather(*(read(stream) for stream in streams))

    t0 = time.perf_counter()
    seen = asyncio.run(read_all())
    wall = time.perf_counter() - t0
    notes = [message for messages in seen for message in messages]
    turns = {tid: msgs[-1]["params"]["turn"]["id"] for tid, msgs in zip(tids, seen, strict=True)}
    problems, _checked = check(notes, turns, expected)
    return len(notes) / wall, problems, len(notes)


def run(quick: bool = False, threads: int | None = None, words: int | None = None) -> list[Result]:
    try:
        import ray

        from threadline.fleet import Fleet
    except ImportError:
        note = "ray is not installed: pip install '.[ray]' (the ray extra)"
        return [Result("P11", "fleet on Ray", "skipped", "-", None, "-", True, note)]
    threads = threads or (8 if quick else 40)
    words = words or (40 if quick else 400)
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory(prefix="p11-") as tmp:
        base = Path(tmp)
        work, home = base / "work", base / "home"
        work.mkdir()
        home.mkdir()
        single: list[float] = []
        fleet_rates: dict[int, list[float]] = {n: [] for n in ACTORS}
        problems: list[str] = []
        events = 0
        # Ray's session files (and sockets) under a short directory of their own.
        ray_dir = _short_dir(base)
        # The run's own token (Ray >= 2.59 would otherwise write one to ~/.ray/auth_token).
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
        ray.init(include_dashboard=False, log_to_driver=False, _temp_dir=str(ray_dir))
        try:
            fleets = {n: Fleet(n, home=home, env={"AGENT_BACKEND": "mock"}) for n in ACTORS}
            try:
                for r in range(rounds):
                    rate, found, count = single_server(prompts(threads, words, f"s{r}"), home, work)
                    single.append(rate)
                    problems += found
                    for n, fleet in fleets.items():
                        texts = prompts(threads, words, f"f{n}r{r}")
                        rate, found, count = through_fleet(fleet, texts, work)
                        fleet_rates[n].append(rate)
                        problems += [f"{n} actors: {p}" for p in found]
                        events += count
            finally:
                for fleet in fleets.values():
                    fleet.close()
        finally:
            ray.shutdown()
            shutil.rmtree(ray_dir, ignore_errors=True)
    baseline = statistics.median(single)
    results = []
    for n in ACTORS:
        rate = statistics.median(fleet_rates[n])
        results.append(
            Result(
                "P11",
                f"events/s, {threads} turns x {words} words through {n} actor(s)",
                f"{rate:,.0f} ev/s",
                f"{baseline:,.0f} ev/s (one server)",
                rate / baseline,
                "0 lost (ratio reported)",
                not problems,
                f"{len(problems)} problems in {events} fleet events, {rounds} round(s), "
                f"{os.cpu_count()} CPUs" + (f"; first: {problems[0]}" if problems else ""),
            )
        )
    return results


def _short_dir(base: Path) -> Path:
    """A directory for Ray's session: under `base` unless its unix socket paths would be too
    long (107 bytes), then under the system's temporary directory root."""
    if len(str(base)) <= 40:
        return base / "ray"
    return Path(tempfile.mkdtemp(prefix="p11-ray-", dir="/tmp"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="8 turns of 40 words, one round")
    parser.add_argument("--threads", type=int, help="concurrent turns (default 40)")
    parser.add_argument("--words", type=int, help="words per turn (default 400)")
    args = parser.parse_args()
    print_table(run(args.quick, args.threads, args.words))


if __name__ == "__main__":
    main()
