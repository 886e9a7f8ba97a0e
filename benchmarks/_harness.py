"""Shared plumbing for the benchmarks: find a pinned CLI, drive `threadline` over stdio, time
a turn to its first delta, and run a CLI cold to its first output."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# threadline as installed from a wheel has its bytecode compiled; an editable checkout run
# with PYTHONDONTWRITEBYTECODE never caches it, and every start would compile ~180 modules
# (measured: importing the engine 1.2-1.5 s → 1.0 s on a loaded machine). Start-up benchmarks
# measure the installed case.
compileall.compile_dir(str(ROOT / "src"), quiet=1)


def find_cli(name: str) -> str:
    from tests.support.tools import TOOLS_BIN  # importable once ROOT is on sys.path

    local = TOOLS_BIN / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        sys.exit(f"{name} not found: run scripts/install-clis")
    return found


class Threadline:
    """`python -m threadline` (or another newline-delimited JSON-RPC server: `argv`) as a
    child, driven synchronously (one request at a time)."""

    def __init__(
        self, env: dict[str, str], argv: list[str] | None = None, cwd: Path = ROOT
    ) -> None:
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "threadline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        self.next_id = 0

    def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        assert self.proc.stdin is not None
        line = json.dumps({"id": self.next_id, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return self.next_id

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("threadline exited")
        return json.loads(line)  # type: ignore[no-any-return]

    def call(self, method: str, params: Any) -> Any:
        rid = self.send(method, params)
        while True:
            msg = self.read()
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def turn(self, thread_id: str, text: str) -> tuple[float, float]:
        """(turn/start → first agentMessage delta, turn/start → turn/completed), seconds."""
        t0 = time.perf_counter()
        self.send("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]})
        first: float | None = None
        while True:
            msg = self.read()
            method = msg.get("method")
            if method == "item/agentMessage/delta" and first is None:
                first = time.perf_counter() - t0
            if method == "turn/completed":
                turn = msg["params"]["turn"]
                assert turn["status"] == "completed", turn
                done = time.perf_counter() - t0
                return (first if first is not None else done), done

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def cold_first_output(
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    stdin: bytes,
    is_first: Callable[[dict[str, Any]], bool],
) -> float:
    """Spawn a CLI, feed `stdin`, and time spawn → the first stdout JSON line for which
    `is_first` holds (the process is then drained to its end)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    first: float | None = None
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if first is None and isinstance(msg, dict) and is_first(msg):
            first = time.perf_counter() - t0
    proc.wait(timeout=120)
    if first is None:
        raise RuntimeError(f"{argv[0]} produced no matching output")
    return first


def report(
    title: str,
    ours: list[float],
    theirs: list[float],
    ours_label: str,
    theirs_label: str,
    goal: str,
) -> None:
    import statistics

    o, t = statistics.median(ours), statistics.median(theirs)
    print(title)
    print(f"  {ours_label}: median {o * 1000:.1f} ms (min {min(ours) * 1000:.1f})")
    print(f"  {theirs_label}: median {t * 1000:.1f} ms (min {min(theirs) * 1000:.1f})")
    print(f"  ratio: {o / t:.3f}x  ({goal})")


def base_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def claude_env(home: Path, url: str) -> dict[str, str]:
    """The environment of a real `claude` offline against the fake Anthropic API at `url`,
    its state in `home` (no retries, no update checks, no other traffic)."""
    return base_env(
        {
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": "bench-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
    )


@dataclass
class Result:
    """One row of the suite's table. `ours`/`theirs` are display strings (with units);
    `ratio` is ours/theirs where a comparison exists; `ok` says whether the goal holds."""

    id: str
    what: str
    ours: str
    theirs: str
    ratio: float | None
    goal: str
    ok: bool
    note: str = ""


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def median_row(
    id: str,
    what: str,
    ours: Sequence[float],
    theirs: Sequence[float],
    max_ratio: float,
    note: str = "",
) -> Result:
    """A row comparing two lists of timings (seconds) by their medians."""
    o, t = statistics.median(ours), statistics.median(theirs)
    ratio = o / t
    return Result(
        id,
        what,
        f"{ms(o)} (n={len(ours)})",
        f"{ms(t)} (n={len(theirs)})",
        ratio,
        f"<= {max_ratio:g}x",
        ratio <= max_ratio,
        note,
    )


def print_table(results: Sequence[Result], file: Any = None) -> None:
    """The results as a Markdown table (so it can be pasted into docs/performance.md)."""
    out = sys.stdout if file is None else file
    head = ("id", "what", "threadline", "baseline", "ratio", "goal", "ok", "note")
    rows = [
        (
            r.id,
            r.what,
            r.ours,
            r.theirs,
            "-" if r.ratio is None else f"{r.ratio:.3f}x",
            r.goal,
            "yes" if r.ok else "NO",
            r.note,
        )
        for r in results
    ]
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "|".join("---" for _ in head) + "|", file=out)
    for row in rows:
        print("| " + " | ".join(row) + " |", file=out)
    out.flush()
