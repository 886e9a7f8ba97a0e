"""Memory-channel helpers for the streaming path that skip trio's per-item yield when the
item is ready.

`send`/`receive` on a trio channel always yield to the scheduler. On the delta path (CLI line
→ backend → turn runner → writer) that let the writer wake up for every single message, so
each delta cost its own write(2) and several task switches (benchmark P3: ~6,000 deltas/s).
With these, a burst of lines already read from the CLI flows through without yielding and
the writer sends it in one write; a task still yields whenever it has to wait."""

from __future__ import annotations

from typing import TypeVar

import trio

__all__ = ["drain", "receive_ready", "receive_ready_or_none", "send_ready"]

T = TypeVar("T")


async def send_ready(channel: trio.MemorySendChannel[T], value: T) -> None:
    """`channel.send(value)`, without yielding when there is room."""
    try:
        channel.send_nowait(value)
    except trio.WouldBlock:
        await channel.send(value)


async def receive_ready(channel: trio.MemoryReceiveChannel[T]) -> T:
    """`channel.receive()`, without yielding when an item is waiting."""
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        return await channel.receive()


async def receive_ready_or_none(channel: trio.MemoryReceiveChannel[T | None]) -> T | None:
    """`receive_ready`, with None once the channel is closed (a CLI's reader has ended)."""
    try:
        return await receive_ready(channel)
    except trio.EndOfChannel:
        return None


def drain(channel: trio.MemoryReceiveChannel[T | None]) -> tuple[list[T], bool]:
    """What `channel` holds now, without waiting, up to its end marker (None) or its close;
    and whether the marker came (the CLI's reader has ended)."""
    items: list[T] = []
    while True:
        try:
            item = channel.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return items, False
        if item is None:
            return items, True
        items.append(item)
