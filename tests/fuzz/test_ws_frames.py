"""Frame-level fuzzing of a real WebSocket listener (`threadline app-server --listen ws://`,
mock backend, the default 16 MiB request cap), with wsproto on a raw socket (see `frames`).

One listener serves the whole test. An observer connection, opened first, runs a mock turn
during every case; after each case the observer must have seen that turn's whole stream
(every delta of both messages, in order, nothing from elsewhere), and the listener must still
serve: the next case's connection initializes on it, and at the end it exits 0 on SIGTERM having
logged no traceback (a connection's failure is logged, never raised: look there first)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from tests.support.ws_client import Listening, WsClient, listening_server, raw_client, ws_connect

from . import frames
from .frames import Op
from .loop import LoopThread

pytestmark = pytest.mark.e2e

WORDS_A = " ".join(f"alpha{i}" for i in range(40))
WORDS_B = " ".join(f"beta{i}" for i in range(40))
#: The observer's turn: a streamed message, a pause (the case runs meanwhile), another one.
SCRIPT = f"/text {WORDS_A}\n/sleep 0.05\n/text {WORDS_B}"
EXAMPLES = 40


@dataclass
class FrameServer:
    listening: Listening
    observer: WsClient
    thread_id: str
    turns: int = 0


@contextlib.asynccontextmanager
async def open_frame_server(home: Path, workdir: Path) -> AsyncIterator[FrameServer]:
    env = {"THREADLINE_LOG_LEVEL": "WARNING"}
    async with (
        listening_server(home, "ws://127.0.0.1:0", env=env) as listening,
        ws_connect(listening.url) as observer,
    ):
        await observer.initialize()
        params = {"modelProvider": "mock", "cwd": str(workdir)}
        thread = await observer.call("thread/start", params)
        yield FrameServer(listening, observer, thread["thread"]["id"])


@pytest.fixture
def frame_server(tmp_path: Path) -> Iterator[tuple[LoopThread[FrameServer], FrameServer]]:
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    loop = LoopThread("ws-frames", lambda: open_frame_server(tmp_path / "home", tmp_path / "work"))
    server = loop.start()
    try:
        yield loop, server
    finally:
        loop.close()
    stderr = server.listening.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, f"the listener logged a failure:\n{stderr[-3000:]}"


async def run_case(server: FrameServer, ops: list[Op]) -> None:
    observer = server.observer
    text = [{"type": "text", "text": SCRIPT}]
    started = await observer.call("turn/start", {"threadId": server.thread_id, "input": text})
    turn_id = started["turn"]["id"]
    raw = await raw_client(server.listening.url)
    try:
        for n, op in enumerate(ops):
            try:
                await frames.play(raw, op)
            except Exception as exc:  # also a group from play's nursery
                raise AssertionError(f"operation {n} ({op.kind}): {exc!r}"[:3000]) from exc
    finally:
        await raw.stream.aclose()
    seen: list[Any] = []
    while True:
        event = await observer.wait_for("turn/completed", seen=seen)
        if event["params"]["turn"]["id"] == turn_id:
            break
    check_stream(seen, server.thread_id, turn_id)
    server.turns += 1
    assert server.listening.proc.returncode is None, "the listener died"


def check_stream(events: list[Any], thread_id: str, turn_id: str) -> None:
    """Only notifications of the observer's thread, and both messages whole, in order."""
    deltas: dict[str, str] = {}
    texts: list[str] = []
    for event in events:
        assert "method" in event and "id" not in event, f"not a notification: {event!r}"
        params = event.get("params") or {}
        owner = params.get("threadId") or (params.get("thread") or {}).get("id")
        assert owner == thread_id, f"foreign: {event!r}"[:500]
        if params.get("turnId", turn_id) != turn_id:
            continue  # the end of the previous case's turn
        if event["method"] == "item/agentMessage/delta":
            deltas[params["itemId"]] = deltas.get(params["itemId"], "") + params["delta"]
        elif event["method"] == "item/completed" and params["item"]["type"] == "agentMessage":
            item = params["item"]
            assert deltas.get(item["id"]) == item["text"], f"deltas lost: {deltas} vs {item}"
            texts.append(item["text"])
    assert texts == [WORDS_A, WORDS_B], texts
    status = events[-1]["params"]["turn"]["status"]
    assert status == "completed", events[-1]


def _cut_in_char(rid: str) -> Op:
    """A request cut inside every multi-byte character of its id, pings in between."""
    payload = frames.request(rid)
    cuts = tuple(i for i in range(1, len(payload)) if payload[i] & 0xC0 == 0x80)
    return Op("request", payload, cuts=cuts, pings=((0, b"p0"), (2, b"")), rid=rid)


INIT = Op(
    "request",
    frames.request("init\u00e9", "initialize", frames.INIT_PARAMS),
    cuts=(5, 5, 13),
    pings=((1, b"x"),),
    rid="init\u00e9",
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
@given(ops=frames.cases())
@example(ops=[INIT, _cut_in_char("\u00e9\u6f22\U0001f389"), frames.at_cap_op()])
@example(ops=[INIT, Op("huge", frames.request("h"), pad_to=frames.CAP + 1, code=1009)])
# over the cap in UTF-8 bytes, not in characters (trio-websocket counted characters)
@example(ops=[INIT, Op("huge", b"", pad_to=frames.CAP + 1, pad="\u6f22".encode(), code=1009)])
@example(ops=[INIT, Op("bad-utf8", b'{"id":"\xe6\x97', cuts=(8,), code=1007)])
@example(ops=[INIT, Op("bad-utf8", b'{"id":"\xed\xa0\x80"}', code=1007)])
@example(ops=[Op("binary", b"\xff", opcode=frames.OPCODES["binary"]), INIT])
def test_ws_frames(
    frame_server: tuple[LoopThread[FrameServer], FrameServer], ops: list[Op]
) -> None:
    loop, server = frame_server
    loop.run(run_case, server, ops)


def test_each_protocol_error_closes_with_its_code(
    frame_server: tuple[LoopThread[FrameServer], FrameServer],
) -> None:
    """Regression: wsproto's verdict on a bad frame (1002, or 1007 for invalid UTF-8) went
    nowhere; trio-websocket dropped the socket without a close frame (the client saw 1006)."""
    loop, server = frame_server
    for op in frames.PROTOCOL_ERRORS:
        loop.run(run_case, server, [INIT, op])


def test_the_cap_counts_utf8_bytes(
    frame_server: tuple[LoopThread[FrameServer], FrameServer],
) -> None:
    """Regression: trio-websocket measured a text message in characters, so a message over the
    cap in UTF-8 bytes was accepted while it had fewer characters. Exactly the cap in bytes is
    answered; one byte more closes the connection with 1009."""
    loop, server = frame_server
    rid = "\u6f22\U0001f389"
    at_cap = Op("request", frames.request(rid), cuts=(7,), rid=rid, pad_to=frames.CAP)
    over = Op("huge", frames.request(rid), cuts=(7,), pad_to=frames.CAP + 1, code=1009)
    loop.run(run_case, server, [INIT, at_cap, over])
