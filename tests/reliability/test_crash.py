"""Crash consistency (issue #8, part 4): threadline is killed with SIGKILL at random moments while
mock turns run on several threads at once, restarted on the same THREADLINE_HOME and checked,
over and over.

What threadline promises, read from the code (server/threads.py, server/turns.py, store/), and
what is checked here after every kill:

- `thread/start` answers only once the thread's meta.json is written (fsynced, renamed into
  place): every thread whose thread/start response the client received is listed, readable and
  resumable after any crash.
- Log entries are queued and written by a batched background flush; the turn runner then flushes
  everything queued so far *and fsyncs it* before it sends `turn/completed`. So a turn whose
  turn/completed the client received is on disk whole: after a restart `thread/read` returns it
  with the same status, timestamps and error, and exactly the items the client saw in its
  `item/completed` notifications, in order. That is the durability promise under test. (A
  kill -9 cannot tell written from fsynced; test_durability.py checks the fsync.)
- An `item/completed` is sent *before* its log line is even queued, so on a turn that never
  completed, an item the client saw may be lost: not promised. What holds instead: the server
  writes items in the order it announces them, so the items on disk and the items the client
  received are both prefixes of what the server sent, and one list is a prefix of the other.
  Such a turn reads back `interrupted` unless its completion entry reached the disk.
- No file is ever half-written: every meta.json is valid JSON naming its directory; every log
  line is valid JSON except a torn last line (a write cut by the kill), which the store must
  skip, also after the next append has terminated it. Stray `.meta.json.*.tmp` files (a kill
  mid-replace) are allowed and counted. Directories are 0700, files 0600.
- Nothing changes once read: a turn read after one restart reads back identically after every
  later one; meta.json's turn_count lies between the turns the client saw complete and the
  completion entries in the log.
- While turns run (until the kill), thread/read returns every turn completed so far whole, and
  never reports a turn of the running server as `interrupted`.

Kill moments are drawn from a seeded RNG (printed; `THREADLINE_CRASH_SEED` replays it): right at
the N-th turn/completed or item/completed the client receives (optionally a few ms later), at a
random time, or the moment a watcher thread sees a log write in progress (a log whose last byte
is not a newline) or a meta.json replace in progress (its temp file). Scripts and kill choices
replay exactly from the seed; how far the server got when the signal lands is up to the
scheduler. Torn log tails are also injected by hand between some kills, so the store's
torn-line handling is exercised on every run, not only when a kill happens to cut a write.

The default run is small (a few kills in well under 30 s); the `slow` variant (scripts/reliability)
runs 100 turns over 10 threads with a kill every few turns.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import stat
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support.client import ROOT, ServerProcess, server_argv, server_env

pytestmark = pytest.mark.e2e

SEED_ENV = "THREADLINE_CRASH_SEED"

Message = dict[str, Any]


@dataclass(frozen=True)
class Plan:
    threads: int
    turns: int  # workload turns (verification turns after each restart come on top)
    kill_every: int  # mean number of workload turns between two kills
    large: int  # upper bound of a large streamed text / command output, in bytes


DEFAULT = Plan(threads=4, turns=20, kill_every=3, large=1 << 20)
SLOW = Plan(threads=10, turns=100, kill_every=4, large=4 << 20)


# -- turn scripts ----------------------------------------------------------------------------------

VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]
KINDS = ["small", "large_text", "run", "large_run", "write", "reason", "sleepy", "fail"]
WEIGHTS = [30, 10, 15, 8, 10, 10, 12, 5]


@dataclass(frozen=True)
class Script:
    text: str
    status: str  # the turn's status when it completes: "completed" | "failed"
    # What the turn's items after the userMessage must be, in order: (type, expected content).
    expect: tuple[tuple[str, Any], ...]
    error: str | None = None


def _say(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def make_script(rng: random.Random, plan: Plan, tag: str) -> Script:
    lines: list[str] = []
    expect: list[tuple[str, Any]] = []

    def text(t: str) -> None:
        lines.append(f"/text {t}")
        expect.append(("agentMessage", t))

    kind = rng.choices(KINDS, WEIGHTS)[0]
    status, error = "completed", None
    if kind == "small":
        text(_say(rng, rng.randint(1, 40)))
    elif kind == "large_text":
        size = rng.randint(plan.large // 16, plan.large // 2)
        n = rng.randint(4, 32)
        text(" ".join(f"{tag}.{i}." + "x" * (size // n) for i in range(n)))
    elif kind == "run":
        n = rng.randint(1, 300)
        lines.append(f"/run seq 1 {n}")
        expect.append(("commandExecution", "".join(f"{i}\n" for i in range(1, n + 1))))
        text(_say(rng, 3))
    elif kind == "large_run":
        size = rng.randint(plan.large // 4, plan.large)
        width = rng.choice([1000, 16384, 65536])
        lines.append(f"/run head -c {size} /dev/zero | tr '\\0' y | fold -w {width}; echo")
        chunks = ["y" * width] * (size // width) + (["y" * (size % width)] if size % width else [])
        expect.append(("commandExecution", "\n".join(chunks) + "\n"))
    elif kind == "write":
        lines.append(f"/write out-{tag}.txt {_say(rng, 5)}")
        expect.append(("fileChange", None))
        text(_say(rng, 2))
    elif kind == "reason":
        thought = _say(rng, rng.randint(1, 20))
        lines.append(f"/reason {thought}")
        expect.append(("reasoning", thought))
        text(_say(rng, rng.randint(1, 20)))
    elif kind == "sleepy":
        text(_say(rng, 4))
        lines.append(f"/sleep {rng.choice([0.01, 0.03, 0.08])}")
        text(_say(rng, 4))
    else:  # fail
        text(_say(rng, 3))
        error = f"boom {tag}"
        lines.append(f"/fail {error}")
        status = "failed"
    return Script("\n".join(lines), status, tuple(expect), error)


def verify_script(tag: str) -> Script:
    words = f"verify {tag}"
    return Script(f"/text {words}", "completed", (("agentMessage", words),))


# -- what the client saw ---------------------------------------------------------------------------


@dataclass
class TurnLog:
    id: str
    thread_id: str
    script: Script | None = None
    items: list[Message] = field(default_factory=list)  # item/completed params.item, in order
    deltas: dict[str, list[str]] = field(default_factory=dict)  # item id → deltas
    completed: Message | None = None  # turn/completed params.turn
    done: trio.Event = field(default_factory=trio.Event)
    life: int = -1  # the server life that started it


@dataclass
class ThreadLog:
    id: str
    turns: list[str] = field(default_factory=list)  # turn ids the client got from turn/start
    adopted: bool = False  # found on disk, its thread/start response never arrived
    # Every turn as read after the last restart: it must never change again.
    snapshot: dict[str, Message] = field(default_factory=dict)


@dataclass
class Stats:
    kills: int = 0
    restarts: int = 0
    files: int = 0
    log_lines: int = 0
    meta_tmp: set[str] = field(default_factory=set)
    dirs_without_meta: set[str] = field(default_factory=set)
    torn_seen: int = 0
    torn_injected: int = 0
    torn_stdout: int = 0
    turn_checks: int = 0
    live_reads: int = 0
    promised_checks: int = 0
    workload_turns: int = 0
    verify_turns: int = 0
    orphan_turns: int = 0
    orphan_threads: int = 0
    lost_unstarted: int = 0
    seen_items_not_durable: int = 0
    kill_modes: Counter[str] = field(default_factory=Counter)


class Ledger:
    def __init__(self) -> None:
        self.threads: dict[str, ThreadLog] = {}
        self.turns: dict[str, TurnLog] = {}

    def turn(self, turn_id: str, thread_id: str) -> TurnLog:
        log = self.turns.get(turn_id)
        if log is None:
            log = self.turns[turn_id] = TurnLog(turn_id, thread_id)
        assert log.thread_id == thread_id, (
            f"turn {turn_id} reported on thread {thread_id}, it belongs to {log.thread_id}"
        )
        return log


def is_prefix(a: list[Any], b: list[Any]) -> bool:
    return len(a) <= len(b) and b[: len(a)] == a


def check_items_match_script(turn: TurnLog) -> None:
    """The completed turn's items are what its script asked for, and the deltas the client got
    concatenate to each streamed item's final text."""
    script = turn.script
    assert script is not None and turn.completed is not None
    assert turn.completed["status"] == script.status, (turn.id, turn.completed)
    if script.error is not None:
        assert turn.completed["error"]["message"] == script.error
    user, *rest = turn.items
    assert user["type"] == "userMessage"
    assert [c.get("text") for c in user["content"]] == [script.text]
    assert [i["type"] for i in rest] == [kind for kind, _ in script.expect], (turn.id, rest)
    for item, (kind, want) in zip(rest, script.expect, strict=True):
        streamed = "".join(turn.deltas.get(item["id"], []))
        if kind == "agentMessage":
            assert item["text"] == want
            assert streamed == want, f"deltas of {item['id']} do not add up to its text"
        elif kind == "commandExecution":
            assert item["status"] == "completed" and item["exitCode"] == 0, item
            assert item["aggregatedOutput"] == want
            assert streamed == want, f"output deltas of {item['id']} do not add up"
        elif kind == "fileChange":
            assert item["status"] == "completed", item
        elif kind == "reasoning":
            assert item["summary"] == [want]


# -- the files on disk -----------------------------------------------------------------------------

KINDS_ON_DISK = {"turnStarted", "item", "turnCompleted"}


@dataclass
class DiskThread:
    meta: Message
    turns: dict[str, Message]  # turn id → {"items": [...], "completion": entry | None}

    @property
    def completions(self) -> int:
        return sum(1 for t in self.turns.values() if t["completion"] is not None)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def check_files(
    home: Path, ledger: Ledger, torn: dict[str, set[bytes]], stats: Stats
) -> dict[str, DiskThread]:
    """Parse every file under THREADLINE_HOME without threadline's help. `torn` holds the torn
    log lines seen so far per thread: once the next append terminated them, they are the only
    invalid lines allowed."""
    threads_dir = home / "threads"
    found: dict[str, DiskThread] = {}
    if not threads_dir.exists():
        assert not ledger.threads, "threads/ is gone"
        return found
    assert mode(threads_dir) == 0o700
    for tdir in sorted(threads_dir.iterdir()):
        if tdir.name.startswith("."):
            continue  # .trash: nothing is ever deleted here
        assert tdir.is_dir() and mode(tdir) == 0o700, tdir
        tid = tdir.name
        names = sorted(p.name for p in tdir.iterdir())
        for name in names:
            path = tdir / name
            stats.files += 1
            assert mode(path) == 0o600, (path, oct(mode(path)))
            assert name in ("meta.json", "log.jsonl") or (
                name.startswith(".meta.json.") and name.endswith(".tmp")
            ), f"unexpected file {path}"
            if name.endswith(".tmp"):
                stats.meta_tmp.add(str(path))  # a kill mid-replace: nothing reads it
        if "meta.json" not in names:
            # A kill between mkdir and the first meta write of thread/start: not a thread.
            assert tid not in ledger.threads, f"thread {tid} lost its meta.json"
            stats.dirs_without_meta.add(tid)
            continue
        meta = json.loads((tdir / "meta.json").read_bytes())  # never half-written
        assert isinstance(meta, dict) and meta["id"] == tid, meta
        assert meta["backend"] == "mock" and isinstance(meta["turn_count"], int), meta
        known = torn.setdefault(tid, set())
        found[tid] = DiskThread(meta, parse_log(tdir / "log.jsonl", known, stats))
    return found


def parse_log(path: Path, known: set[bytes], stats: Stats) -> dict[str, Message]:
    turns: dict[str, Message] = {}
    if not path.exists():
        return turns
    data = path.read_bytes()
    lines = data.split(b"\n")
    for n, line in enumerate(lines):
        last = n == len(lines) - 1
        if last and not line:
            break  # the file ends with a newline
        stats.log_lines += 1
        try:
            entry = json.loads(line)
        except ValueError:
            if last:
                # A write cut by the kill: the store must skip it (and terminate it later).
                if line not in known:
                    stats.torn_seen += 1
                    known.add(line)
                continue
            assert line in known, f"{path}:{n + 1}: corrupt line {line[:200]!r}"
            continue
        assert isinstance(entry, dict) and entry.get("kind") in KINDS_ON_DISK, entry
        turn = turns.setdefault(entry["turn_id"], {"items": [], "completion": None})
        if entry["kind"] == "item":
            turn["items"].append(entry["item"])
        elif entry["kind"] == "turnCompleted" and turn["completion"] is None:
            turn["completion"] = entry
    return turns


def inject_torn_tail(
    home: Path, rng: random.Random, torn: dict[str, set[bytes]], stats: Stats
) -> None:
    """Simulate a kill in the middle of an append: a valid entry cut short, no newline."""
    logs = [t for t in torn if (home / "threads" / t / "log.jsonl").exists()]
    if not logs:
        return
    tid = rng.choice(sorted(logs))
    path = home / "threads" / tid / "log.jsonl"
    entry = {
        "kind": "item",
        "turn_id": "00000000-0000-4000-8000-000000000000",
        "item": {"type": "agentMessage", "id": "lost", "text": _say(rng, 30)},
        "completed_at_ms": 1,
    }
    line = json.dumps(entry).encode()
    with path.open("ab") as fh:
        fh.write(line[: rng.randint(1, len(line) - 2)])
    tail = path.read_bytes().rsplit(b"\n", 1)[-1]
    torn[tid].add(tail)
    stats.torn_injected += 1


# -- the crash run ---------------------------------------------------------------------------------


class SampledServer(ServerProcess):
    """Validates a sample of the messages against the schemas: the first few of each method
    in every server life, then one in 20; of the thread/read and thread/resume answers, which
    carry every turn of a thread, only the first. Validating all of them took most of the run
    (a notification costs milliseconds against the whole union); this suite is about what
    survives a crash, and the sample still catches a malformed message kind."""

    FIRST, EVERY = 3, 20
    BIG = ("thread/read", "thread/resume")

    def __init__(self, proc: trio.Process, nursery: trio.Nursery) -> None:
        super().__init__(proc, nursery)
        self._seen: Counter[str] = Counter()

    def _validate(self, message: Any) -> None:
        key = "?"
        if isinstance(message, dict):
            key = message.get("method") or str(self._methods.get(message.get("id")))
        n = self._seen[key]
        self._seen[key] += 1
        if n == 0 or (key not in self.BIG and (n < self.FIRST or n % self.EVERY == 0)):
            super()._validate(message)


class _End:
    """Queued after the last message of a dead server."""


class KillSwitch:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.mode: str | None = None
        self.killed = trio.Event()
        self._lock = threading.Lock()
        self._fired = False

    @property
    def fired(self) -> bool:
        return self._fired

    def kill(self, mode: str) -> bool:
        """SIGKILL the server (once; safe from any thread: the watcher thread kills through
        this, then its trio task sets `killed`). False if it was killed already."""
        with self._lock:
            if self._fired:
                return False
            os.kill(self.pid, signal.SIGKILL)
            self._fired = True
            self.mode = mode
            return True

    def fire(self, mode: str) -> None:
        self.kill(mode)
        self.killed.set()


def watch_for_a_write(home: Path, switch: KillSwitch, stop: threading.Event) -> None:
    """Kill the server the moment a log write (a log that grew and whose last byte is not a
    newline) or a meta.json replace (a new temp file) is seen in progress. Polls: a big append
    takes a millisecond or so, a meta replace (fsync) longer. Stray temp files and torn tails
    left by earlier kills are not news."""
    threads_dir = home / "threads"
    sizes: dict[str, int] = {}
    old_tmp: set[str] = set()
    first = True
    while not stop.is_set() and not switch.fired:
        try:
            tdirs = list(os.scandir(threads_dir))
        except FileNotFoundError:
            tdirs = []
        for tdir in tdirs:
            try:
                entries = list(os.scandir(tdir.path))
            except OSError:
                continue
            for entry in entries:
                if entry.name.endswith(".tmp"):
                    if first:
                        old_tmp.add(entry.path)
                    elif entry.path not in old_tmp:
                        switch.kill("during a meta.json replace")
                        return
                if entry.name != "log.jsonl":
                    continue
                try:
                    size = entry.stat().st_size
                    before = sizes.get(entry.path)
                    sizes[entry.path] = size
                    if first or size == before:
                        continue
                    fd = os.open(entry.path, os.O_RDONLY)
                    try:
                        tail = os.pread(fd, 1, size - 1) if size else b"\n"
                    finally:
                        os.close(fd)
                except OSError:
                    continue
                if tail != b"\n":
                    switch.kill("during a log append")
                    return
        first = False
        time.sleep(0.0002)


class Epoch:
    """One life of the server: start, verify everything, run turns until killed."""

    def __init__(self, run: CrashRun, srv: ServerProcess, number: int) -> None:
        self.run = run
        self.srv = srv
        self.number = number
        self.switch = KillSwitch(srv.pid)
        self.drained = trio.Event()
        self.turns_done = 0  # workload turn/completed and item/completed received
        self.items_done = 0
        self.workload = False
        self.quota = 0  # workload turns this life may start
        self.started = 0
        self.trigger: tuple[str, int, float] | None = None
        self.nursery: trio.Nursery | None = None
        # ServerProcess.send is not safe for concurrent senders (one write per message).
        self._send_lock = trio.Lock()

    async def send(self, message: Message) -> None:
        async with self._send_lock:
            await self.srv.send(message)

    async def call(self, method: str, params: Any) -> Any:
        rid = self.srv.new_id()
        response = self.srv.expect(rid, method)
        await self.send({"id": rid, "method": method, "params": params})
        message = await response.receive()
        assert "error" not in message, f"{method} failed: {message['error']}"
        return message["result"]

    # -- routing ---------------------------------------------------------------------------

    async def route(self) -> None:
        while True:
            message = await self.srv.events.receive()
            if isinstance(message, _End):
                self.drained.set()
                return
            await self._on(message)

    async def _on(self, message: Any) -> None:
        assert isinstance(message, dict), message
        method = message.get("method")
        params = message.get("params") or {}
        ledger = self.run.ledger
        if "id" in message and method is not None:
            # Approvals (/run, /write): accept. The server may be dead already.
            assert method in (
                "item/commandExecution/requestApproval",
                "item/fileChange/requestApproval",
            ), message
            ledger.turn(params["turnId"], params["threadId"])
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.send({"id": message["id"], "result": {"decision": "accept"}})
            return
        if method == "turn/started":
            ledger.turn(params["turn"]["id"], params["threadId"])
        elif method == "item/completed":
            turn = ledger.turn(params["turnId"], params["threadId"])
            turn.items.append(params["item"])
            if self.workload:
                self.items_done += 1
                self._maybe_kill("item")
        elif method in ("item/agentMessage/delta", "item/commandExecution/outputDelta"):
            turn = ledger.turn(params["turnId"], params["threadId"])
            turn.deltas.setdefault(params["itemId"], []).append(params["delta"])
        elif method in ("item/started", "thread/tokenUsage/updated", "turn/diff/updated", "error"):
            ledger.turn(params["turnId"], params["threadId"])
        elif method == "turn/completed":
            turn = ledger.turn(params["turn"]["id"], params["threadId"])
            assert turn.completed is None, f"a second turn/completed for {turn.id}"
            turn.completed = params["turn"]
            turn.done.set()
            if self.workload:
                self.turns_done += 1
                self._maybe_kill("turn")

    def _maybe_kill(self, what: str) -> None:
        if not self.workload or self.trigger is None:
            return
        kind, at, delay = self.trigger
        count = self.turns_done if what == "turn" else self.items_done
        if kind != what or count != at:
            return
        label = f"at the Nth {what}/completed" + (" +1-20ms" if delay else "")
        if delay == 0:
            self.switch.fire(label)
        else:
            assert self.nursery is not None
            self.nursery.start_soon(self._kill_later, delay, label)

    async def _kill_later(self, delay: float, label: str) -> None:
        await trio.sleep(delay)
        self.switch.fire(label)

    # -- requests ----------------------------------------------------------------------------

    async def start_thread(self) -> str:
        result = await self.call(
            "thread/start", {"modelProvider": "mock", "cwd": str(self.run.workdir)}
        )
        tid: str = result["thread"]["id"]
        self.run.ledger.threads[tid] = ThreadLog(tid)
        return tid

    async def run_turn(self, tid: str, script: Script) -> TurnLog:
        result = await self.call(
            "turn/start", {"threadId": tid, "input": [{"type": "text", "text": script.text}]}
        )
        turn = self.run.ledger.turn(result["turn"]["id"], tid)
        turn.script = script
        turn.life = self.number
        self.run.ledger.threads[tid].turns.append(turn.id)
        await turn.done.wait()
        return turn


class CrashRun:
    def __init__(self, plan: Plan, seed: int, home: Path, workdir: Path) -> None:
        self.plan = plan
        self.seed = seed
        self.rng = random.Random(seed)
        self.home = home
        self.workdir = workdir
        self.ledger = Ledger()
        self.stats = Stats()
        self.disk: dict[str, DiskThread] = {}  # the files as parsed after the last kill
        self.torn: dict[str, set[bytes]] = {}
        self.accounted: set[str] = set()  # turns whose unpromised losses were counted
        self.promised_final = 0
        # Each worker owns one thread slot and its own list of scripts, drawn up front so the
        # seed alone fixes them whatever the interleaving.
        self.slots: list[str | None] = [None] * plan.threads
        self.pending: list[list[Script]] = [[] for _ in range(plan.threads)]
        for n in range(plan.turns):
            self.pending[n % plan.threads].append(make_script(self.rng, plan, f"w{n}"))

    # -- one life of the server -------------------------------------------------------------

    async def life(self, number: int, *, final: bool, audit: bool = False) -> None:
        """Start the server and verify everything; then run turns until the kill, or (final)
        exit cleanly. An audit only reads: no resume, no turn."""
        async with trio.open_nursery() as nursery:
            proc = await trio.lowlevel.open_process(
                server_argv(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=server_env(self.home, {"THREADLINE_LOG_LEVEL": "WARNING"}),
                cwd=str(ROOT),
            )
            srv = SampledServer(proc, nursery)
            nursery.start_soon(srv._read_stdout)
            nursery.start_soon(srv._read_stderr)
            epoch = Epoch(self, srv, number)
            epoch.nursery = nursery
            nursery.start_soon(epoch.route)
            with trio.fail_after(120):
                await srv.initialize()
                await self.verify(epoch, resume=not audit)
            if final:
                await srv.close_stdin()
                assert await srv.wait(20) == 0, srv.stderr_text[-3000:]
                await srv.stdout_closed.wait()
                srv.events_send.send_nowait(_End())
            else:
                with trio.fail_after(120):
                    await self.workload(epoch)
            await epoch.drained.wait()
            errors = srv.schema_errors
            if not final and errors and srv.raw_lines:
                # The kill can cut the server's last stdout line short, like a log line.
                torn = f"non-JSON line on stdout: {srv.raw_lines[-1][:300]!r}"
                if errors[-1] == torn:
                    errors = errors[:-1]
                    self.stats.torn_stdout += 1
            assert not errors, "\n".join(errors[:5])
            nursery.cancel_scope.cancel()

    async def workload(self, epoch: Epoch) -> None:
        srv, switch = epoch.srv, epoch.switch
        rng = self.rng
        # This life starts `quota` turns (a few), and is killed somewhere among them; if the
        # trigger does not come (e.g. the turns fail early), it is killed once they are done.
        epoch.quota = rng.randint(1, 2 * self.plan.kill_every - 1)
        mode = rng.choice(["turn", "turn", "item", "item", "time", "write", "write"])
        delay = rng.choice([0.0, 0.0, 0.001, 0.005, 0.02])
        # Drawn here, not in the tasks: trio's scheduling order varies, the draws must not.
        at_turn = rng.randint(1, epoch.quota)
        at_item = rng.randint(1, 2 * epoch.quota)  # a turn has 2-4 items (userMessage first)
        at_time = rng.uniform(0, 0.15)
        reader_rng = random.Random(rng.random())
        stop_watch = threading.Event()

        async def workers() -> None:
            async with trio.open_nursery() as inner:
                for slot in range(self.plan.threads):
                    inner.start_soon(self.worker, epoch, slot)
            switch.fire("idle, its turns done")  # no trigger fired: kill it at rest

        async def timer() -> None:
            await trio.sleep(at_time)
            switch.fire("at a random time")

        async def watcher() -> None:
            await trio.to_thread.run_sync(
                watch_for_a_write, self.home, switch, stop_watch, abandon_on_cancel=True
            )
            switch.killed.set()

        epoch.workload = True
        async with trio.open_nursery() as nursery:
            if mode == "turn":
                epoch.trigger = (mode, at_turn, delay)
            elif mode == "item":
                epoch.trigger = (mode, at_item, delay)
            elif mode == "time":
                nursery.start_soon(timer)
            else:
                nursery.start_soon(watcher)
            nursery.start_soon(workers)
            nursery.start_soon(self.live_reader, epoch, reader_rng)
            await switch.killed.wait()
            stop_watch.set()
            await srv.proc.wait()
            await srv.stdout_closed.wait()  # everything the server wrote has been read
            srv.events_send.send_nowait(_End())
            await epoch.drained.wait()
            # Let every request waiter take the responses that did arrive.
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
        self.stats.kills += 1
        self.stats.kill_modes[switch.mode or "?"] += 1

    async def live_reader(self, epoch: Epoch, rng: random.Random) -> None:
        """thread/read while turns run and until the kill: every turn whose turn/completed was
        received before the read was sent is in it, whole; a turn of this life is never
        `interrupted` (it is `inProgress`, or done by the time the server read its log)."""
        ledger = self.ledger
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while not epoch.switch.fired:
                await trio.sleep(rng.uniform(0.002, 0.03))
                threads = sorted(t for t in ledger.threads if ledger.threads[t].turns)
                if not threads:
                    continue
                tid = rng.choice(threads)
                done_before = [
                    ledger.turns[t]
                    for t in ledger.threads[tid].turns
                    if ledger.turns[t].completed is not None
                ]
                read = await epoch.call("thread/read", {"threadId": tid, "includeTurns": True})
                by_id = {t["id"]: t for t in read["thread"]["turns"]}
                for log in done_before:
                    assert log.completed is not None
                    got = by_id.get(log.id)
                    assert got is not None, f"completed turn {log.id} missing from a live read"
                    assert got["status"] == log.completed["status"], (got, log.completed)
                    assert got["items"] == log.items, f"live read: items of {log.id} differ"
                for turn_id, got in by_id.items():
                    log_or_none = ledger.turns.get(turn_id)
                    if log_or_none is not None and log_or_none.life == epoch.number:
                        assert got["status"] != "interrupted", f"running turn {turn_id}: {got}"
                self.stats.live_reads += 1

    async def worker(self, epoch: Epoch, slot: int) -> None:
        try:
            await self._worker(epoch, slot)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            if not epoch.switch.fired:
                raise
            # A request hit the dead server's stdin.

    async def _worker(self, epoch: Epoch, slot: int) -> None:
        pending = self.pending[slot]
        while pending and epoch.started < epoch.quota and not epoch.switch.fired:
            if self.slots[slot] is None:
                self.slots[slot] = await epoch.start_thread()
            tid = self.slots[slot]
            assert tid is not None
            if epoch.started >= epoch.quota:
                return
            epoch.started += 1
            script = pending.pop(0)
            self.stats.workload_turns += 1
            await epoch.run_turn(tid, script)

    # -- after every restart ----------------------------------------------------------------

    async def verify(self, epoch: Epoch, *, resume: bool = True) -> None:
        disk = self.disk
        listed: list[Message] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 7}
            if cursor:
                params["cursor"] = cursor
            page = await epoch.call("thread/list", params)
            listed += page["data"]
            cursor = page.get("nextCursor")
            if not cursor:
                break
        ids = [t["id"] for t in listed]
        assert len(ids) == len(set(ids)), ids
        assert set(ids) == set(disk), "thread/list and the meta files on disk disagree"
        missing = set(self.ledger.threads) - set(ids)
        assert not missing, f"known threads not listed after a restart: {missing}"
        for thread in listed:
            assert thread["status"] == {"type": "notLoaded"}, thread
            assert thread["id"] in disk, f"listed thread {thread['id']} has no readable meta"
            if thread["id"] not in self.ledger.threads:
                # Its thread/start response was cut off by the kill (or the worker's turn/start
                # was); it is a thread like any other now.
                self.ledger.threads[thread["id"]] = ThreadLog(thread["id"], adopted=True)
                self.stats.orphan_threads += 1

        async def one(tid: str) -> None:
            read = await epoch.call("thread/read", {"threadId": tid, "includeTurns": True})
            turns = read["thread"]["turns"]
            self.check_thread(tid, turns, disk[tid])
            if not resume:
                return
            resumed = await epoch.call("thread/resume", {"threadId": tid})
            assert resumed["thread"]["id"] == tid
            assert resumed["thread"]["turns"] == turns
            script = verify_script(f"e{epoch.number} {tid[:8]}")
            turn = await epoch.run_turn(tid, script)
            check_items_match_script(turn)
            self.stats.verify_turns += 1

        async with trio.open_nursery() as nursery:
            for tid in list(self.ledger.threads):
                nursery.start_soon(one, tid)

    def check_thread(self, tid: str, turns: list[Message], disk: DiskThread) -> None:
        ledger, stats = self.ledger, self.stats
        thread = ledger.threads[tid]
        by_id = {t["id"]: t for t in turns}
        assert len(by_id) == len(turns), "a turn is listed twice"
        # thread/read agrees with our own reading of the log.
        assert list(by_id) == list(disk.turns), (tid, list(by_id), list(disk.turns))
        for turn in turns:
            entry = disk.turns[turn["id"]]
            assert turn["items"] == entry["items"]
            completion = entry["completion"]
            if completion is None:
                assert turn["status"] == "interrupted" and turn.get("completedAt") is None, turn
            else:
                assert turn["status"] == completion["status"]
                assert turn["completedAt"] == completion["completed_at"]
        # Known turns keep their order; unknown ones are turns whose turn/start response was
        # still in the server's queue when it died.
        known = [t for t in thread.turns if t in by_id]
        assert [t for t in by_id if t in thread.turns] == known, "turns out of order"
        for turn_id in by_id:
            if turn_id not in thread.turns and turn_id not in thread.snapshot:
                stats.orphan_turns += 1
        completed_by_client = 0
        for turn_id in thread.turns:
            log = ledger.turns[turn_id]
            stats.turn_checks += 1
            if log.completed is not None:
                # The promise: turn/completed received ⇒ the whole turn is on disk.
                completed_by_client += 1
                stats.promised_checks += 1
                assert turn_id in by_id, f"turn {turn_id} completed but is gone after a restart"
                got = by_id[turn_id]
                for key in ("status", "startedAt", "completedAt", "durationMs"):
                    assert got.get(key) == log.completed.get(key), (turn_id, key, got, log)
                assert (got.get("error") or None) == (log.completed.get("error") or None)
                assert got["items"] == log.items, f"items of completed turn {turn_id} differ"
                check_items_match_script(log)
            elif turn_id in by_id:
                got = by_id[turn_id]
                assert is_prefix(got["items"], log.items) or is_prefix(log.items, got["items"]), (
                    f"turn {turn_id}: items on disk and items received diverge"
                )
                if turn_id not in self.accounted:
                    stats.seen_items_not_durable += max(0, len(log.items) - len(got["items"]))
            elif turn_id not in self.accounted:
                # Killed before even its start entry was flushed: nothing was promised.
                stats.lost_unstarted += 1
                stats.seen_items_not_durable += len(log.items)
            self.accounted.add(turn_id)
        for turn_id, before in thread.snapshot.items():
            assert by_id.get(turn_id) == before, f"turn {turn_id} changed after it was read"
        thread.snapshot = by_id
        count = disk.meta["turn_count"]
        assert completed_by_client <= count <= disk.completions, (
            tid,
            completed_by_client,
            count,
            disk.completions,
        )

    # -- the whole run ------------------------------------------------------------------------

    async def main(self) -> None:
        number = 0
        while True:
            final = not any(self.pending)
            await self.life(number, final=final)
            self.disk = check_files(self.home, self.ledger, self.torn, self.stats)
            if final:
                # One more start that only reads: the last verification turns are checked too.
                await self.life(number + 1, final=True, audit=True)
                break
            if number == 0 or self.rng.random() < 0.3:
                inject_torn_tail(self.home, self.rng, self.torn, self.stats)
            number += 1
            self.stats.restarts += 1
        # After the clean exit: every turn the client saw complete, read back once more.
        promised = [t for t in self.ledger.turns.values() if t.completed is not None]
        for turn in promised:
            assert turn.id in self.ledger.threads[turn.thread_id].snapshot
        self.promised_final = len(promised)


async def crash_run(plan: Plan, home: Path, workdir: Path) -> CrashRun:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 32))
    print(f"crash consistency: seed {seed} (replay with {SEED_ENV}={seed}); {plan}")
    run = CrashRun(plan, seed, home, workdir)
    t0 = time.monotonic()
    try:
        await run.main()
    except BaseException:
        print(f"FAILED with seed {seed}: replay with {SEED_ENV}={seed}")
        raise
    s = run.stats
    files = sum(1 for p in home.rglob("*") if p.is_file())
    print(
        f"crash consistency, seed {seed}: {s.kills} kills ({dict(s.kill_modes)}), "
        f"{s.restarts} restarts (+2 after clean exits), {time.monotonic() - t0:.1f}s\n"
        f"  records checked: {s.files} files (now {files}), {s.log_lines} log lines; "
        f"{len(s.meta_tmp)} stray meta temp files, "
        f"{len(s.dirs_without_meta)} thread dirs without meta; "
        f"torn log tails: {s.torn_seen} from kills, {s.torn_injected} injected; "
        f"{s.torn_stdout} stdout lines cut by a kill\n"
        f"  turns: {s.workload_turns} workload + {s.verify_turns} verification; "
        f"{s.turn_checks} turn checks after restarts, {s.promised_checks} of them of turns "
        f"whose turn/completed was received; {run.promised_final} such turns in all, every one "
        f"read back after the last restart; {s.live_reads} thread/reads during the turns\n"
        f"  not promised, seen: {s.lost_unstarted} killed turns with nothing on disk, "
        f"{s.seen_items_not_durable} item/completed seen but not on disk, {s.orphan_turns} "
        f"turns and {s.orphan_threads} threads on disk whose response never arrived"
    )
    assert s.kills >= 2 and s.promised_checks > 0
    return run


async def test_kill_9_during_turns(home: Path, workdir: Path) -> None:
    await crash_run(DEFAULT, home, workdir)


@pytest.mark.slow
async def test_kill_9_during_turns_long(home: Path, workdir: Path) -> None:
    await crash_run(SLOW, home, workdir)
