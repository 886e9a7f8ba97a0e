"""Second-turn latency with Claude Code: threadline's live process vs a cold `claude -p --resume`.

Both sides use the same real `claude` binary and the same fake model server (tests/fakes), in
the same run. Measured:
- threadline: `turn/start` written → first `item/agentMessage/delta` read, on the 2nd turn of a
  thread (the CLI process is already running);
- cold: spawn of `claude -p --resume <session> --output-format stream-json --verbose
  --include-partial-messages` → its first text delta on stdout.

Usage: python benchmarks/claude_second_turn.py [--runs N]   (the pinned CLI from .tools/ or PATH)
Prints medians and the ratio (goal: <= 0.1x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic import FakeAnthropic, Rule, Step, Text  # noqa: E402


def find_claude() -> str:
    local = ROOT / ".tools" / "node_modules" / ".bin" / "claude"
    found = str(local) if local.exists() else shutil.which("claude")
    if not found:
        sys.exit("claude not found: run scripts/install-clis")
    return found


def cli_env(fake_url: str, home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": fake_url,
            "ANTHROPIC_API_KEY": "bench-key",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }
    )
    return env


class Threadline:
    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "threadline"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=ROOT,
        )
        self.next_id = 0

    def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(
            json.dumps({"id": self.next_id, "method": method, "params": params}).encode() + b"\n"
        )
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
                return msg["result"]

    def turn(self, thread_id: str, text: str) -> float:
        """Seconds from writing turn/start to the first agentMessage delta; drains the turn."""
        t0 = time.perf_counter()
        self.send("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]})
        first: float | None = None
        while True:
            msg = self.read()
            method = msg.get("method")
            if method == "item/agentMessage/delta" and first is None:
                first = time.perf_counter() - t0
            if method == "turn/completed":
                assert msg["params"]["turn"]["status"] == "completed", msg
                assert first is not None
                return first

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def cold_resume(claude: str, env: dict[str, str], cwd: Path, session: str) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            claude,
            "-p",
            f"--resume={session}",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"second turn please")
    proc.stdin.close()
    first: float | None = None
    for line in proc.stdout:
        msg = json.loads(line)
        event = msg.get("event") or {}
        if (
            first is None
            and msg.get("type") == "stream_event"
            and (event.get("delta") or {}).get("type") == "text_delta"
        ):
            first = time.perf_counter() - t0
    proc.wait(timeout=60)
    if first is None:
        raise RuntimeError("cold claude produced no text delta")
    return first


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    claude = find_claude()
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeAnthropic(
            Rule("", [Step([Text("The quick answer streams back in a few chunks.")])]),
        ) as fake,
    ):
        base = Path(tmp)
        home, work, state = base / "home", base / "work", base / "state"
        for p in (home, work, state):
            p.mkdir()
        env = cli_env(fake.url, home)
        env.update(
            {"THREADLINE_HOME": str(state), "AGENT_BACKEND": "claude", "BACKEND_CLI_PATH": claude}
        )
        warm: list[float] = []
        cold: list[float] = []
        for _ in range(args.runs):
            tl = Threadline(env)
            try:
                tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
                started = tl.call("thread/start", {"cwd": str(work)})
                tid = started["thread"]["id"]
                tl.turn(tid, "first turn")
                warm.append(tl.turn(tid, "second turn"))
                session = tl.call("thread/read", {"threadId": tid})["thread"]["id"]
            finally:
                tl.close()
            record = json.loads((state / "threads" / session / "meta.json").read_text())
            cold.append(cold_resume(claude, env, work, record["backend_session_id"]))
    w, c = statistics.median(warm), statistics.median(cold)
    print(f"runs: {args.runs}")
    print(
        f"threadline 2nd turn, turn/start -> first delta: median {w * 1000:.1f} ms "
        f"(min {min(warm) * 1000:.1f})"
    )
    print(
        f"cold claude -p --resume, spawn -> first delta:  median {c * 1000:.1f} ms "
        f"(min {min(cold) * 1000:.1f})"
    )
    print(f"ratio threadline/cold: {w / c:.3f}x (goal <= 0.1x)")


if __name__ == "__main__":
    main()
