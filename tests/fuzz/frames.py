"""Frame-level WebSocket cases for a listener: hypothesis strategies, and how each plays out.

A case is one fresh connection: an `initialize` request, a few operations the connection must
survive (requests cut into fragments at arbitrary byte offsets, also inside a multi-byte UTF-8
character, with pings between the fragments; binary messages; pings), and at most one ending:
invalid UTF-8 in a text message (close 1007), a message over the request cap (close 1009), a
protocol error (close 1002), a client close (1000), or the socket dropped mid-frame. Every
request must be answered exactly once with its own id, every ping with its pong, every binary
message with a -32600 error, and nothing else may arrive; a close must come as a close frame with
its code, followed by the server closing the socket."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import trio
from hypothesis import strategies as st
from wsproto.events import CloseConnection, Pong, TextMessage

from tests.support.ws_client import OPCODES, RawWs, client_frame

#: The listener's request cap (its default, as Codex: 16 MiB).
CAP = 16 * 1024 * 1024
INVALID_REQUEST = -32600
#: Sequences that are never valid UTF-8 (lone continuation, overlong, surrogate, > U+10FFFF,
#: a character cut short at the end).
BAD_UTF8 = [b"\xff", b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe6\x97"]


@dataclass(frozen=True)
class Op:
    """One operation. `payload` goes out as a message of `opcode` cut at `cuts` (byte offsets)
    with a ping of each `pings` payload after the fragment it is keyed to; `raw` frames go out
    as they are. `pad_to` pads the payload to at least that many bytes with `pad` (built when
    played: 16 MiB); a multi-byte `pad` makes a message over the cap in bytes, not in
    characters."""

    kind: str
    payload: bytes = b""
    opcode: int = OPCODES["text"]
    cuts: tuple[int, ...] = ()
    pings: tuple[tuple[int, bytes], ...] = ()
    raw: tuple[bytes, ...] = ()
    rid: str | None = None
    pad_to: int | None = None
    pad: bytes = b" "
    #: The close code this operation ends the connection with (None: it does not).
    code: int | None = None

    def __repr__(self) -> str:
        payload = self.payload if len(self.payload) < 200 else self.payload[:200] + b"..."
        extra = f", pad_to={self.pad_to} with {self.pad!r}" if self.pad_to else ""
        raw = f", raw={[f[:40] for f in self.raw]}" if self.raw else ""
        return f"Op({self.kind}, {payload!r}, cuts={self.cuts}, pings={self.pings}{raw}{extra})"

    def frames(self) -> list[bytes]:
        if self.raw:
            return list(self.raw)
        payload = self.payload
        if self.pad_to is not None:
            payload += self.pad * -(-(self.pad_to - len(payload)) // len(self.pad))
        bounds = [0, *sorted(min(c, len(payload)) for c in self.cuts), len(payload)]
        frames = []
        for i in range(len(bounds) - 1):
            opcode = self.opcode if i == 0 else OPCODES["continuation"]
            last = i == len(bounds) - 2
            frames.append(client_frame(opcode, payload[bounds[i] : bounds[i + 1]], fin=last))
            frames += [client_frame(OPCODES["ping"], p) for at, p in self.pings if at == i]
        return frames


def request(rid: str, method: str = "thread/loaded/list", params: Any = None) -> bytes:
    message = {"id": rid, "method": method, "params": params or {}}
    return json.dumps(message, ensure_ascii=False).encode()


INIT_PARAMS = {"clientInfo": {"name": "frames\u00e9\u6f22\U0001f389", "version": "0"}}

ids = st.text(min_size=0, max_size=12).map(lambda s: f"r{s}")
ping_payloads = st.binary(max_size=125)


@st.composite
def cut_message(draw: Any, kind: str, payload: bytes, opcode: int, rid: str | None) -> Op:
    """`payload` in 1-8 fragments (empty ones too) with pings between some of them."""
    cuts = tuple(draw(st.lists(st.integers(0, max(0, len(payload))), max_size=7)))
    pings = tuple(draw(st.lists(st.tuples(st.integers(0, len(cuts)), ping_payloads), max_size=3)))
    return Op(kind, payload, opcode, cuts, pings, rid=rid)


@st.composite
def request_op(draw: Any, method: str = "thread/loaded/list", params: Any = None) -> Op:
    rid = draw(ids)
    return draw(cut_message("request", request(rid, method, params), OPCODES["text"], rid))


@st.composite
def binary_op(draw: Any) -> Op:
    payload = draw(st.sampled_from([request("b"), b"", b"\xff\x00"]) | st.binary(max_size=300))
    return draw(cut_message("binary", payload, OPCODES["binary"], None))


@st.composite
def bad_utf8_op(draw: Any) -> Op:
    good = request(draw(ids))
    at = draw(st.integers(0, len(good)))
    payload = good[:at] + draw(st.sampled_from(BAD_UTF8)) + good[at:]
    try:
        payload.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    if valid:  # the inserted bytes completed a character cut open: not the case wanted
        payload = good + b"\xff"
    op = draw(cut_message("bad-utf8", payload, OPCODES["text"], None))
    return dataclasses.replace(op, code=1007)


@st.composite
def huge_op(draw: Any) -> Op:
    over = draw(st.integers(1, 4096))
    fragments = draw(st.integers(1, 3))
    cuts = tuple(CAP * i // fragments for i in range(1, fragments))
    pad = draw(st.sampled_from([b" ", "\u00e9".encode(), "\u6f22".encode(), "\U0001f389".encode()]))
    return Op("huge", request("huge"), cuts=cuts, pad_to=CAP + over, pad=pad, code=1009)


def at_cap_op(rid: str = "at-cap") -> Op:
    """A request exactly at the cap (padded with spaces): accepted and answered."""
    return Op("request", request(rid), cuts=(CAP // 2,), rid=rid, pad_to=CAP)


#: Frames no client may send, each with the close code wsproto fails the connection with.
PROTOCOL_ERRORS = [
    Op("protocol", raw=(client_frame(0x3, b"x"),), code=1002),  # a reserved opcode
    Op("protocol", raw=(client_frame(0xB, b""),), code=1002),  # a reserved control opcode
    Op("protocol", raw=(client_frame(0x1, b"{}", rsv=4),), code=1002),  # RSV1, no extension
    Op("protocol", raw=(client_frame(0x1, b"{}", masked=False),), code=1002),  # unmasked
    Op("protocol", raw=(client_frame(0x9, b"p" * 126),), code=1002),  # control > 125 bytes
    Op("protocol", raw=(client_frame(0x9, b"p", fin=False),), code=1002),  # fragmented ping
    Op("protocol", raw=(client_frame(0x0, b"{}"),), code=1002),  # nothing to continue
    Op(
        "protocol",
        raw=(client_frame(0x1, b"{", fin=False), client_frame(0x1, b"}")),
        code=1002,  # a new message inside a fragmented one
    ),
    Op("protocol", raw=(client_frame(0x8, b"\x03\xed"),), code=1002),  # 1005: local only
    Op("protocol", raw=(client_frame(0x8, b"\x03\xe8\xff"),), code=1007),  # reason not UTF-8
]
protocol_errors = st.sampled_from(PROTOCOL_ERRORS)
drops = st.sampled_from(
    [(client_frame(0x1, b'{"id":1}')[:5],), (client_frame(0x1, b"[", fin=False),), (b"\x81",)]
)

surviving_ops = st.one_of(request_op(), request_op(), binary_op(), st.builds(Op, st.just("ping")))


@st.composite
def endings(draw: Any) -> Op | None:
    return draw(
        st.one_of(
            st.none(),
            bad_utf8_op(),
            bad_utf8_op(),
            huge_op(),
            protocol_errors,
            drops.map(lambda raw: Op("drop", raw=raw)),
            st.just(Op("close", raw=(client_frame(0x8, b"\x03\xe8bye"),), code=1000)),
        )
    )


@st.composite
def cases(draw: Any) -> list[Op]:
    init = draw(request_op("initialize", INIT_PARAMS))
    ops = draw(st.lists(surviving_ops, max_size=5))
    ending = draw(endings())
    return [init, *ops, *([ending] if ending else [])]


async def play(raw: RawWs, op: Op) -> None:
    """Send one operation and check what comes back (see the module docstring)."""
    if op.kind == "ping":
        op = Op("ping", raw=(client_frame(OPCODES["ping"], b"alone"),), pings=((0, b"alone"),))
    frames = op.frames()
    if op.kind == "drop":
        await raw.send_frames(*frames)
        await raw.stream.aclose()
        return
    async with trio.open_nursery() as nursery:
        # Sent from a task: the server stops reading a message over the cap, and may close the
        # socket while 16 MiB are still on the way.
        nursery.start_soon(_send, raw, frames, op.code is not None)
        closed = await _expect(raw, op)
    if op.code is not None:
        await _expect_close(raw, op, closed)


async def _send(raw: RawWs, frames: list[bytes], may_break: bool) -> None:
    try:
        await raw.send_frames(*frames)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        if not may_break:
            raise


async def _expect(raw: RawWs, op: Op) -> CloseConnection | None:
    """Read the answers and pongs an operation is owed (until the close, for an ending)."""
    pongs = sorted(payload for _, payload in op.pings)
    seen_pongs: list[bytes] = []
    answers: list[Any] = []
    want_answers = 0 if op.code is not None or op.kind == "ping" else 1
    while op.code is not None or len(answers) < want_answers or len(seen_pongs) < len(pongs):
        event = await raw.event(timeout=30)
        if isinstance(event, Pong):
            seen_pongs.append(bytes(event.payload))
        elif isinstance(event, TextMessage):
            raw.text += event.data
            if event.message_finished:
                answers.append(json.loads(raw.text))
                raw.text = ""
                assert op.code is None, f"an answer, not a close {op.code}: {answers} ({op!r})"
        elif isinstance(event, CloseConnection):
            assert op.code is not None, f"closed ({event.code} {event.reason}) after {op!r}"
            assert not answers, f"answers before the close: {answers!r} ({op!r})"
            return event
    assert sorted(seen_pongs) == pongs, f"pongs {seen_pongs} for pings {pongs}: {op!r}"
    if op.kind == "request":
        [answer] = answers
        assert answer.get("id") == op.rid and ("result" in answer), (answer, op)
    elif op.kind == "binary":
        [answer] = answers
        assert answer.get("id") is None, answer
        assert answer["error"]["code"] == INVALID_REQUEST, answer
    return None


async def _expect_close(raw: RawWs, op: Op, event: CloseConnection | None) -> None:
    assert event is not None
    assert event.code == op.code, f"close {event.code} {event.reason!r}: {op!r}"
    assert await raw.eof(), f"the server kept the socket open after the close: {op!r}"
