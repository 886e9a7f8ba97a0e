"""P1: spawn → `initialize` response, threadline vs the native `codex app-server`.

Both servers are spawned fresh for every sample (a fresh CODEX_HOME / THREADLINE_HOME each
time), alternately, so load on the machine hits both alike. The clock starts before the
spawn and stops when the response line has been read; the `initialize` request is written
right after the spawn, as a client does. threadline is the installed `threadline` command
with the pinned CLIs on PATH, so its answer carries real backend checks.

A second, informational row times spawn → `initialize` and `thread/list` both answered: the
moment the whole engine is loaded (threadline answers `initialize` before importing it).

Usage: python benchmarks/p1_startup.py [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import ROOT, Result, median_row, print_table
from tests.support.tools import TOOLS_BIN, TOOLS_DIR

_CODEX_NATIVE = (
    TOOLS_DIR / "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
)
_INIT = {
    "id": 1,
    "method": "initialize",
    "params": {"clientInfo": {"name": "bench", "version": "0"}},
}
_LIST = {"id": 2, "method": "thread/list", "params": {}}


def threadline_argv() -> list[str]:
    script = Path(sys.executable).with_name("threadline")
    return [str(script)] if script.exists() else [sys.executable, "-m", "threadline"]


def _time_to_answers(
    argv: list[str], env: dict[str, str], requests: list[dict[str, object]]
) -> float:
    """Seconds from spawn to the response of the last of `requests` (written at once)."""
    payload = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    want = {r["id"] for r in requests}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.flush()
        while want:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[0]} exited before answering")
            message = json.loads(line)
            if "method" in message:
                continue
            if "result" not in message:
                raise RuntimeError(f"{argv[0]}: {message}")
            want.discard(message.get("id"))
        return time.perf_counter() - t0
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def run(quick: bool = False, runs: int | None = None) -> list[Result]:
    runs = runs or (5 if quick else 25)
    if not _CODEX_NATIVE.exists():
        sys.exit(f"native codex not found at {_CODEX_NATIVE}: run scripts/install-clis")
    base_env = dict(os.environ)
    base_env["PATH"] = f"{TOOLS_BIN}{os.pathsep}{base_env.get('PATH', '')}"
    samples: dict[str, list[float]] = {"tl": [], "codex": [], "tl_ready": [], "codex_ready": []}
    argv = threadline_argv()
    # As installed by pip: bytecode compiled (an editable checkout under
    # PYTHONDONTWRITEBYTECODE would compile every module at every start).
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "threadline")], check=True
    )
    for i in range(runs + 1):  # the first round warms the page cache and is dropped
        order = ("codex", "tl") if i % 2 else ("tl", "codex")
        for key in order:
            for kind, requests in (("", [_INIT]), ("_ready", [_INIT, _LIST])):
                with tempfile.TemporaryDirectory() as home:
                    if key == "codex":
                        cmd = [str(_CODEX_NATIVE), "app-server"]
                        env = {**base_env, "CODEX_HOME": home}
                    else:
                        cmd, env = argv, {**base_env, "THREADLINE_HOME": home}
                    elapsed = _time_to_answers(cmd, env, requests)
                if i:
                    samples[key + kind].append(elapsed)
    return [
        median_row(
            "P1",
            "spawn → initialize response",
            samples["tl"],
            samples["codex"],
            1.0,
            "vs native codex app-server, fresh homes",
        ),
        _info_row(
            median_row(
                "P1+",
                "spawn → initialize + thread/list answered (engine loaded)",
                samples["tl_ready"],
                samples["codex_ready"],
                1.0,
            )
        ),
    ]


def _info_row(row: Result) -> Result:
    """A row shown for context: no goal of its own."""
    row.goal, row.ok = "info", True
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int)
    args = parser.parse_args()
    print_table(run(args.quick, args.runs))


if __name__ == "__main__":
    main()
