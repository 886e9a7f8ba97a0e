"""P7: the WebSocket listener against stdio, in the same run, on loopback.

1. Throughput (P3's set-up): the recorded real `claude` stream replayed at pipe speed
   (`_replay_cli.py`), N deltas per turn, through threadline on stdio and through threadline
   listening on `ws://127.0.0.1:0` (one text frame per message, read with wsproto on a plain
   socket). Ratio ws/stdio, goal >= 0.8.
2. Cancel (mock backend, a turn sleeping 30 s): `turn/interrupt` sent → `turn/completed`
   (interrupted) received, over ws and over stdio alternately; goal <= 50 ms (median) over ws.
3. Connections: C WebSocket connections, each starting a thread, all their turns (mock) run
   at once: events lost or misrouted (goal 0); then the server's RSS growth per connection
   with its thread, idle (reported, no goal).

Usage: python benchmarks/p7_listen.py [--quick] [--deltas N] [--turns N] [--connections N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from _harness import Result, Threadline, ms, print_table
from p3_throughput import _DECODE, _replay_cli, _rss_kb, _Stdio, record
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

_URL = re.compile(rb"listening on: ws://([\d.]+):(\d+)")


class _Conn:
    """One WebSocket connection to the listener: wsproto for the handshake, then frames are
    written and split here (wsproto's per-frame cost in Python would make this client the
    bottleneck, as P3's stdio client reads raw lines)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address)
        ws = WSConnection(ConnectionType.CLIENT)
        self.ws = ws
        self.sock.sendall(ws.send(Request(host="localhost", target="/")))
        data = b""
        while b"\r\n\r\n" not in data:  # the 101 response; no frame can follow before a request
            data += self.sock.recv(65536)
        ws.receive_data(data)
        if not any(isinstance(e, AcceptConnection) for e in ws.events()):
            raise RuntimeError(f"the upgrade was refused: {data[:200]!r}")
        self.pending: deque[bytes] = deque()
        self.buffer = b""
        self.next_id = 0

    def send(self, method: str, params: Any) -> int:
        self.next_id += 1
        message = json.dumps({"id": self.next_id, "method": method, "params": params})
        self.sock.sendall(self.ws.send(TextMessage(data=message)))
        return self.next_id

    def read_text(self) -> bytes:
        """The next text message (its UTF-8 bytes). The server's frames are unmasked, and
        anything but a final text frame is an error."""
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise RuntimeError("the server closed the connection")
            self.buffer += data
            self._split()
        return self.pending.popleft()

    def _split(self) -> None:
        buf, pos = self.buffer, 0
        while len(buf) - pos >= 2:
            first, size = buf[pos], buf[pos + 1] & 0x7F
            head = 2
            if size == 126:
                head, size = 4, int.from_bytes(buf[pos + 2 : pos + 4], "big")
            elif size == 127:
                head, size = 10, int.from_bytes(buf[pos + 2 : pos + 10], "big")
            if len(buf) - pos < head or len(buf) - pos - head < size:
                break
            if first != 0x81:
                raise RuntimeError(f"unexpected frame 0x{first:02x} from the server")
            self.pending.append(buf[pos + head : pos + head + size])
            pos += head + size
        self.buffer = buf[pos:]

    def reply(self, rid: int, method: str) -> Any:
        """The result of request `rid`; the messages read before it are dropped."""
        while True:
            msg = json.loads(self.read_text())
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def call(self, method: str, params: Any) -> Any:
        return self.reply(self.send(method, params), method)

    def stream_turn(self, start: tuple[str, Any]) -> tuple[float, int, str]:
        t0 = time.perf_counter()
        self.send(*start)
        parts: list[str] = []
        while True:
            text = self.read_text()
            if b'"item/agentMessage/delta"' in text:
                parts.append(_DECODE.decode(text)["params"]["delta"])
            elif b'"turn/completed"' in text:
                status = _DECODE.decode(text)["params"]["turn"]["status"]
                if status != "completed":
                    raise RuntimeError(f"turn {status}")
                return time.perf_counter() - t0, len(parts), "".join(parts)

    def read(self) -> dict[str, Any]:
        return json.loads(self.read_text())  # type: ignore[no-any-return]

    def close(self) -> None:
        self.sock.close()


class _Ws(_Conn):
    """`threadline app-server --listen ws://127.0.0.1:0`, driven over one WebSocket (more
    with `connect`)."""

    def __init__(self, env: dict[str, str]) -> None:
        argv = [sys.executable, "-m", "threadline", "app-server", "--listen", "ws://127.0.0.1:0"]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, env=env)
        assert self.proc.stderr is not None
        head = b""
        while not (found := _URL.search(head)):
            chunk = self.proc.stderr.readline()
            if not chunk:
                raise RuntimeError(f"the server did not start: {head.decode()}")
            head += chunk
        self.address = (found.group(1).decode(), int(found.group(2)))
        super().__init__(self.address)

    def connect(self) -> _Conn:
        return _Conn(self.address)

    def close(self) -> None:
        super().close()
        self.proc.terminate()
        self.proc.wait(timeout=60)


def _throughput(base: Path, deltas: int, turns: int) -> Result:
    recording, text = record(base, deltas)
    cli = _replay_cli(base, recording)
    env = {**os.environ, "THREADLINE_HOME": str(base / "state"), "AGENT_BACKEND": "claude"}
    env["BACKEND_CLI_PATH"] = str(cli)
    (base / "work").mkdir(exist_ok=True)
    stdio, ws = _Stdio(env), _Ws(env)
    seconds: dict[str, list[float]] = {"stdio": [], "ws": []}
    try:
        sides: list[tuple[str, Any, Any]] = []
        for name, side in (("stdio", stdio), ("ws", ws)):
            side.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
            tid = side.call("thread/start", {"cwd": str(base / "work")})["thread"]["id"]
            start = ("turn/start", {"threadId": tid, "input": [{"type": "text", "text": "go"}]})
            side.stream_turn(start)  # warm-up
            sides.append((name, side, start))
        for i in range(turns):
            for name, side, start in sides if i % 2 == 0 else reversed(sides):
                took, count, got = side.stream_turn(start)
                if count != deltas or got != text:
                    raise RuntimeError(f"{name}: {count} deltas, text equal: {got == text}")
                seconds[name].append(took)
    finally:
        stdio.close()
        ws.close()
    w, s = (deltas / statistics.median(seconds[k]) for k in ("ws", "stdio"))
    return Result(
        "P7",
        f"{deltas:,} deltas CLI → client over ws, throughput",
        f"{w:,.0f}/s",
        f"{s:,.0f}/s",
        w / s,
        ">= 0.8x (the same server on stdio)",
        w / s >= 0.8,
    )


def _wait_method(side: Threadline | _Conn, method: str) -> dict[str, Any]:
    while True:
        msg = side.read()
        if msg.get("method") == method:
            return msg


def _cancel(sides: dict[str, Threadline | _Conn], base: Path, rounds: int) -> Result:
    """turn/interrupt → turn/completed (interrupted) of a mock turn sleeping 30 s, over ws
    and stdio alternately."""
    latencies: dict[str, list[float]] = {name: [] for name in sides}
    tids: dict[str, str] = {}
    for name, side in sides.items():
        side.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
        start = {"modelProvider": "mock", "cwd": str(base)}
        tids[name] = side.call("thread/start", start)["thread"]["id"]
    for i in range(rounds):
        for name, side in sides.items() if i % 2 == 0 else reversed(sides.items()):
            params = {"threadId": tids[name], "input": [{"type": "text", "text": "/sleep 30"}]}
            turn_id = side.call("turn/start", params)["turn"]["id"]
            _wait_method(side, "turn/started")
            t0 = time.perf_counter()
            side.send("turn/interrupt", {"threadId": tids[name], "turnId": turn_id})
            done = _wait_method(side, "turn/completed")
            latencies[name].append(time.perf_counter() - t0)
            assert done["params"]["turn"]["status"] == "interrupted", done
    ws, stdio = (statistics.median(latencies[k]) for k in ("ws", "stdio"))
    return Result(
        "P7",
        "turn/interrupt → turn/completed over ws (mock)",
        ms(ws),
        ms(stdio),
        ws / stdio,
        "<= 50 ms",
        ws <= 0.050,
    )


def _turn_events(conn: _Conn, tid: str, n: int) -> tuple[int, int]:
    """Read connection `n`'s turn to its end: (events about another thread, lost events: the
    agent's two messages not both seen in order)."""
    foreign, texts = 0, []
    while True:
        msg = json.loads(conn.read_text())
        params = msg.get("params") or {}
        if params.get("threadId", tid) != tid:
            foreign += 1
        item = params.get("item") or {}
        if msg.get("method") == "item/completed" and item.get("type") == "agentMessage":
            texts.append(item["text"])
        if msg.get("method") == "turn/completed":
            return foreign, int(texts != [f"from {n}", f"again {n}"])


def _connections(ws: _Ws, base: Path, count: int) -> list[Result]:
    """`count` connections, each starting a thread; all their turns run at once."""
    before = _rss_kb(ws.proc.pid)
    conns = [ws.connect() for _ in range(count)]
    try:
        rids = [c.send("initialize", {"clientInfo": {"name": "b", "version": "0"}}) for c in conns]
        for conn, rid in zip(conns, rids, strict=True):
            conn.reply(rid, "initialize")
        start = {"modelProvider": "mock", "cwd": str(base)}
        rids = [c.send("thread/start", start) for c in conns]
        pairs = list(zip(conns, rids, strict=True))
        tids = [c.reply(rid, "thread/start")["thread"]["id"] for c, rid in pairs]
        t0 = time.perf_counter()
        for n, (conn, tid) in enumerate(zip(conns, tids, strict=True)):
            prompt = f"/text from {n}\n/text again {n}"
            conn.send("turn/start", {"threadId": tid, "input": [{"type": "text", "text": prompt}]})
        foreign = lost = 0
        for n, (conn, tid) in enumerate(zip(conns, tids, strict=True)):
            f, lo = _turn_events(conn, tid, n)
            foreign, lost = foreign + f, lost + lo
        took = time.perf_counter() - t0
        time.sleep(0.5)
        per = (_rss_kb(ws.proc.pid) - before) / count
    finally:
        for conn in conns:
            conn.close()
    return [
        Result(
            "P7",
            f"{count} connections, a thread and a turn each, at once: events lost / misrouted",
            f"{lost} / {foreign}",
            "-",
            None,
            "0 / 0",
            lost == 0 and foreign == 0,
            f"all {count} turns done in {took:.2f} s",
        ),
        Result(
            "P7",
            f"RSS per idle ws connection with its thread ({count} open)",
            f"{per:.0f} kB",
            "-",
            None,
            "reported",
            True,
        ),
    ]


def _cancel_and_connections(base: Path, rounds: int, connections: int) -> list[Result]:
    env = {**os.environ, "THREADLINE_HOME": str(base / "mock-state"), "AGENT_BACKEND": "mock"}
    ws, stdio = _Ws(env), Threadline(env)
    try:
        cancel = _cancel({"ws": ws, "stdio": stdio}, base, rounds)
        return [cancel, *_connections(ws, base, connections)]
    finally:
        ws.close()
        stdio.close()


def run(
    quick: bool = False,
    deltas: int | None = None,
    turns: int | None = None,
    connections: int | None = None,
) -> list[Result]:
    deltas = deltas or (10_000 if quick else 100_000)
    turns = turns or (2 if quick else 5)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        results = [_throughput(base, deltas, turns)]
        results += _cancel_and_connections(base, 3 if quick else 10, connections or 100)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--deltas", type=int)
    parser.add_argument("--turns", type=int)
    parser.add_argument("--connections", type=int)
    args = parser.parse_args()
    print_table(run(args.quick, args.deltas, args.turns, args.connections))


if __name__ == "__main__":
    main()
