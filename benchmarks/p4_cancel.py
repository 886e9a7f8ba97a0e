"""P4 (issue #9): cancel latency while the agent runs a shell command.

Per backend, one server and one thread; per run a fresh turn in which the (fake) model makes the
agent run `sleep <N>` (N unique per run, so the process can be found in /proc). Once the
`commandExecution` item has started and the `sleep` process exists, t0 = `turn/cancel` is
written; then /proc is polled every ~1 ms while the server's stdout is read by a thread:

* t1 = `turn/completed` read (its status must be `interrupted`);
* t2 = no process of that command is left (the `sleep` and any shell wrapping it).

The measured time is max(t1, t2) - t0; t1 - t0 is reported alongside. threadline is measured
with every backend that can run a command (mock, claude stream, codex app-server, gemini acp,
opencode acp). The baseline is the native `codex app-server` driven directly over stdio with
`turn/interrupt` (same fake model, same scenario). Goal: threadline's median <= 50 ms.

Native Codex leaves an interrupted command running (its unified exec keeps the process for
later `write_stdin` calls): when the command survives the measuring window, the baseline's
measured time cannot be computed and the row compares against Codex's t1 instead (the note says
so). Survivors are killed by the benchmark.

Usage: python benchmarks/p4_cancel.py [--quick] [--runs N] [--backends mock,codex,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _harness import ROOT, Result, find_cli, ms, print_table
from tests.support.tools import TOOLS_BIN

GOAL_S = 0.050
BACKENDS = ("mock", "claude", "codex", "gemini", "opencode")
CLIS = ("claude", "codex", "gemini", "opencode")
WINDOW_S = 15.0  # how long to wait for turn/completed
AFTER_S = 3.0  # how long after turn/completed the command may take to go before it "survived"
POLL_S = 0.001


# -- /proc -----------------------------------------------------------------------------------------


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of `pid`, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    return rest[0].decode(), int(rest[19])


def command_pids(needle: str) -> dict[int, int]:
    """pid -> start time of every live process whose command line contains `needle`."""
    found: dict[int, int] = {}
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if needle in _cmdline(pid):
            st = _stat(pid)
            if st is not None and st[0] not in ("Z", "X"):
                found[pid] = st[1]
    return found


def alive(pids: dict[int, int]) -> bool:
    for pid, start in pids.items():
        st = _stat(pid)
        if st is not None and st[1] == start and st[0] not in ("Z", "X"):
            return True
    return False


def kill_all(pids: dict[int, int]) -> None:
    for pid, start in pids.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# -- a JSON-RPC client over a child's stdio ----------------------------------------------------


class Peer:
    """A JSON-RPC stdio server as a child. A thread reads its stdout and timestamps every line
    (time.perf_counter()) as it arrives; server→client requests are answered `accept`."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = os.path.basename(argv[0])
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        self.next_id = 0
        self.inbox: queue.Queue[tuple[float, dict[str, Any] | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.perf_counter()
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and "id" in msg and "method" in msg:
                self._write({"id": msg["id"], "result": {"decision": "accept"}})
            if isinstance(msg, dict):
                self.inbox.put((now, msg))
        self.inbox.put((time.perf_counter(), None))

    def _write(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        with self._lock:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()

    def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        self._write({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def next(self, timeout: float) -> tuple[float, dict[str, Any]]:
        at, msg = self.inbox.get(timeout=timeout)
        if msg is None:
            raise RuntimeError(f"{self.name} exited (rc {self.proc.wait()})")
        return at, msg

    def call(self, method: str, params: Any, timeout: float = 120) -> Any:
        rid = self.send(method, params)
        deadline = time.monotonic() + timeout
        while True:
            _, msg = self.next(max(0.01, deadline - time.monotonic()))
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result")

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Run:
    t1: float  # turn/cancel -> turn/completed read
    t2: float | None  # turn/cancel -> the command's processes gone (None: survived the window)

    @property
    def measured(self) -> float | None:
        return None if self.t2 is None else max(self.t1, self.t2)


def cancel_run(
    peer: Peer,
    thread_id: str,
    prompt: str,
    seconds: int,
    method: str,
    window: float,
    after: float = AFTER_S,
) -> Run:
    """One turn that runs `sleep <seconds>`, cancelled with `method` once the sleep runs."""
    result = peer.call(
        "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": prompt}]}
    )
    turn_id = result["turn"]["id"]
    needle = f"sleep {seconds}"
    started = False
    deadline = time.monotonic() + 120
    pids: dict[int, int] = {}
    # 1. wait for item/started(commandExecution) and the `sleep` process itself
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the command did not start: {prompt!r}")
        try:
            _, msg = peer.next(0.005)
        except queue.Empty:
            msg = {}
        params = msg.get("params") or {}
        if msg.get("method") == "item/started" and params["item"]["type"] == "commandExecution":
            started = True
        if msg.get("method") == "turn/completed":
            raise RuntimeError(f"the turn ended before the command ran: {params['turn']}")
        if started:
            pids = command_pids(needle)
            if any(_cmdline(p).split()[:2] == ["sleep", str(seconds)] for p in pids):
                break
    # Wrappers (a shell running the command) may start just before the sleep: take all again.
    pids = command_pids(needle)
    # 2. cancel; poll /proc and the reader's timestamped lines
    t0 = time.perf_counter()
    peer.send(method, {"threadId": thread_id, "turnId": turn_id})
    t1: float | None = None
    t2: float | None = None
    end = t0 + window
    while (t1 is None or t2 is None) and time.perf_counter() < end:
        if t1 is not None:
            end = min(end, t0 + t1 + after)
        if t2 is None and not alive(pids):
            t2 = time.perf_counter() - t0
        while True:
            try:
                at, msg = peer.next(0)
            except queue.Empty:
                break
            if msg.get("method") == "turn/completed":
                turn = msg["params"]["turn"]
                if turn["id"] != turn_id:
                    continue
                if turn["status"] != "interrupted":
                    raise RuntimeError(f"turn/completed is not interrupted: {turn}")
                t1 = at - t0
        time.sleep(POLL_S)
    if t1 is None:
        raise RuntimeError(f"no turn/completed within {window} s of {method}")
    leftover = command_pids(needle)
    if t2 is not None and leftover:
        raise RuntimeError(f"new processes of {needle!r} after the cancel: {leftover}")
    kill_all(pids | leftover)
    return Run(t1, t2)


# -- backends ----------------------------------------------------------------------------------


@dataclass
class Setup:
    """What one backend needs: a server environment and thread params; `script(prompt, N)`
    makes the fake model answer `prompt` with a shell call running `sleep N`."""

    env: dict[str, str]
    thread: dict[str, Any]
    script: Callable[[str, int], None] = lambda _p, _n: None
    prompt: Callable[[str, int], str] = lambda tag, _n: f"sleeper {tag}"
    stack: list[Any] = field(default_factory=list)


def _stub_bin(base: Path, keep: str | None) -> Path:
    """Instant `--version` stubs for the CLIs a benchmark does not use (initialize runs every
    CLI it finds, and `gemini --version` alone takes seconds)."""
    stubs = base / "stub-bin"
    stubs.mkdir(exist_ok=True)
    for name in CLIS:
        if name != keep:
            path = stubs / name
            path.write_text(f"#!/bin/sh\necho '{name} (stubbed by the P4 benchmark)'\n")
            path.chmod(0o755)
    return stubs


def _path(base: Path, keep: str | None) -> str:
    return os.pathsep.join([str(_stub_bin(base, keep)), str(TOOLS_BIN), os.environ.get("PATH", "")])


@contextlib.contextmanager
def setup(backend: str, base: Path) -> Iterator[Setup]:
    work = base / "work"
    work.mkdir()
    state = base / "state"
    state.mkdir()
    common = {
        "THREADLINE_HOME": str(state),
        "AGENT_BACKEND": backend,
        "LANG": "C.UTF-8",
        # The threadline of this checkout (a worktree's, not whatever the venv installed).
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p
        ),
    }
    thread = {"modelProvider": backend, "cwd": str(work), "approvalPolicy": "never"}
    if backend == "mock":
        env = {**os.environ, **common, "PATH": _path(base, None)}
        yield Setup(env, thread, prompt=lambda _tag, n: f"/run sleep {n}")
        return
    cli = find_cli(backend)
    common["BACKEND_CLI_PATH"] = cli
    if backend == "claude":
        from tests.fakes.anthropic import FakeAnthropic, ToolUse
        from tests.fakes.anthropic import Rule as ARule

        cli_home = base / "cli-home"
        cli_home.mkdir()
        # The CLI takes the nearest parent with .git as its project root: make `work` one.
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        with FakeAnthropic() as fake:
            env = {
                **{
                    k: v
                    for k, v in os.environ.items()
                    if not k.startswith(("ANTHROPIC_", "CLAUDE"))
                },
                **common,
                "PATH": _path(base, backend),
                "ANTHROPIC_BASE_URL": fake.url,
                "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-bench",
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
                "HOME": str(cli_home),
                "CLAUDE_CONFIG_DIR": str(cli_home / ".claude"),
            }

            def claude_script(prompt: str, n: int) -> None:
                # Not a bare `sleep`: claude 2.1.332 refuses a command that starts with one.
                bash = ToolUse("Bash", {"command": f"true && sleep {n}"})
                fake.set_script(ARule(prompt, [bash, "Not reached."]))

            yield Setup(env, thread, claude_script)
    elif backend == "codex":
        from tests.fakes.openai_responses import ExecCommand, FakeResponses, codex_env, codex_home
        from tests.fakes.openai_responses import Rule as RRule

        with FakeResponses() as responses:
            home = codex_home(base, responses.url)
            env = {**codex_env(home), **common, "PATH": _path(base, backend)}
            thread["sandbox"] = "workspace-write"

            def codex_script(prompt: str, n: int) -> None:
                step = ExecCommand(f"sleep {n}", yield_time_ms=30_000)
                responses.set_script(RRule(prompt, [step, "Not reached."]))

            yield Setup(env, thread, codex_script)
    elif backend == "gemini":
        from tests.fakes.gemini import MODEL, FakeGemini, ShellCommand, gemini_env, gemini_home
        from tests.fakes.gemini import Rule as GRule

        with FakeGemini() as gemini_fake:
            home = gemini_home(base, gemini_fake.url, max_attempts=1, name="cli-home")
            env = {
                **gemini_env(home, gemini_fake.url),
                **common,
                "PATH": _path(base, backend),
                "BACKEND_MODEL": MODEL,
            }

            def gemini_script(prompt: str, n: int) -> None:
                gemini_fake.set_script(GRule(prompt, [ShellCommand(f"sleep {n}"), "Not reached."]))

            yield Setup(env, thread, gemini_script)
    elif backend == "opencode":
        from tests.fakes.openai_chat import FakeOpenAIChat, bash_call, opencode_env
        from tests.fakes.openai_chat import Rule as CRule

        with FakeOpenAIChat() as chat:
            env = {
                **opencode_env(base, chat.url, name="cli"),
                **common,
                "PATH": _path(base, backend),
            }

            def opencode_script(prompt: str, n: int) -> None:
                chat.set_script(CRule(prompt, [bash_call(f"sleep {n}"), "Not reached."]))

            yield Setup(env, thread, opencode_script)
    else:
        raise ValueError(backend)


def _unique_seconds(used: set[int]) -> int:
    while True:
        n = random.randint(100_000, 999_999)
        if n not in used and not command_pids(f"sleep {n}"):
            used.add(n)
            return n


def _measure(
    peer: Peer, s: Setup, thread: dict[str, Any], method: str, runs: int, window: float
) -> list[Run]:
    """`runs` cancels (with `method`) of a `sleep` on one thread of `peer`; kills leftovers."""
    used: set[int] = set()
    try:
        peer.call("initialize", {"clientInfo": {"name": "p4-bench", "version": "0"}})
        tid = peer.call("thread/start", thread)["thread"]["id"]
        out = []
        for i in range(runs):
            n = _unique_seconds(used)
            prompt = s.prompt(f"{i} {n}", n)
            s.script(prompt, n)
            out.append(cancel_run(peer, tid, prompt, n, method, window))
        return out
    finally:
        peer.close()
        for n in used:
            kill_all(command_pids(f"sleep {n}"))


def measure_threadline(backend: str, runs: int, window: float) -> list[Run]:
    with (
        tempfile.TemporaryDirectory(prefix=f"p4-{backend}-") as tmp,
        setup(backend, Path(tmp)) as s,
    ):
        peer = Peer([sys.executable, "-m", "threadline"], s.env, ROOT)
        return _measure(peer, s, s.thread, "turn/cancel", runs, window)


def measure_codex_native(runs: int, window: float) -> list[Run]:
    with tempfile.TemporaryDirectory(prefix="p4-native-") as tmp, setup("codex", Path(tmp)) as s:
        peer = Peer([find_cli("codex"), "app-server"], s.env, Path(s.thread["cwd"]))
        thread = {k: s.thread[k] for k in ("cwd", "approvalPolicy", "sandbox")}
        return _measure(peer, s, thread, "turn/interrupt", runs, window)


# -- report ------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _row(backend: str, ours: list[Run], theirs: list[Run]) -> Result:
    what = f"turn/cancel -> interrupted + command gone ({backend})"
    goal = "median <= 50 ms"
    our_t1 = _median([r.t1 for r in ours])
    our_measured = [r.measured for r in ours]
    if any(m is None for m in our_measured):
        survived = sum(m is None for m in our_measured)
        return Result(
            f"P4-{backend}",
            what,
            f"command survived in {survived}/{len(ours)} runs (t1 {ms(our_t1)})",
            "-",
            None,
            goal,
            False,
        )
    o = _median([m for m in our_measured if m is not None])
    their_measured = [r.measured for r in theirs]
    their_t1 = _median([r.t1 for r in theirs])
    notes = [f"t1 (turn/completed) {ms(our_t1)}", f"max {ms(max(m for m in our_measured if m))}"]
    if all(m is not None for m in their_measured):
        t = _median([m for m in their_measured if m is not None])
        theirs_s = f"{ms(t)} (n={len(theirs)}; t1 {ms(their_t1)})"
    else:
        # Codex left the command running: compare with its turn/completed alone.
        t = their_t1
        survived = sum(m is None for m in their_measured)
        theirs_s = f"t1 {ms(t)} (n={len(theirs)})"
        notes.append(
            f"native codex left the command running in {survived}/{len(theirs)} runs "
            "(baseline = its t1)"
        )
    return Result(
        f"P4-{backend}",
        what,
        f"{ms(o)} (n={len(ours)})",
        theirs_s,
        o / t,
        goal,
        o <= GOAL_S,
        "; ".join(notes),
    )


def _dump(label: str, runs: list[Run]) -> None:
    for r in runs:
        t2 = "survived" if r.t2 is None else f"{r.t2 * 1000:.1f}"
        print(f"{label}: t1 {r.t1 * 1000:.1f} ms, t2 {t2} ms", file=sys.stderr)


def run(
    quick: bool = False,
    runs: int | None = None,
    backends: tuple[str, ...] = BACKENDS,
    verbose: bool = False,
) -> list[Result]:
    n = runs if runs is not None else (2 if quick else 10)
    window = 8.0 if quick else WINDOW_S
    theirs = measure_codex_native(n, window)
    if verbose:
        _dump("native codex", theirs)
    results = []
    for backend in backends:
        try:
            ours = measure_threadline(backend, n, window)
        except Exception as exc:  # one backend failing must not hide the others
            results.append(
                Result(
                    f"P4-{backend}",
                    f"turn/cancel ({backend})",
                    "error",
                    "-",
                    None,
                    "median <= 50 ms",
                    False,
                    str(exc)[:200],
                )
            )
            continue
        if verbose:
            _dump(backend, ours)
        results.append(_row(backend, ours, theirs))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke mode: 2 runs per backend")
    parser.add_argument("--runs", type=int, default=None)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("-v", "--verbose", action="store_true", help="per-run figures on stderr")
    args = parser.parse_args()
    backends = tuple(b for b in args.backends.split(",") if b)
    print_table(run(args.quick, args.runs, backends, args.verbose))


if __name__ == "__main__":
    main()
