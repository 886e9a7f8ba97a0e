"""Following a file a CLI appends lines to (its transcript, its debug log)."""

from __future__ import annotations

import logging
import os
from typing import Any

import msgspec

__all__ = ["JsonLineTail", "LineTail"]

log = logging.getLogger("threadline.backend")

_READ = 1 << 20


class LineTail:
    """The complete lines appended to `path` since the last `read()` (from its start; a file
    rewritten shorter is read again from its start)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[bytes]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self._offset:
                    self._offset, self._partial = 0, b""
                f.seek(self._offset)
                data = f.read(_READ)
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return lines


class JsonLineTail:
    """The JSON objects appended, one a line, to the file it follows since the last `read()`
    (from its start; an unreadable line is skipped)."""

    def __init__(self) -> None:
        self._tail: LineTail | None = None
        self._decoder = msgspec.json.Decoder()

    @property
    def path(self) -> str | None:
        return self._tail.path if self._tail is not None else None

    def follow(self, path: str) -> None:
        """Follow `path` from its start (the same path: nothing changes)."""
        if path != self.path:
            self._tail = LineTail(path)

    def read(self) -> list[dict[str, Any]]:
        out = []
        for line in self._tail.read() if self._tail is not None else ():
            try:
                value = self._decoder.decode(line)
            except msgspec.DecodeError:
                log.debug("%s: an unreadable line", self.path)
                continue
            if isinstance(value, dict):
                out.append(value)
        return out
