"""P9: a thread's first turn end to end — the latency a user feels — through threadline and
with the CLI run directly, on the same prompt, against the project's fake model servers.

- threadline: spawn `threadline` → `initialize` → `thread/start` → `turn/start` → the first
  `item/agentMessage/delta`, each request sent once the previous answer came, as a client does;
- the CLI directly: spawn → its first text output, prompt on stdin (`claude -p --output-format
  stream-json --include-partial-messages`, `gemini -p -o stream-json`, `opencode run --format
  json`), and for codex the native `codex app-server` driven like threadline (initialize →
  thread/start → turn/start → first delta).

Alternately, one state directory (a first run not counted); one row per CLI, goal <= 1.05x.

Usage: python benchmarks/p9_first_turn.py [--quick] [--runs N] [--cli NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import Result, Threadline, cold_first_output, median_row, print_table
from p2_second_turn import CLIS, Setup

PROMPT = b"first turn please"
_INIT = {"clientInfo": {"name": "bench", "version": "0"}}


def _claude_argv(s: Setup) -> list[str]:
    argv = s.cold_argv("x")
    return [a for a in argv if not a.startswith("--resume")]


def _gemini_argv(s: Setup) -> list[str]:
    argv = s.cold_argv("x")
    i = argv.index("--resume")
    return argv[:i] + argv[i + 2 :]


def _opencode_argv(s: Setup) -> list[str]:
    return s.cold_argv("x")[:-2]  # without `--session x`


#: name → the CLI's own fresh one-shot command (codex: driven as an app-server instead)
DIRECT: dict[str, Callable[[Setup], list[str]]] = {
    "claude": _claude_argv,
    "gemini": _gemini_argv,
    "opencode": _opencode_argv,
}


def through_threadline(s: Setup, state: Path) -> float:
    t0 = time.perf_counter()
    tl = Threadline({**s.env, **s.threadline_env, "THREADLINE_HOME": str(state)})
    try:
        tl.call("initialize", _INIT)
        params = {"cwd": str(s.work), **s.thread_params}
        tid = tl.call("thread/start", params)["thread"]["id"]
        tl.send("turn/start", {"threadId": tid, "input": [{"type": "text", "text": "hi"}]})
        while True:
            msg = tl.read()
            if msg.get("method") == "item/agentMessage/delta":
                return time.perf_counter() - t0
            if msg.get("method") == "turn/completed":
                raise RuntimeError(f"no delta: {msg['params']['turn']}")
    finally:
        tl.close()


def codex_direct(s: Setup) -> float:
    """The native `codex app-server` (the binary threadline runs), spawn → first delta."""
    native = s.cold_argv("x")[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [native, "app-server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=s.env,
        cwd=s.work,
    )
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None

    def call(rid: int, method: str, params: Any) -> Any:
        stdin.write(json.dumps({"id": rid, "method": method, "params": params}).encode() + b"\n")
        stdin.flush()
        while True:
            msg = json.loads(stdout.readline())
            if msg.get("id") == rid and "method" not in msg:
                return msg.get("result")

    try:
        call(1, "initialize", _INIT)
        tid = call(2, "thread/start", {"cwd": str(s.work), **s.thread_params})["thread"]["id"]
        call(3, "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "hi"}]})
        while True:
            line = stdout.readline()
            if not line:
                raise RuntimeError("codex app-server exited")
            if b'"item/agentMessage/delta"' in line:
                return time.perf_counter() - t0
    finally:
        stdin.close()
        proc.wait(timeout=30)


def measure(name: str, runs: int) -> tuple[list[float], list[float]]:
    make = CLIS[name][0]
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory(prefix=f"p9-{name}-") as tmp, make(Path(tmp)) as s:
        # One state directory, as a user's: a server that ran in this directory before
        # starts that CLI while its engine loads (procs/early.py). A run not counted first.
        state = Path(tmp) / "threadline-state"
        state.mkdir()
        through_threadline(s, state)
        for i in range(runs):
            for side in ("threadline", "direct") if i % 2 == 0 else ("direct", "threadline"):
                if side == "threadline":
                    ours.append(through_threadline(s, state))
                elif name == "codex":
                    theirs.append(codex_direct(s))
                else:
                    argv = DIRECT[name](s)
                    theirs.append(cold_first_output(argv, s.env, s.work, PROMPT, s.is_first))
    return ours, theirs


def run(
    quick: bool = False, runs: int | None = None, clis: list[str] | None = None
) -> list[Result]:
    n = runs if runs is not None else (1 if quick else 5)
    results = []
    for name in clis or (["claude", "codex"] if quick else list(CLIS)):
        ours, theirs = measure(name, n)
        direct = "`codex app-server` driven the same way" if name == "codex" else "the CLI"
        results.append(
            median_row(
                "P9",
                f"{name}: spawn → first delta of a thread's first turn, vs {direct} directly",
                ours,
                theirs,
                1.05,
                note=f"min {min(ours) * 1000:.0f} / {min(theirs) * 1000:.0f} ms",
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one run, claude and codex")
    parser.add_argument("--runs", type=int, default=None, help="runs per CLI (default 5)")
    parser.add_argument("--cli", action="append", choices=list(CLIS), help="only these CLIs")
    args = parser.parse_args()
    print_table(run(args.quick, args.runs, args.cli))


if __name__ == "__main__":
    main()
