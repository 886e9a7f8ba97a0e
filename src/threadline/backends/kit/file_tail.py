"""Following a file a CLI appends lines to (its transcript, its debug log)."""

from __future__ import annotations

import os

__all__ = ["LineTail"]

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
