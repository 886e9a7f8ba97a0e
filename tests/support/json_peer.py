"""The far side of an in-memory JSON-lines connection, scripted by a test: what it writes
reaches the code under test on `their_receive`, what that code writes to `their_send` is
read back decoded."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing


class JsonLinePeer:
    def __init__(self) -> None:
        self.to_them, self.their_receive = trio.testing.memory_stream_one_way_pair()
        self.their_send, self.from_them = trio.testing.memory_stream_one_way_pair()
        self._buf = b""

    async def write(self, message: Any) -> None:
        """Write a message as one JSON line (bytes are written as they are)."""
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        await self.to_them.send_all(data)

    async def read(self) -> Any:
        """The next line they wrote, decoded (EOFError once they closed)."""
        while b"\n" not in self._buf:
            chunk = await self.from_them.receive_some()
            if not chunk:
                raise EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)
