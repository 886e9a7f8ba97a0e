"""P8 (issue #19 goal 4): shutdown mid-turn → every process gone.

Per backend and mode, per run: a fresh threadline (its own state dir) with one thread whose turn
is streaming (the fake model sent the first delta, then stalls for a minute; the mock backend
streams `/text` then `/sleep`s). Once the first `item/agentMessage/delta` is read, t0 = stdin
closed (`eof`) or SIGTERM sent (`sigterm`); then /proc is polled every ~1 ms until no process of
the run is left: threadline, the CLI and whatever the CLI started (found by a marker variable in
their environment, as the e2e orphan checks find them). The measured time is that moment - t0.
Goal: median <= 500 ms for every backend, both ways.

Each run's environment is the e2e tests' (`tests/e2e/<cli>_env.py`: the pinned CLI against its
fake model server, the other CLIs stubbed). Nothing is compared with a baseline: the figure is
absolute (a CLI's own exit on SIGTERM is part of it).

Usage: python benchmarks/p8_shutdown.py [--quick] [--runs N] [--backends claude/stream,mock,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from _harness import ROOT, Result, Threadline, ms, print_table
from tests.support.cli_env import (
    OPERATOR_VARIABLES,
    CliEnv,
    ServerEnv,
    env_classes,
    marked_pids,
)
from tests.support.tools import find_cli

from threadline.backends.registry import SPECS

GOAL_S = 0.5
#: (backend, mode): every mode of every backend with a CLI, and the mock.
TARGETS = (
    ("mock", "script"),
    ("claude", "stream"),
    ("claude", "print"),
    ("codex", "app-server"),
    ("codex", "exec"),
    ("gemini", "acp"),
    ("gemini", "headless"),
    ("opencode", "acp"),
    ("opencode", "run"),
    ("qwen", "acp"),
)
HOWS = ("eof", "sigterm")
STALL_MS = 60_000
TEXT = "A long answer that stalls after its first delta and never ends on its own."
WINDOW_S = 20.0  # how long the processes may take to go before the run is "survived"
POLL_S = 0.001
#: For a CLI that streams no deltas: how long after the fake model got the turn's request.
SETTLE_S = 0.3


class MockEnv(ServerEnv):
    backend: ClassVar[str] = "mock"


def _script(env: ServerEnv, prompt: str) -> str:
    """Make the fake model answer `prompt` with a stalled stream; the text to send."""
    backend = env.backend
    if backend == "mock":
        return f"/text {TEXT}\n/sleep 60"
    assert isinstance(env, CliEnv)
    if backend == "claude":
        from tests.fakes.anthropic import Rule, Step, Text

        step: Any = Step([Text(TEXT)], stall_after_first_delta_ms=STALL_MS)
        env.script(Rule(prompt, [step]))
    elif backend == "codex":
        from tests.fakes.openai_responses import Rule as RRule
        from tests.fakes.openai_responses import Step as RStep
        from tests.fakes.openai_responses import Text as RText

        env.script(RRule(prompt, [RStep([RText(TEXT)], stall_after_first_delta_ms=STALL_MS)]))
    elif backend == "gemini":
        from tests.fakes.gemini import Rule as GRule
        from tests.fakes.gemini import Step as GStep
        from tests.fakes.gemini import Text as GText

        env.script(GRule(prompt, [GStep([GText(TEXT)], stall_after_first_chunk_ms=STALL_MS)]))
    else:  # opencode, qwen
        from tests.fakes.openai_chat import Rule as CRule
        from tests.fakes.openai_chat import Step as CStep
        from tests.fakes.openai_chat import Text as CText

        env.script(CRule(prompt, [CStep([CText(TEXT)], stall_after_first_delta_ms=STALL_MS)]))
    return prompt


@contextlib.contextmanager
def _environment(backend: str, base: Path) -> Iterator[Callable[[Path], ServerEnv]]:
    """A factory of per-run environments (each in its own dir under `base`) sharing one fake."""
    if backend == "mock":
        yield lambda tmp: MockEnv(tmp=tmp)
        return
    cls = env_classes()[backend]
    cli = find_cli(str(SPECS[backend].cli))
    if cli is None:
        raise RuntimeError(f"{backend} not found: run scripts/install-clis")
    with cls.fake_type() as fake:
        yield lambda tmp: cls(cli=cli, fake=fake, tmp=tmp)


class Server(Threadline):
    """threadline over stdio (`Threadline`'s start-up and `send`); a thread reads its stdout
    into a queue, so waits can time out."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(env)
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict):
                    self.inbox.put(msg)
        self.inbox.put(None)

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next message; None when none came within `timeout`."""
        try:
            msg = self.inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if msg is None:
            raise RuntimeError(f"threadline exited (rc {self.proc.wait()})")
        return msg

    def call(self, method: str, params: Any, timeout: float = 120) -> Any:
        rid = self.send(method, params)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.next(0.1)
            if msg is not None and msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
        raise RuntimeError(f"{method}: no answer")

    def wait_mid_turn(self, streaming: Callable[[], bool], timeout: float = 120) -> None:
        """Until the turn streams: its first agentMessage delta, or (a mode whose CLI streams
        no deltas) `streaming()` held for SETTLE_S."""
        deadline = time.monotonic() + timeout
        since: float | None = None
        while time.monotonic() < deadline:
            msg = self.next(0.005) or {}
            method = msg.get("method")
            if method == "item/agentMessage/delta":
                return
            if method == "turn/completed":
                raise RuntimeError(f"the turn ended before streaming: {msg['params']['turn']}")
            if since is None and streaming():
                since = time.monotonic()
            if since is not None and time.monotonic() - since >= SETTLE_S:
                return
        raise RuntimeError("the turn did not start streaming")


def _model_called(env: ServerEnv, prompt: str) -> bool:
    """Whether the fake model is answering `prompt` (the mock has no model: False)."""
    fake = getattr(env, "fake", None)
    return fake is not None and any(r.rule == prompt for r in fake.requests)


def _clean_environ() -> dict[str, str]:
    """Our environment without the developer's CLI settings (as the e2e fixtures scrub it)."""
    from tests.support.cli_env import private_prefixes

    private = private_prefixes()
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(private) and k not in OPERATOR_VARIABLES
    }


def one_run(env: ServerEnv, mode: str, how: str) -> float | None:
    """Seconds from EOF/SIGTERM mid-turn to no process of the run left (None: some survived
    the window; they are killed)."""
    extra = env.env(PYTHONPATH=str(ROOT / "src"))
    srv = Server({**_clean_environ(), "THREADLINE_HOME": str(env.home), **extra})
    try:
        srv.call("initialize", {"clientInfo": {"name": "p8-bench", "version": "0"}})
        params = {
            "modelProvider": env.backend,
            "cwd": str(env.work),
            "approvalPolicy": "never",
            "config": {"mode": mode},
        }
        tid = srv.call("thread/start", params)["thread"]["id"]
        text = _script(env, f"stall here {env.tmp.name}")
        srv.send("turn/start", {"threadId": tid, "input": [{"type": "text", "text": text}]})
        srv.wait_mid_turn(lambda: _model_called(env, text))
        if not env.leftovers():
            raise RuntimeError("no process found by the marker")
        t0 = time.perf_counter()
        if how == "eof":
            assert srv.proc.stdin is not None
            srv.proc.stdin.close()
        else:
            srv.proc.send_signal(signal.SIGTERM)
        deadline = t0 + WINDOW_S
        while time.perf_counter() < deadline:
            srv.proc.poll()  # reap threadline itself (our child) once it exits
            if not marked_pids(env.marker):
                return time.perf_counter() - t0
            time.sleep(POLL_S)
        return None
    finally:
        for pid in marked_pids(env.marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if srv.proc.poll() is None:
            srv.proc.kill()
        srv.proc.wait()
        for stream in (srv.proc.stdin, srv.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@dataclass
class Measured:
    backend: str
    mode: str
    how: str
    runs: list[float | None]


def measure(backend: str, mode: str, runs: int) -> list[Measured]:
    out = {how: Measured(backend, mode, how, []) for how in HOWS}
    with (
        tempfile.TemporaryDirectory(prefix=f"p8-{backend}-") as tmp,
        _environment(backend, Path(tmp)) as make,
    ):
        for i in range(runs):
            for how in HOWS:  # interleaved
                run_dir = Path(tmp) / f"{how}-{i}"
                run_dir.mkdir()
                out[how].runs.append(one_run(make(run_dir), mode, how))
    return list(out.values())


def _row(m: Measured) -> Result:
    what = f"{'stdin EOF' if m.how == 'eof' else 'SIGTERM'} mid-turn -> all processes gone"
    rid = f"P8-{m.backend}/{m.mode}-{m.how}"
    goal = "median <= 500 ms"
    done = [t for t in m.runs if t is not None]
    if len(done) < len(m.runs):
        survived = len(m.runs) - len(done)
        ours = f"processes survived {WINDOW_S:g} s in {survived}/{len(m.runs)} runs"
        return Result(rid, what, ours, "-", None, goal, False)
    median = statistics.median(done)
    note = f"max {ms(max(done))}"
    return Result(
        rid, what, f"{ms(median)} (n={len(done)})", "-", None, goal, median <= GOAL_S, note
    )


def run(
    quick: bool = False,
    runs: int | None = None,
    targets: tuple[tuple[str, str], ...] = TARGETS,
    verbose: bool = False,
) -> list[Result]:
    n = runs if runs is not None else (1 if quick else 5)
    results = []
    for backend, mode in targets:
        try:
            measured = measure(backend, mode, n)
        except Exception as exc:  # one backend failing must not hide the others
            for how in HOWS:
                results.append(
                    Result(
                        f"P8-{backend}/{mode}-{how}",
                        "shutdown mid-turn",
                        "error",
                        "-",
                        None,
                        "median <= 500 ms",
                        False,
                        str(exc)[:200],
                    )
                )
            continue
        for m in measured:
            if verbose:
                figures = ", ".join("survived" if t is None else f"{t * 1000:.0f}" for t in m.runs)
                print(f"{backend}/{mode} {m.how}: {figures} ms", file=sys.stderr)
            results.append(_row(m))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke mode: 1 run per target")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument(
        "--backends",
        default=",".join(f"{b}/{m}" for b, m in TARGETS),
        help="backend/mode pairs (a bare backend means all its modes)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="per-run figures on stderr")
    args = parser.parse_args()
    wanted = [w for w in args.backends.split(",") if w]
    targets = tuple((b, m) for b, m in TARGETS if any(w in (b, f"{b}/{m}") for w in wanted))
    print_table(run(args.quick, args.runs, targets, args.verbose))


if __name__ == "__main__":
    main()
