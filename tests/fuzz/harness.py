"""One long-lived threadline subprocess per fuzz test, driven from synchronous hypothesis code.

The server lives in a trio loop on a background thread (`loop.LoopThread`) and each input is one
call into it. The transport is stdio (`tests.support.client.running_server`, which validates every
stdout line against `schemas/`) or a WebSocket to a listener (`transport.running_ws_server`: one
text frame per line, every message validated the same way). Each input:

1. drain what the server wrote since the last input (notifications, server→client requests —
   declined a couple of inputs later, unless the fuzzer answered them first); any response
   found there is a stray answer: a failure;
2. compute the expected answer to each line with `oracle.expect_line` (from the model state);
3. write the input line(s) and a sentinel request (`thread/loaded/list`, a fresh string id);
4. read until the sentinel's answer and every required answer have arrived.

Requests are handled concurrently by the server, so a dispatched request's (or a batch's)
answer may come after the sentinel's; errors for malformed lines are written before the next
line is read, so they always precede it. Every answer in the window is compared with the
expectation; an answer that arrives later than its window shows up as a stray in the next one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import trio

from tests.support.client import ServerProcess, running_server

from . import oracle
from .loop import LoopThread
from .transport import WsServer, running_ws_server, unfit_for_frames

T = TypeVar("T")

#: The request line cap of the fuzz server: oversized lines stay cheap to send.
CAP = 65536
SENTINEL_PREFIX = "fuzz-sentinel-"
#: How long the sentinel's answer may take (a loaded CI machine; it normally takes ~1 ms).
WINDOW_TIMEOUT = 20.0
#: How long required answers may trail the sentinel's (a dispatched request, e.g. thread/archive
#: of a thread with a running turn, may finish after it).
TRAIL_TIMEOUT = 5.0
#: After an input with an optional answer, wait this long for it before moving on.
LINGER = 0.05

#: Inputs sent by every FuzzSession of this process, by category (the session summary).
COUNTS: Counter[str] = Counter()
#: Per test: (node id, lines sent, inputs not sent, seconds, RSS before, RSS after in kB,
#: turns started, server→client requests seen).
RUNS: list[tuple[str, int, int, float, int, int, int, int]] = []

PLACEHOLDER_THREAD = b"@@THREAD@@"
PLACEHOLDER_TURN = b"@@TURN@@"
PLACEHOLDER_CWD = b"@@CWD@@"
PLACEHOLDER_PAD = b"@@PAD@@"
PLACEHOLDER_REQ = b'"@@REQ@@"'  # a JSON string in the template, a number once rendered
#: Server→client requests are declined by the harness only after this many more inputs, so
#: the fuzzer's own answers (to `"@@REQ@@"`) meet a request that is still pending.
DECLINE_AFTER = 2


@dataclass(frozen=True)
class FuzzInput:
    """One input line (no newline), or several pipelined lines (joined by newlines) written at
    once. Placeholders are filled in by the session: the live thread's id, the last turn id,
    the work directory; `pad_to` pads @@PAD@@ so the line has exactly that many bytes (a few
    bytes either side of the cap)."""

    template: bytes
    category: str
    pad_to: int | None = None

    def __repr__(self) -> str:
        shown = self.template if len(self.template) <= 400 else self.template[:400] + b"..."
        pad = f", pad_to={self.pad_to}" if self.pad_to is not None else ""
        return f"FuzzInput({self.category}, {shown!r}, len={len(self.template)}{pad})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # hypothesis prints failing cases with this (lines abridged)


@dataclass
class Window:
    expectations: list[oracle.Expectation]
    line: bytes
    answers: list[Any]
    sentinel: list[Any] = field(default_factory=list)
    strays: list[Any] = field(default_factory=list)
    timed_out: bool = False
    skipped: str | None = None


def vm_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


class FuzzSession:
    def __init__(
        self,
        home: Path,
        workdir: Path,
        *,
        name: str = "fuzz",
        initialize: bool = True,
        turns: bool = True,
        cap: int = CAP,
        transport: Literal["stdio", "ws"] = "stdio",
    ) -> None:
        self.home = home
        self.workdir = workdir
        self.name = name
        self.cap = cap
        self._want_initialize = initialize
        self.state = oracle.State(turns_possible=turns and initialize)
        self.sent = 0
        self.skipped = 0
        self.turns_started = 0
        self.thread_id = "00000000-0000-7000-8000-000000000000"
        self.last_turn = "00000000-0000-7000-8000-000000000001"
        self._n = 0
        self.transport = transport
        self._srv: ServerProcess | None = None
        self._loop = LoopThread(name, self._open)
        self._declines: list[list[Any]] = []  # [request id, inputs seen since]
        self._need_thread = False
        self._started_at = 0.0
        self.rss_before = 0
        self.rss_after = 0

    # -- the trio side ---------------------------------------------------------------------------

    @property
    def srv(self) -> ServerProcess:
        assert self._srv is not None
        return self._srv

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[ServerProcess]:
        env = {"THREADLINE_MAX_REQUEST_BYTES": str(self.cap), "THREADLINE_LOG_LEVEL": "WARNING"}
        opener = running_ws_server if self.transport == "ws" else running_server
        async with trio.open_nursery() as nursery, opener(nursery, self.home, env) as srv:
            yield srv

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self._loop.run(fn, *args)

    async def _setup(self) -> None:
        srv = self.srv
        if self._want_initialize:
            await srv.initialize()
            self.state.initialized = True
            self.thread_id = await srv.start_thread(self.workdir)
        # warm up (imports, caches) before the RSS baseline
        for _ in range(20):
            await srv.request("thread/loaded/list", {})

    def _take(self, message: Any, sid: str | None, window: Window) -> None:
        """File one message the server wrote: background, the sentinel's answer, or an answer."""
        if isinstance(message, dict) and "method" in message:
            if "id" in message:  # a server→client request: note its id, decline it
                rid = message["id"]
                if isinstance(rid, int):
                    self.state.issued = max(self.state.issued, rid + 1)
                self._declines.append([rid, 0])
                return
            params = message.get("params") or {}
            turn = params.get("turn") if isinstance(params, dict) else None
            if message["method"] == "turn/started" and isinstance(turn, dict):
                self.last_turn = turn["id"]  # for @@TURN@@
                self.turns_started += 1
            elif (
                message["method"] == "thread/archived" and params.get("threadId") == self.thread_id
            ):
                self._need_thread = True  # the fuzzer archived the live thread: open another
            return
        if isinstance(message, dict) and sid is not None and message.get("id") == sid:
            window.sentinel.append(message)
            return
        if (
            isinstance(message, dict)
            and isinstance(message.get("id"), str)
            and message["id"].startswith(SENTINEL_PREFIX)
        ):
            window.sentinel.append(message)  # an older sentinel answered twice/late: reported
            return
        window.answers.append(message)

    async def _flush_declines(self, *, all_of_them: bool = False) -> None:
        """Decline the server→client requests that have waited DECLINE_AFTER inputs (the
        fuzzer may have answered them meanwhile: a duplicate answer is ignored)."""
        keep = []
        for pending in self._declines:
            if all_of_them or pending[1] >= DECLINE_AFTER:
                await self.srv.send({"id": pending[0], "result": {"decision": "decline"}})
            else:
                keep.append(pending)
        self._declines = keep

    async def _drain(self, window: Window) -> None:
        strays = Window([], b"", [])
        while True:
            try:
                message = self.srv.events.receive_nowait()
            except trio.WouldBlock:
                break
            self._take(message, None, strays)
        window.strays = strays.answers + strays.sentinel
        await self._flush_declines()

    async def _exchange(self, fuzz_input: FuzzInput) -> Window:
        srv = self.srv
        window = Window([], b"", [])
        for pending in self._declines:
            pending[1] += 1
        await self._drain(window)
        if self._need_thread:
            self._need_thread = False
            self.thread_id = await srv.start_thread(self.workdir)
        window.line = text = self.render(fuzz_input)
        if self.transport == "ws" and (why := unfit_for_frames(text, self.cap)):
            window.skipped = why  # the frame-level suite covers these
            return window
        state = dataclasses.replace(self.state)
        try:
            window.expectations = [
                oracle.expect_line(line, state, self.cap) for line in text.split(b"\n")
            ]
        except oracle.Skip as exc:
            window.skipped = str(exc)  # the model makes no claim: not sent
            return window
        self.state = state
        self._n += 1
        sid = f"{SENTINEL_PREFIX}{self._n}"
        srv._methods.clear()
        srv._methods.update(oracle.result_methods(window.expectations))
        srv._methods[sid] = "thread/loaded/list"
        sentinel = json.dumps({"id": sid, "method": "thread/loaded/list"}).encode()
        await srv.send_raw(text + b"\n" + sentinel + b"\n")
        required = sum(e.answers_required for e in window.expectations)
        try:
            with trio.fail_after(WINDOW_TIMEOUT):
                while not window.sentinel:
                    self._take(await srv.events.receive(), sid, window)
                    await self._flush_declines()
            with trio.fail_after(TRAIL_TIMEOUT):
                while len(window.answers) < required:
                    self._take(await srv.events.receive(), sid, window)
                    await self._flush_declines()
        except trio.TooSlowError:
            window.timed_out = True
        if any(e.has_optional for e in window.expectations):
            with trio.move_on_after(LINGER):
                while True:
                    self._take(await srv.events.receive(), sid, window)
                    await self._flush_declines()
        return window

    # -- the test side ---------------------------------------------------------------------------

    def start(self) -> FuzzSession:
        self._srv = self._loop.start()
        self.run(self._setup)
        self.rss_before = vm_rss_kb(self.srv.pid)
        self._started_at = time.monotonic()
        return self

    def render(self, fuzz_input: FuzzInput) -> bytes:
        line = (
            fuzz_input.template.replace(PLACEHOLDER_THREAD, self.thread_id.encode())
            .replace(PLACEHOLDER_TURN, self.last_turn.encode())
            .replace(PLACEHOLDER_CWD, str(self.workdir).encode())
            .replace(PLACEHOLDER_REQ, str(max(0, self.state.issued - 1)).encode())
        )
        if fuzz_input.pad_to is not None:
            short = len(line) - len(PLACEHOLDER_PAD)
            line = line.replace(PLACEHOLDER_PAD, b"x" * max(0, fuzz_input.pad_to - short))
        return line

    def would_initialize(self, fuzz_input: FuzzInput) -> bool:
        """Whether the model says this input initializes the connection."""
        state = dataclasses.replace(self.state)
        lines = self.render(fuzz_input).split(b"\n")
        try:
            return any(oracle.expect_line(line, state, self.cap).initializes for line in lines)
        except oracle.Skip:
            return False

    def check(self, fuzz_input: FuzzInput) -> None:
        """Send one input and check everything the server wrote for it."""
        window = self.run(self._exchange, fuzz_input)
        if window.skipped:
            COUNTS[f"not sent: {window.skipped}"] += 1
            self.skipped += 1
            return
        lines = len(window.expectations)
        self.sent += lines
        COUNTS[fuzz_input.category] += lines
        COUNTS["total"] += lines
        self._verify(window, fuzz_input)

    def _verify(self, window: Window, fuzz_input: FuzzInput) -> None:
        srv = self.srv
        context = f"\n  input: {fuzz_input!r}\n  line:  {window.line[:300]!r}"
        if srv.proc.returncode is not None:
            raise AssertionError(
                f"threadline died (exit {srv.proc.returncode}){context}\n"
                f"stderr:\n{srv.stderr_text[-3000:]}"
            )
        if srv.schema_errors:
            raise AssertionError(f"invalid output: {srv.schema_errors[:3]}{context}")
        if isinstance(srv, WsServer) and srv.lost:
            raise AssertionError(f"{srv.lost}{context}\nstderr:\n{srv.stderr_text[-3000:]}")
        if window.strays:
            strays = repr(window.strays)[:1500]
            raise AssertionError(
                f"answers nobody asked for (late, from the previous input?): {strays}{context}"
            )
        if window.timed_out:
            raise AssertionError(
                f"answers missing (after {TRAIL_TIMEOUT} s): got {window.answers!r}, "
                f"sentinel {window.sentinel!r}"[:1500]
                + f"\n  expected {oracle.describe(window.expectations)}{context}"
            )
        if len(window.sentinel) != 1:
            raise AssertionError(f"sentinel answered {len(window.sentinel)} times{context}")
        sentinel = window.sentinel[0]
        if self.state.initialized:
            ok = "result" in sentinel
        else:
            ok = sentinel.get("error", {}).get("code") == oracle.INVALID_REQUEST
        if not ok:
            raise AssertionError(
                f"sentinel answer {sentinel!r} does not match initialized="
                f"{self.state.initialized}{context}"
            )
        try:
            oracle.check_window(window.expectations, window.answers)
        except oracle.Mismatch as exc:
            raise AssertionError(f"{exc}{context}") from None

    async def _final_checks(self) -> dict[str, Any]:
        srv = self.srv
        window = Window([], b"", [])
        await self._flush_declines(all_of_them=True)
        await trio.sleep(0.3)  # anything still owed would arrive now: a stray
        await self._drain(window)
        assert not window.strays, f"answers after the last input: {window.strays!r}"[:1500]
        if not self.state.initialized:
            await srv.initialize()
        return await srv.call("thread/list", {"limit": 5}, timeout=20)  # type: ignore[no-any-return]

    def finish(self, *, node: str, min_inputs: int, rss_growth_kb: int) -> None:
        """The end of a test: thread/list still answers, no stray output, RSS bounded, and a
        clean exit 0 on stdin EOF, or on SIGTERM for a listener (checked at close, with the
        schema errors)."""
        try:
            result = self.run(self._final_checks)
            assert isinstance(result.get("data"), list), result
            self.rss_after = vm_rss_kb(self.srv.pid)
            elapsed = time.monotonic() - self._started_at
            RUNS.append(
                (
                    node,
                    self.sent,
                    self.skipped,
                    elapsed,
                    self.rss_before,
                    self.rss_after,
                    self.turns_started,
                    self.state.issued,
                )
            )
            tried = self.sent + self.skipped
            assert tried >= min_inputs, f"only {tried} inputs were tried"
            growth = self.rss_after - self.rss_before
            assert growth < rss_growth_kb, (
                f"RSS grew by {growth} kB over {self.sent} inputs "
                f"({self.rss_before} -> {self.rss_after} kB)"
            )
        finally:
            self.close()

    def close(self) -> None:
        self._loop.close()


def summary_lines() -> list[str]:
    if not COUNTS:
        return []
    lines = [f"protocol fuzz: {COUNTS['total']} inputs sent"]
    lines.append(
        "  by category: " + ", ".join(f"{k}={v}" for k, v in sorted(COUNTS.items()) if k != "total")
    )
    for node, sent, skipped, seconds, before, after, turns, requests in RUNS:
        rate = sent / seconds if seconds else math.inf
        not_sent = f" (+{skipped} not sent)" if skipped else ""
        lines.append(
            f"  {node}: {sent} inputs{not_sent} in {seconds:.1f} s ({rate:.0f}/s), "
            f"RSS {before // 1024} -> {after // 1024} MiB, {turns} turns, "
            f"{requests} server requests"
        )
    return lines
