"""P3: many small deltas from a CLI through threadline to the client, against a minimal
stdlib-json line relay, in the same run.

1. Record: the real `claude` CLI answers one prompt from the fake model with N text deltas
   of 8 characters (`--output-format stream-json --include-partial-messages`, as threadline
   runs it); its stdout is saved.
2. Replay: a stand-in CLI (`_replay_cli.py`) prints that recording, at pipe speed, for each
   user message it reads. So both sides get the real CLI's bytes without the CLI's own
   pace (claude needs far longer to produce them than either relay needs to pass them on).
3. threadline (claude backend, stream mode) runs turns against the replay CLI; the relay
   (`_line_relay.py`: json.loads each line, json.dumps a delta notification, write + flush)
   runs the same turns against the same replay CLI. The client reads every line of either
   and checks that the deltas concatenate to exactly the recorded text.

Reported: deltas per second through each (median over the turns; ratio ours/theirs, goal
>= 1.0) and threadline's RSS before the turns, at its peak during them, and after each (goal:
flat: the RSS after the last turn is within 2 MB of the median after the earlier ones).

Usage: python benchmarks/p3_throughput.py [--quick] [--deltas N] [--turns N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
from _harness import Result, Threadline, claude_env, find_cli, print_table
from tests.fakes.anthropic import FakeAnthropic, Rule, Step, Text

HERE = Path(__file__).resolve().parent
_DECODE = msgspec.json.Decoder()


def record(base: Path, deltas: int) -> tuple[Path, str]:
    """Run the real claude once; returns (its stdout, the text it streamed)."""
    text = "".join(f"{i:07d} " for i in range(deltas))  # 8 characters per delta
    home, work = base / "home", base / "work"
    home.mkdir()
    work.mkdir(exist_ok=True)
    out = base / "claude-stdout.jsonl"
    with FakeAnthropic(Rule("", [Step([Text(text)], chunk_size=8)])) as fake:
        argv = [find_cli("claude"), "-p", "--output-format", "stream-json", "--verbose"]
        argv += ["--include-partial-messages", "--max-turns", "1", "stream please"]
        with out.open("wb") as fh:
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.DEVNULL,
                env=claude_env(home, fake.url),
                cwd=work,
                check=True,
                timeout=600,
            )
    streamed = sum(1 for line in out.open("rb") if b'"text_delta"' in line)
    if streamed != deltas:
        raise RuntimeError(f"claude streamed {streamed} text deltas, expected {deltas}")
    return out, text


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class _RssSampler:
    """Samples a process's RSS every 20 ms in a thread; `peak` is the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            try:
                self.peak = max(self.peak, _rss_kb(self.pid))
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class _Stdio(Threadline):
    """A server whose stream is read raw: the client's own cost per delta stays small."""

    def stream_turn(self, start: tuple[str, Any]) -> tuple[float, int, str]:
        """Send the turn's request; read to `turn/completed`. (seconds, deltas, text)."""
        assert self.proc.stdout is not None
        t0 = time.perf_counter()
        self.send(*start)
        parts: list[str] = []
        for line in self.proc.stdout:
            if b'"item/agentMessage/delta"' in line:
                parts.append(_DECODE.decode(line)["params"]["delta"])
            elif b'"turn/completed"' in line:
                status = _DECODE.decode(line)["params"]["turn"]["status"]
                if status != "completed":
                    raise RuntimeError(f"turn {status}")
                return time.perf_counter() - t0, len(parts), "".join(parts)
        raise RuntimeError("the server exited during a turn")


def _replay_cli(base: Path, recording: Path) -> Path:
    """An executable that is the recorded claude (threadline needs a path to run)."""
    wrapper = base / "replay-claude"
    wrapper.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "_replay_cli.py"}" "{recording}"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def run(
    quick: bool = False,
    deltas: int | None = None,
    turns: int | None = None,
    profile: str | None = None,
) -> list[Result]:
    deltas = deltas or (10_000 if quick else 100_000)
    turns = turns or (2 if quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        recording, text = record(base, deltas)
        cli = _replay_cli(base, recording)
        work = base / "work"
        env = {**os.environ, "THREADLINE_HOME": str(base / "state"), "AGENT_BACKEND": "claude"}
        env["BACKEND_CLI_PATH"] = str(cli)

        # --profile: threadline runs under cProfile (slower; for finding the hot path).
        prof = ["-m", "cProfile", "-o", profile] if profile else []
        tl = _Stdio(env, [sys.executable, *prof, "-m", "threadline"])
        relay = _Stdio(env, [sys.executable, str(HERE / "_line_relay.py"), str(cli)], work)
        ours: list[float] = []
        theirs: list[float] = []
        rss_after: list[int] = []
        try:
            tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
            tid = tl.call("thread/start", {"cwd": str(work)})["thread"]["id"]
            turn = ("turn/start", {"threadId": tid, "input": [{"type": "text", "text": "go"}]})
            tl.stream_turn(turn)  # warm-up: the CLI starts, the session is created
            relay.stream_turn(("turn", {"text": "go"}))
            rss_before = _rss_kb(tl.proc.pid)
            sampler = _RssSampler(tl.proc.pid)
            for i in range(turns):
                # Alternate which side goes first, so machine load hits both alike.
                sides = [(tl, turn, ours), (relay, ("turn", {"text": "go"}), theirs)]
                for side, start, out in sides if i % 2 == 0 else reversed(sides):
                    seconds, count, got = side.stream_turn(start)
                    if count != deltas or got != text:
                        who = "threadline" if side is tl else "relay"
                        raise RuntimeError(f"{who}: {count} deltas, text equal: {got == text}")
                    out.append(seconds)
                    if side is tl:
                        rss_after.append(_rss_kb(tl.proc.pid))
            sampler.stop()
        finally:
            tl.close()
            relay.close()

    o, t = deltas / statistics.median(ours), deltas / statistics.median(theirs)
    # Flat: the last turn ends where the earlier ones did (the allocator keeps some slack).
    growth = rss_after[-1] - statistics.median(rss_after[:-1] or rss_after)
    return [
        Result(
            "P3",
            f"{deltas:,} deltas CLI → client, throughput",
            f"{o:,.0f}/s",
            f"{t:,.0f}/s",
            o / t,
            ">= 1x (stdlib-json line relay)",
            o >= t,
            f"median of {turns} turns; every delta checked",
        ),
        Result(
            "P3",
            "threadline RSS across those turns",
            f"{rss_before / 1024:.1f} → peak {sampler.peak / 1024:.1f} MB",
            "-",
            None,
            "flat: last turn <= median of the others + 2 MB",
            growth <= 2048,
            f"after each turn: {', '.join(f'{r / 1024:.1f}' for r in rss_after)} MB",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--deltas", type=int)
    parser.add_argument("--turns", type=int)
    parser.add_argument("--profile", metavar="FILE", help="write threadline's cProfile here")
    args = parser.parse_args()
    print_table(run(args.quick, args.deltas, args.turns, args.profile))


if __name__ == "__main__":
    main()
