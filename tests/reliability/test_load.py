"""Load (issue #8, part 7): 50 threads stream turns at once through the mock backend while the
client reads threadline's stdout slowly — a few KB at a time with pauses, and now and then not
at all for a while — so the pipe fills and threadline must hold back (its outbound queue is
bounded: turns wait in `notify` when it is full).

Checked for every turn: the deltas of each agentMessage concatenate to its item/completed text,
which is exactly what the script asked for, word by word (nothing lost, nothing reordered, no
delta twice); every notification names the thread and turn it belongs to (turn and item ids
learnt from the turn/start response and item/started; item ids unique across the run); exactly
one turn/completed per turn, and nothing about a turn after it. threadline's memory is sampled
from /proc/<pid>/status during the run (VmRSS; VmHWM for the kernel's own peak) and bounded.

The reader is a lean one (stdlib json, no per-message schema validation: validating every
message made the client the bottleneck); a sample of the messages is validated against
`schemas/`.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import struct
import subprocess
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import ROOT, server_argv, server_env
from tests.support.schema_check import validate_outbound

pytestmark = pytest.mark.e2e

Message = dict[str, Any]

RSS_LIMIT_MB = 300
SEED_ENV = "THREADLINE_LOAD_SEED"


@dataclass(frozen=True)
class Load:
    threads: int
    turns: int  # per thread, one after the other
    words: tuple[int, int]  # words (= deltas) of a turn's streamed message, min and max
    big_every: int  # every Nth turn also streams big deltas (0: never)
    chunk: int  # bytes the client reads at a time
    pause: float  # seconds between two reads
    stalls: int  # times the client stops reading for `stall` seconds
    stall: float


DEFAULT = Load(
    threads=50,
    turns=3,
    words=(40, 120),
    big_every=10,
    chunk=4096,
    pause=0.001,
    stalls=3,
    stall=0.3,
)
SLOW = Load(
    threads=50,
    turns=10,
    words=(200, 800),
    big_every=4,
    chunk=16384,
    pause=0.001,
    stalls=10,
    stall=0.5,
)


@dataclass
class TurnState:
    id: str
    thread_id: str
    text: str  # what the streamed agentMessage must say
    reasoning: str
    started: bool = False
    completed: Message | None = None
    items: dict[str, Message] = field(default_factory=dict)  # id → item/started item
    done_items: dict[str, Message] = field(default_factory=dict)  # id → item/completed item
    deltas: dict[str, list[str]] = field(default_factory=dict)
    done: trio.Event = field(default_factory=trio.Event)


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in kB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def pipe_backlog(fd: int) -> int:
    """Bytes written into the pipe and not read yet."""
    buf = fcntl.ioctl(fd, termios.FIONREAD, struct.pack("i", 0))
    return int(struct.unpack("i", buf)[0])


class LoadClient:
    def __init__(self, proc: trio.Process, load: Load, rng: random.Random) -> None:
        self.proc = proc
        self.load = load
        self.rng = rng
        self._next_id = 0
        self._send_lock = trio.Lock()
        self._waiters: dict[int, trio.MemorySendChannel[Message]] = {}
        # Run by the reader on the response itself, before it reads the next line: the
        # notifications that follow a turn/start answer must find their turn registered.
        self._on_response: dict[int, Callable[[Any], None]] = {}
        self.expected_deltas = 0
        self._methods: dict[Any, str] = {}
        self.turns: dict[str, TurnState] = {}
        self.threads: set[str] = set()
        self.item_turn: dict[str, str] = {}  # item id → turn id
        self.messages = 0
        self.deltas = 0
        self.bytes = 0
        self.validated = 0
        self.errors: list[str] = []
        self.max_backlog = 0
        self.rss_samples: list[int] = []
        self.rss_half: int | None = None  # when half the turns had completed
        self.completed_turns = 0
        self.reading = trio.Event()

    # -- plumbing ----------------------------------------------------------------------------

    async def send(self, message: Message) -> None:
        assert self.proc.stdin is not None
        async with self._send_lock:
            await self.proc.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def call(
        self, method: str, params: Any, on_response: Callable[[Any], None] | None = None
    ) -> Any:
        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[Message](1)
        self._waiters[rid] = send
        self._methods[rid] = method
        if on_response is not None:
            self._on_response[rid] = on_response
        await self.send({"id": rid, "method": method, "params": params})
        with trio.fail_after(120):
            response = await recv.receive()
        assert "error" not in response, f"{method}: {response['error']}"
        return response["result"]

    async def read(self) -> None:
        """Read stdout slowly: `chunk` bytes at a time, `pause` between reads, and a few long
        stalls (drawn up front) during which nothing is read at all."""
        stdout = self.proc.stdout
        assert stdout is not None
        load = self.load
        stall_at = sorted(self.rng.uniform(0.05, 0.9) for _ in range(load.stalls))
        buf = bytearray()
        while True:
            chunk = await stdout.receive_some(load.chunk)
            if not chunk:
                break
            self.bytes += len(chunk)
            buf += chunk
            while (end := buf.find(b"\n")) >= 0:
                line = bytes(buf[:end])
                del buf[: end + 1]
                self._line(line)
            progress = self.deltas / max(1, self.expected_deltas)
            if stall_at and progress >= stall_at[0]:
                stall_at.pop(0)
                await trio.sleep(load.stall)
            else:
                await trio.sleep(load.pause)
        assert not buf, f"a torn last line: {bytes(buf[:200])!r}"

    def _line(self, line: bytes) -> None:
        message = json.loads(line)
        self.messages += 1
        if self.messages <= 200 or self.messages % 500 == 0:
            try:
                validate_outbound(message, self._methods)
            except AssertionError as exc:
                self.errors.append(str(exc)[:500])
            self.validated += 1
        if "method" not in message:
            rid = message["id"]
            callback = self._on_response.pop(rid, None)
            if callback is not None and "result" in message:
                callback(message["result"])
            self._waiters.pop(rid).send_nowait(message)
            return
        assert "id" not in message, f"unexpected server request {message}"
        self._notification(message["method"], message["params"])

    # -- routing checks ------------------------------------------------------------------------

    def _turn(self, params: Message, turn_id: str) -> TurnState:
        turn = self.turns.get(turn_id)
        assert turn is not None, f"notification for unknown turn {turn_id}: {params}"
        assert params["threadId"] == turn.thread_id, (
            f"turn {turn_id} of thread {turn.thread_id} reported on {params['threadId']}"
        )
        assert turn.completed is None, f"notification after turn/completed of {turn_id}"
        return turn

    def _notification(self, method: str, params: Message) -> None:
        if method in ("thread/started", "thread/status/changed"):
            tid = params["thread"]["id"] if method == "thread/started" else params["threadId"]
            assert tid in self.threads, f"{method} for unknown thread {tid}"
            return
        if method == "turn/started":
            turn = self._turn(params, params["turn"]["id"])
            assert not turn.started, "turn/started twice"
            turn.started = True
            return
        if method == "turn/completed":
            turn = self._turn(params, params["turn"]["id"])
            assert turn.started
            turn.completed = params["turn"]
            turn.done.set()
            self.completed_turns += 1
            return
        turn = self._turn(params, params["turnId"])
        assert turn.started, f"{method} before turn/started"
        if method == "item/started":
            item = params["item"]
            assert item["id"] not in self.item_turn, f"item id {item['id']} used twice"
            self.item_turn[item["id"]] = turn.id
            turn.items[item["id"]] = item
        elif method == "item/completed":
            item = params["item"]
            assert self.item_turn.get(item["id"]) == turn.id, f"item {item['id']} misrouted"
            assert item["id"] not in turn.done_items, f"item {item['id']} completed twice"
            turn.done_items[item["id"]] = item
        elif method in ("item/agentMessage/delta", "item/reasoning/summaryTextDelta"):
            item_id = params["itemId"]
            assert self.item_turn.get(item_id) == turn.id, f"delta of item {item_id} misrouted"
            assert item_id not in turn.done_items, f"delta after item/completed of {item_id}"
            turn.deltas.setdefault(item_id, []).append(params["delta"])
            self.deltas += 1
        elif method in ("item/reasoning/summaryPartAdded", "thread/tokenUsage/updated"):
            pass
        else:
            raise AssertionError(f"unexpected notification {method}")

    # -- the workload --------------------------------------------------------------------------

    def script(self, thread_no: int, turn_no: int) -> tuple[str, str, str]:
        """(prompt, expected message text, expected reasoning). Every word is unique in the
        run, so a lost, repeated or misrouted delta cannot go unnoticed."""
        load = self.load
        n = self.rng.randint(*load.words)
        tag = f"t{thread_no}.{turn_no}"
        words = [f"{tag}.{i}" for i in range(n)]
        if load.big_every and (thread_no * load.turns + turn_no) % load.big_every == 0:
            words += [f"{tag}.big{i}." + "z" * 8192 for i in range(8)]
        text = " ".join(words)
        reasoning = " ".join(f"{tag}.r{i}" for i in range(self.rng.randint(1, 20)))
        return f"/reason {reasoning}\n/text {text}", text, reasoning

    def plan(self) -> list[list[tuple[str, str, str]]]:
        scripts = [
            [self.script(t, n) for n in range(self.load.turns)] for t in range(self.load.threads)
        ]
        self.expected_deltas = sum(
            len(text.split(" ")) + len(reasoning.split(" "))
            for thread in scripts
            for _, text, reasoning in thread
        )
        return scripts

    async def thread_worker(self, scripts: list[tuple[str, str, str]], workdir: Path) -> None:
        result = await self.call(
            "thread/start",
            {"modelProvider": "mock", "cwd": str(workdir)},
            lambda r: self.threads.add(r["thread"]["id"]),
        )
        tid = result["thread"]["id"]
        for prompt, text, reasoning in scripts:

            def register(r: Any, text: str = text, reasoning: str = reasoning) -> None:
                turn_id = r["turn"]["id"]
                assert turn_id not in self.turns, f"turn id {turn_id} given twice"
                self.turns[turn_id] = TurnState(turn_id, tid, text, reasoning)

            result = await self.call(
                "turn/start",
                {"threadId": tid, "input": [{"type": "text", "text": prompt}]},
                register,
            )
            await self.turns[result["turn"]["id"]].done.wait()

    async def sample(self, stop: trio.Event) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        total = self.load.threads * self.load.turns
        while not stop.is_set():
            self.rss_samples.append(rss_kb(self.proc.pid)[0])
            if self.rss_half is None and self.completed_turns * 2 >= total:
                self.rss_half = self.rss_samples[-1]
            self.max_backlog = max(self.max_backlog, pipe_backlog(fd))
            with trio.move_on_after(0.02):
                await stop.wait()

    def check_turn(self, turn: TurnState) -> None:
        assert turn.completed is not None and turn.completed["status"] == "completed", turn.id
        assert set(turn.items) == set(turn.done_items), f"turn {turn.id}: items left open"
        kinds = [i["type"] for i in turn.done_items.values()]
        assert kinds == ["userMessage", "reasoning", "agentMessage"], kinds
        reasoning, message = list(turn.done_items.values())[1:]
        streamed = "".join(turn.deltas.get(message["id"], []))
        assert message["text"] == turn.text, f"turn {turn.id}: final text is not the script's"
        assert streamed == turn.text, f"turn {turn.id}: deltas do not add up to the text"
        assert len(turn.deltas[message["id"]]) == len(turn.text.split(" "))
        assert reasoning["summary"] == [turn.reasoning]
        assert "".join(turn.deltas.get(reasoning["id"], [])) == turn.reasoning
        assert turn.completed["items"] == [message]  # the summary carries the final answer


async def load_run(load: Load, home: Path, workdir: Path) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 32))
    rng = random.Random(seed)
    print(f"load: seed {seed} (replay the same scripts with {SEED_ENV}={seed}); {load}")
    proc = await trio.lowlevel.open_process(
        server_argv(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=server_env(home, {"THREADLINE_LOG_LEVEL": "WARNING"}),
        cwd=str(ROOT),
    )
    client = LoadClient(proc, load, rng)
    scripts = client.plan()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.read)
            await client.call("initialize", {"clientInfo": {"name": "load", "version": "0"}})
            rss_start = rss_kb(proc.pid)[0]
            stop = trio.Event()
            nursery.start_soon(client.sample, stop)
            t0 = time.monotonic()
            with trio.fail_after(600):
                async with trio.open_nursery() as workers:
                    for thread_scripts in scripts:
                        workers.start_soon(client.thread_worker, thread_scripts, workdir)
            elapsed = time.monotonic() - t0
            stop.set()
            rss_end, hwm = rss_kb(proc.pid)
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with trio.fail_after(30):
                rc = await proc.wait()
            assert rc == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    assert not client.errors, "\n".join(client.errors[:5])
    assert len(client.threads) == load.threads
    assert len(client.turns) == load.threads * load.turns
    for turn in client.turns.values():
        client.check_turn(turn)
    assert client.deltas == client.expected_deltas
    peak = max(client.rss_samples) / 1024
    print(
        f"load: {load.threads} threads x {load.turns} turns = {len(client.turns)} turns, "
        f"{client.deltas} deltas, {client.messages} messages "
        f"({client.bytes / 1e6:.1f} MB, {client.validated} schema-validated) in {elapsed:.1f}s "
        f"({client.messages / elapsed:.0f} msg/s); pipe backlog up to {client.max_backlog} bytes\n"
        f"  threadline RSS: start {rss_start / 1024:.1f} MB, peak sampled {peak:.1f} MB "
        f"(VmHWM {hwm / 1024:.1f} MB, {len(client.rss_samples)} samples), "
        f"at half the turns {(client.rss_half or 0) / 1024:.1f} MB, end {rss_end / 1024:.1f} MB"
    )
    # The client must really have held threadline back: the pipe (64 KiB) was full.
    assert client.max_backlog >= 60_000, client.max_backlog
    assert hwm / 1024 < RSS_LIMIT_MB, f"threadline peaked at {hwm / 1024:.0f} MB"


async def test_50_threads_streaming_to_a_slow_reader(home: Path, workdir: Path) -> None:
    await load_run(DEFAULT, home, workdir)


@pytest.mark.slow
async def test_50_threads_streaming_to_a_slow_reader_long(home: Path, workdir: Path) -> None:
    await load_run(SLOW, home, workdir)
