"""What every CLI's recorder shares: a scenario (the fake model's script, how to drive the CLI,
what to record), a JSON-lines child process in its own process group, the sanitiser that makes
a recording stable and free of machine paths, and the loop that records a CLI's scenarios into
``tests/transcripts/<cli>/`` with a manifest naming the CLI version.

Everything runs on 127.0.0.1: each scenario gets a fresh temp dir (the CLI's home, the work
dir) and a fresh fake model server from ``tests/fakes``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.cli_env import cmdline, marked_pids
from tests.support.tools import ROOT, TOOLS_BIN, TOOLS_DIR, pins

__all__ = [
    "CliRecorder",
    "JsonProcess",
    "RpcClient",
    "Run",
    "Sanitiser",
    "Scenario",
    "record_cli",
]

#: How long one scenario may take before the recorder gives up on it.
SCENARIO_TIMEOUT = 90.0
#: Set in every CLI's environment (and so in its tools'): finds what a scenario left running.
MARKER_VAR = "THREADLINE_RECORDER"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Ids the fakes make up (`msg_fake…`, `toolu_fake…`, `call_fake…`, ...).
_FAKE_ID = re.compile(r"\b([a-z]+)_fake([0-9a-f]{20})\b")
#: A UTC clock time, ISO 8601 (`2026-11-25T11:04:55.817Z`).
_CLOCK = (r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "2000-01-01T00:00:00.000Z")


# -- sanitising ----------------------------------------------------------------------------------


class Sanitiser:
    """Rewrites every string of a recording: machine paths and the fake's port become
    placeholders, UTC clock times a fixed time; ids that differ on every run (UUIDs, the fakes'
    ids, and whatever `volatile` patterns a CLI adds) become stand-ins of the same shape,
    numbered in order of first appearance within a scenario (`next_scenario` starts over); the
    values of the keys in `fixed` (durations, clock times, pids) are replaced by the value given
    there (a null stays null)."""

    def __init__(self, fixed: Mapping[str, Any] | None = None) -> None:
        self._literals: list[tuple[str, str]] = []
        self._patterns: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = []
        self._ids: dict[str, str] = {}
        self._fixed = dict(fixed or {})
        self.pattern(*_CLOCK)
        self.volatile(_UUID, lambda n, _match: f"00000000-0000-4000-8000-{n:012x}")
        self.volatile(_FAKE_ID, lambda n, match: f"{match.group(1)}_fake{n:020x}")

    def next_scenario(self) -> None:
        self._ids.clear()

    def literal(self, real: str | Path, placeholder: str) -> None:
        """Replace `real` (a path: also its resolved form) by `placeholder`."""
        for text in {str(real), os.path.realpath(real)} if isinstance(real, Path) else {real}:
            if text and text not in dict(self._literals):
                self._literals.append((text, placeholder))
        self._literals.sort(key=lambda pair: -len(pair[0]))  # longest (most specific) first

    def pattern(self, regex: str | re.Pattern[str], replacement: str) -> None:
        self._patterns.append((re.compile(regex), replacement))

    def volatile(
        self, regex: str | re.Pattern[str], stand_in: Callable[[int, re.Match[str]], str]
    ) -> None:
        """Replace each distinct match of `regex` by `stand_in(n, match)`, n counting them."""

        def replace(match: re.Match[str]) -> str:
            key = match.group(0)
            if key not in self._ids:
                self._ids[key] = stand_in(len(self._ids) + 1, match)
            return self._ids[key]

        self._patterns.append((re.compile(regex), replace))

    def text(self, value: str) -> str:
        for real, placeholder in self._literals:
            value = value.replace(real, placeholder)
        for regex, replacement in self._patterns:
            value = regex.sub(replacement, value)
        return value

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            return {
                self.text(k): self._fixed[k] if k in self._fixed and v is not None else self(v)
                for k, v in value.items()
            }
        return value


# -- a JSON-lines child process ------------------------------------------------------------------


class JsonProcess:
    """A CLI speaking JSON lines on stdio, in its own process group. Every line either way is
    kept in `log` as ``(direction, message)``: ``"in"`` (what we sent) or ``"out"`` (its
    stdout; a line that is not JSON is kept as a string). Stderr is collected in `stderr`."""

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.log: list[tuple[str, Any]] = []
        self.stderr = ""
        self._out: list[Any] = []
        self._cursor = 0
        self._cond = threading.Condition()
        self._eof = False
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if not line.strip():
                continue
            try:
                message: Any = json.loads(line)
            except ValueError:
                message = line
            with self._cond:
                self._out.append(message)
                self.log.append(("out", message))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr += raw.decode("utf-8", "replace")

    def send(self, message: Any) -> None:
        self.send_line(json.dumps(message), message)

    def send_line(self, line: str, logged: Any = None) -> None:
        """Write one line to stdin (logged as `logged`, default: the line itself)."""
        assert self.proc.stdin is not None
        with self._cond:
            self.log.append(("in", line if logged is None else logged))
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def note(self, text: str) -> None:
        """Put a note into `log` (``("note", text)``) between the lines."""
        with self._cond:
            self.log.append(("note", text))

    def expect(self, what: str, pred: Callable[[Any], bool], timeout: float = 60.0) -> Any:
        """The next stdout message (after the last one `expect` returned) matching `pred`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                while self._cursor < len(self._out):
                    message = self._out[self._cursor]
                    self._cursor += 1
                    if pred(message):
                        return message
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    state = "exited" if self._eof else f"no answer within {timeout} s"
                    raise RuntimeError(f"{what}: {state}; stderr:\n{self.stderr[-2000:]}")
                self._cond.wait(left)

    def quiet(self, seconds: float) -> None:
        """Wait until no stdout line came for `seconds`."""
        with self._cond:
            while True:
                count = len(self._out)
                self._cond.wait(seconds)
                if len(self._out) == count or self._eof:
                    return

    def outputs(self) -> list[Any]:
        with self._cond:
            return list(self._out)

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()

    def finish(self, timeout: float = 30.0) -> int:
        """Close stdin, wait for the exit (the whole group is killed after `timeout`), and for
        the last output; return the exit code."""
        self.close_stdin()
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = -signal.SIGKILL
        self.kill_group()
        return code

    def kill_group(self) -> None:
        """Kill the process group while its leader is not yet reaped (after that its id may be
        anyone's; `Run.kill_leftovers` finds the rest by their marker), and close the pipes
        once read."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self.close_stdin()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


# -- a scripted JSON-RPC client -----------------------------------------------------------------


class RpcClient:
    """A scripted JSON-RPC client of a `JsonProcess` (Codex app-server, ACP agents). `request`
    waits `settle` s for the server to fall quiet (so the notifications it sends on its own land
    in the same place of a recording every time), sends, and waits for the answer; `until` waits
    for a message. Requests from the server met on the way are answered by `answer` (None: left
    unanswered, kept in `pending`)."""

    def __init__(
        self, proc: JsonProcess, *, dirs: tuple[str, str], jsonrpc: bool, settle: float
    ) -> None:
        self.proc = proc
        self.dirs = dirs  # (ours, theirs) in the recording
        self.jsonrpc = jsonrpc  # send "jsonrpc": "2.0"
        self.settle = settle
        self.answer: Callable[[dict[str, Any]], Any] = lambda _request: None
        self.pending: list[dict[str, Any]] = []
        self._next_id = 0
        self._backlog: list[dict[str, Any]] = []

    def _send(self, message: dict[str, Any]) -> None:
        self.proc.send({"jsonrpc": "2.0", **message} if self.jsonrpc else message)

    def note(self, text: str) -> None:
        self.proc.quiet(self.settle)
        self.proc.note(text)

    def request(self, method: str, params: Any = None, *, wait: bool = True) -> dict[str, Any]:
        """Send a request; its answer (``{"id": ...}`` only, without `wait`)."""
        self._next_id += 1
        rid = self._next_id
        message: dict[str, Any] = {"id": rid, "method": method}
        if params is not None:
            message["params"] = params
        self.proc.quiet(self.settle)
        self._send(message)
        if not wait:
            return {"id": rid}
        return self.answer_to(rid, method)

    def answer_to(self, rid: int, what: str) -> dict[str, Any]:
        return self.until(
            f"the answer to {what}", lambda m: m.get("id") == rid and "method" not in m
        )

    def notify(self, method: str, params: Any = None) -> None:
        self.proc.quiet(self.settle)
        self._send({"method": method} if params is None else {"method": method, "params": params})

    def respond(self, request: dict[str, Any], result: Any) -> None:
        self._send({"id": request["id"], "result": result})

    def finish(self) -> None:
        """Let the server fall quiet, then end it (stdin EOF)."""
        self.proc.quiet(self.settle)
        self.proc.finish()

    def until(self, what: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        for i, message in enumerate(self._backlog):
            if pred(message):
                return self._backlog.pop(i)
        while True:
            message = self.proc.expect(what, lambda m: isinstance(m, dict))
            if "method" in message and "id" in message:
                answer = self.answer(message)
                if answer is None:
                    self.pending.append(message)
                else:
                    self.respond(message, answer)
            if pred(message):
                return dict(message)
            self._backlog.append(message)

    def lines(self) -> list[dict[str, Any]]:
        """The recording: ``{"dir": <ours|theirs>, "msg": ...}`` (``"raw"`` for a line that is
        not JSON) and ``{"dir": "note", "note": ...}``."""
        out: list[dict[str, Any]] = []
        for direction, message in self.proc.log:
            if direction == "note":
                out.append({"dir": "note", "note": message})
                continue
            key = "msg" if isinstance(message, dict) else "raw"
            out.append({"dir": self.dirs[0] if direction == "in" else self.dirs[1], key: message})
        return out


# -- scenarios and their runs --------------------------------------------------------------------


@dataclass
class Run:
    """One scenario being recorded: its temp dir, the fake, the CLI environment, and the
    recordings it writes (file name → lines)."""

    cli: CliRecorder
    scenario: Scenario
    tmp: Path
    work: Path
    fake: Any
    env: dict[str, str]
    binary: Path
    files: dict[str, list[Any]] = field(default_factory=dict)
    processes: list[JsonProcess] = field(default_factory=list)

    def spawn(self, *args: str, env: Mapping[str, str] | None = None) -> JsonProcess:
        proc = JsonProcess([str(self.binary), *args], cwd=self.work, env=env or self.env)
        self.processes.append(proc)
        return proc

    def write(self, lines: Sequence[Any], name: str | None = None) -> None:
        """Record `lines` as ``<name>.jsonl`` (default: the scenario's name)."""
        self.files.setdefault(name or self.scenario.name, []).extend(lines)

    @property
    def marker(self) -> str:
        return f"{MARKER_VAR}={self.tmp}"

    def running(self, *argv: str) -> bool:
        """Whether a process of this scenario runs `argv` (its first words)."""
        return any(cmdline(p)[: len(argv)] == list(argv) for p in marked_pids(self.marker))

    def kill_leftovers(self) -> None:
        """Kill every process of this scenario: the CLIs' groups, then whatever still carries
        the scenario's marker (tools in groups of their own)."""
        for proc in self.processes:
            proc.kill_group()
        for pid in marked_pids(self.marker):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@dataclass(frozen=True)
class Scenario:
    """`name` names what it records; `rules` are the fake model's script (or make it from the
    work dir); `drive` runs the CLI through it and stores what to record with `Run.write`."""

    name: str
    rules: Sequence[Any] | Callable[[Path], Sequence[Any]]
    drive: Callable[[Run], None]
    about: str = ""
    default: Any = None  # the fake's default rule


@dataclass(frozen=True)
class CliRecorder:
    """A CLI: its binary in TOOLS_BIN, the fake it talks to (`make_fake(rules, default)`), how
    its environment is set up (`prepare(run)` fills `run.env`), and its scenarios."""

    cli: str
    make_fake: Callable[[Sequence[Any], Any], Any]
    prepare: Callable[[Run], None]
    scenarios: Sequence[Scenario]
    sanitiser: Callable[[], Sanitiser] = Sanitiser

    @property
    def binary(self) -> Path:
        return TOOLS_BIN / self.cli

    def package(self) -> tuple[str, str]:
        """(npm package, installed version) of the CLI in TOOLS_DIR."""
        package = next(p for cli, p, _ in pins() if cli == self.cli)
        manifest = TOOLS_DIR / "node_modules" / package / "package.json"
        return package, str(json.loads(manifest.read_text())["version"])


@contextlib.contextmanager
def _scenario_dirs(cli: str) -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix=f"tl-rec-{cli}-")).resolve()
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_scenario(cli: CliRecorder, scenario: Scenario, sanitise: Sanitiser) -> Run:
    sanitise.next_scenario()
    with _scenario_dirs(cli.cli) as tmp:
        work = tmp / "work"
        work.mkdir()
        rules = scenario.rules(work) if callable(scenario.rules) else scenario.rules
        with cli.make_fake(rules, scenario.default) as fake:
            run = Run(cli, scenario, tmp, work, fake, {}, cli.binary)
            sanitise.literal(work, "<WORK>")
            sanitise.literal(tmp, "<TMP>")
            sanitise.literal(tmp.name, f"tl-rec-{cli.cli}")  # (in paths relative to its parent)
            sanitise.literal(f"127.0.0.1:{fake.port}", "127.0.0.1:<PORT>")
            cli.prepare(run)
            run.env[MARKER_VAR] = str(tmp)
            guard = threading.Timer(SCENARIO_TIMEOUT, run.kill_leftovers)
            guard.start()
            try:
                scenario.drive(run)
            finally:
                guard.cancel()
                run.kill_leftovers()
            if fake.errors:
                raise RuntimeError(f"{scenario.name}: the fake failed:\n{fake.errors[0]}")
        run.files = {name: sanitise(lines) for name, lines in run.files.items()}
        return run


def record_cli(
    cli: CliRecorder,
    out: Path,
    only: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Record the scenarios of `cli` (all, or those named in `only`) into ``out/<cli>/`` and
    write its manifest; return the files written. Recording all of them first removes the old
    recordings there (a scenario may have been renamed)."""
    package, version = cli.package()
    sanitise = cli.sanitiser()
    sanitise.literal(ROOT, "<REPO>")
    sanitise.literal(Path.home(), "<HOME>")
    files: dict[str, list[Any]] = {}
    about: dict[str, str] = {}
    for scenario in cli.scenarios:
        if only is not None and scenario.name not in only:
            continue
        started = time.monotonic()
        run = _run_scenario(cli, scenario, sanitise)
        for name, lines in run.files.items():
            files[name] = lines
            about[name] = scenario.about
        log(f"  {cli.cli} {scenario.name}: {time.monotonic() - started:.1f} s")
    target = out / cli.cli
    if target.is_dir() and only is None:
        for old in target.glob("*.jsonl"):
            old.unlink()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, lines in files.items():
        path = target / f"{name}.jsonl"
        path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        written.append(path)
    manifest = {
        "cli": cli.cli,
        "package": package,
        "version": version,
        "recordedWith": f"scripts/record-transcripts {cli.cli}",
        "files": dict(sorted(about.items())),
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return written


def wait_until(pred: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
