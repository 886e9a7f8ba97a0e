"""threadline.rpc.framing: LineReader (splitting, EOF, the size cap) and write_loop."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from threadline.rpc.framing import LineReader, LineTooLong, write_loop

# -- helpers ----------------------------------------------------------------------------------


class ChunkStream(trio.abc.ReceiveStream):
    """Delivers exactly the given chunks (split further only by `max_bytes`), then EOF."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = [bytes(c) for c in chunks if c]
        self.reads = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint()
        self.reads += 1
        if not self._chunks:
            return b""
        chunk = self._chunks.pop(0)
        if max_bytes is not None and len(chunk) > max_bytes:
            self._chunks.insert(0, chunk[max_bytes:])
            chunk = chunk[:max_bytes]
        return chunk

    async def aclose(self) -> None:
        pass


TOO_LONG = "<too long>"


async def read_all(reader: LineReader) -> list[bytes | str]:
    """Every line until EOF; an oversized line shows up as TOO_LONG."""
    out: list[bytes | str] = []
    while True:
        try:
            line = await reader.receive_line()
        except LineTooLong as exc:
            assert exc.seen > exc.limit
            out.append(TOO_LONG)
            continue
        if line is None:
            return out
        out.append(line)


def expected_lines(data: bytes, cap: int) -> list[bytes | str]:
    """The reference model: split on \\n, keep a non-empty final fragment, flag long lines."""
    *lines, last = data.split(b"\n")
    if last:
        lines.append(last)
    return [TOO_LONG if len(line) > cap else line for line in lines]


async def lines_of(chunks: Iterable[bytes], cap: int = 1 << 20) -> list[bytes | str]:
    return await read_all(LineReader(ChunkStream(chunks), max_line=cap))


# -- LineReader --------------------------------------------------------------------------------


async def test_splits_lines_within_one_chunk() -> None:
    assert await lines_of([b"a\nbb\n\nccc\n"]) == [b"a", b"bb", b"", b"ccc"]


async def test_line_split_across_many_chunks() -> None:
    assert await lines_of([b'{"a"', b":", b"1}", b"\n", b"{", b"}\n"]) == [b'{"a":1}', b"{}"]


async def test_final_fragment_without_newline_is_returned_at_eof() -> None:
    assert await lines_of([b"one\ntw", b"o"]) == [b"one", b"two"]


async def test_eof_is_sticky() -> None:
    reader = LineReader(ChunkStream([b"x\n"]))
    assert await reader.receive_line() == b"x"
    assert await reader.receive_line() is None
    assert await reader.receive_line() is None


async def test_empty_stream() -> None:
    assert await lines_of([]) == []


async def test_crlf_keeps_the_carriage_return() -> None:
    # JSON tolerates the trailing \r as whitespace; the reader does not guess.
    assert await lines_of([b"{}\r\n"]) == [b"{}\r"]


async def test_line_at_the_cap_is_accepted() -> None:
    assert await lines_of([b"x" * 10 + b"\n"], cap=10) == [b"x" * 10]
    assert await lines_of([b"x" * 10], cap=10) == [b"x" * 10]


async def test_line_over_the_cap_raises_then_reading_continues() -> None:
    reader = LineReader(ChunkStream([b"ok\n", b"y" * 11 + b"\n", b"after\n"]), max_line=10)
    assert await reader.receive_line() == b"ok"
    with pytest.raises(LineTooLong) as info:
        await reader.receive_line()
    assert info.value.limit == 10
    assert info.value.seen == 11
    assert "10-byte limit" in str(info.value)
    assert await reader.receive_line() == b"after"
    assert await reader.receive_line() is None


async def test_oversized_line_is_skipped_without_buffering_it() -> None:
    # 1 MiB of junk in small chunks with a 100-byte cap: skipped chunk by chunk.
    junk = [b"z" * 1000] * 1024
    reader = LineReader(ChunkStream([*junk, b"\nnext\n"]), max_line=100)
    with pytest.raises(LineTooLong) as info:
        await reader.receive_line()
    assert info.value.seen == 1024 * 1000
    assert len(reader._buf) < 64 * 1024 + 100
    assert await reader.receive_line() == b"next"
    assert await reader.receive_line() is None


async def test_oversized_final_fragment_at_eof() -> None:
    assert await lines_of([b"a\n", b"b" * 50], cap=10) == [b"a", TOO_LONG]
    # ... also when the cap is crossed only after EOF is seen
    assert await lines_of([b"a\n", b"b" * 11], cap=10) == [b"a", TOO_LONG]


async def test_oversized_lines_back_to_back() -> None:
    data = b"x" * 30 + b"\n" + b"y" * 30 + b"\nshort\n" + b"z" * 30
    assert await lines_of([data], cap=10) == [TOO_LONG, TOO_LONG, b"short", TOO_LONG]


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, prev = [], 0
    for p in [*points, len(data)]:
        chunks.append(data[prev:p])
        prev = p
    return chunks


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.one_of(st.binary(max_size=40), st.just(b"\n"), st.sampled_from([b"\n\n", b"{}"])),
        max_size=30,
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=40),
    cap=st.integers(min_value=1, max_value=64),
)
def test_property_chunking_never_changes_the_lines(data: bytes, cuts: list[int], cap: int) -> None:
    """Any byte stream, split into arbitrary chunks, reads as the same lines (including which
    lines are over the cap) as the reference split."""
    got = trio.run(lines_of, _split(data, cuts), cap)
    assert got == expected_lines(data, cap)
    assert got == trio.run(lines_of, [data], cap)


# -- write_loop ----------------------------------------------------------------------------------


class RecordingStream(trio.abc.SendStream):
    def __init__(self, fail_after: int | None = None, exc: type[BaseException] = OSError) -> None:
        self.writes: list[bytes] = []
        self._fail_after = fail_after
        self._exc = exc

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self._fail_after is not None and len(self.writes) >= self._fail_after:
            raise self._exc("reader went away")
        self.writes.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def test_write_loop_coalesces_queued_lines() -> None:
    stream = RecordingStream()
    send, recv = trio.open_memory_channel[bytes](100)
    for i in range(5):
        send.send_nowait(b"%d\n" % i)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_loop, stream, recv)
        await trio.testing.wait_all_tasks_blocked()
        assert stream.writes == [b"0\n1\n2\n3\n4\n"]  # one write for the whole backlog
        await send.send(b"5\n")
        await trio.testing.wait_all_tasks_blocked()
        await send.send(b"6\n")
        await trio.testing.wait_all_tasks_blocked()
        await send.aclose()
    assert stream.writes == [b"0\n1\n2\n3\n4\n", b"5\n", b"6\n"]


async def test_write_loop_preserves_order_under_load() -> None:
    stream = RecordingStream()
    send, recv = trio.open_memory_channel[bytes](8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_loop, stream, recv)
        async with send:
            for i in range(500):
                await send.send(b"%d\n" % i)
    assert b"".join(stream.writes) == b"".join(b"%d\n" % i for i in range(500))


@pytest.mark.parametrize("exc", [trio.BrokenResourceError, trio.ClosedResourceError, OSError])
async def test_write_loop_survives_a_broken_stream(exc: type[BaseException]) -> None:
    """Once the reader is gone, writes stop but producers are never blocked or failed."""
    stream = RecordingStream(fail_after=1, exc=exc)
    send, recv = trio.open_memory_channel[bytes](2)  # tiny: a stuck writer would block us
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_loop, stream, recv)
        await send.send(b"first\n")
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            async with send:
                for i in range(1000):
                    await send.send(b"%d\n" % i)
    assert stream.writes == [b"first\n"]


async def test_write_loop_on_a_real_pipe_whose_reader_closed() -> None:
    """A real stream pair: closing the receiving side breaks sends; the loop keeps draining."""
    left, right = trio.testing.memory_stream_pair()
    send, recv = trio.open_memory_channel[bytes](4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_loop, left, recv)
        await send.send(b"hello\n")
        assert await right.receive_some() == b"hello\n"
        await right.aclose()
        with trio.fail_after(5):
            async with send:
                for _ in range(100):
                    await send.send(b"lost\n")
