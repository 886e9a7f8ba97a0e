"""Identifiers: UUIDv7 for threads, turns and items (sortable, like Codex), and validation of
ids that arrive from clients before they are used anywhere near a file path."""

from __future__ import annotations

import os
import re
import time
import uuid

__all__ = ["InvalidId", "is_valid_id", "new_id", "validate_id"]

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class InvalidId(ValueError):
    """A client-supplied id is not a canonical UUID string."""


def new_id() -> str:
    """A UUIDv7 string (RFC 9562): 48-bit Unix ms timestamp, version 7, 74 random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = (rand >> 62) & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = ((ms & ((1 << 48) - 1)) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def is_valid_id(value: object) -> bool:
    return isinstance(value, str) and _UUID_RE.fullmatch(value) is not None


def validate_id(value: object, what: str = "thread id") -> str:
    """Return `value` if it is a canonical lowercase UUID, else raise InvalidId.

    Only this shape ever becomes a path component, so `../../etc` or `/abs` cannot escape
    the state directory.
    """
    if not is_valid_id(value):
        raise InvalidId(f"invalid {what}: {value!r} (expected a lowercase UUID)")
    assert isinstance(value, str)
    return value
