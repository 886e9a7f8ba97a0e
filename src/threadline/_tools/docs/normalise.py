"""Making captured messages deterministic, so the generated page is byte-for-byte stable."""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "FIXED_DURATION_MS",
    "FIXED_MS",
    "FIXED_SECONDS",
    "HOME_DIR",
    "PROJECT_DIR",
    "Normaliser",
]

#: Stand-ins for the temp directories of the capture. The project's is a directory every
#: system has, so a captured request (`thread/start`'s `cwd`) runs as shown.
PROJECT_DIR = "/tmp"
HOME_DIR = "/home/user/.local/share/threadline"
FIXED_SECONDS = 1767225600  # 2026-01-01T00:00:00Z
FIXED_MS = FIXED_SECONDS * 1000
FIXED_DURATION_MS = 1200
_SECONDS_KEYS = frozenset({"createdAt", "updatedAt", "startedAt", "completedAt", "date"})
_MS_KEYS = frozenset({"startedAtMs", "completedAtMs", "emittedAtMs"})
_DURATION_KEYS = frozenset({"durationMs"})
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PLATFORM = re.compile(r"\([^)]*\)")
#: A Maildir key (`<seconds>.M<µs>P<pid>Q<n>.<host>`) and an email Message-ID.
_MAIL_KEY = re.compile(r"\d+\.M\d+P\d+Q\d+\.[^\s\"/:]+")
_MESSAGE_ID = re.compile(r"<\d+\.\d+\.\d+@threadline\.local>")


class Normaliser:
    """UUIDs become placeholders numbered in the order they are first rendered (still valid
    UUIDs, so examples can be replayed), times and durations a fixed value, temp paths their
    stand-ins (`paths`: raw → stand-in), the platform in `userAgent` fixed."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = sorted(paths.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        self._ids: dict[str, str] = {}

    def _placeholder(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        if raw not in self._ids:
            self._ids[raw] = f"00000000-0000-7000-8000-{len(self._ids) + 1:012d}"
        return self._ids[raw]

    def _numbered(self, pattern: str) -> Any:
        def fixed(match: re.Match[str]) -> str:
            raw = match.group(0)
            if raw not in self._ids:
                self._ids[raw] = pattern.format(n=len(self._ids) + 1)
            return self._ids[raw]

        return fixed

    def text(self, value: str) -> str:
        for raw, fixed in self._paths:
            value = value.replace(raw, fixed)
        value = _MAIL_KEY.sub(self._numbered(f"{FIXED_SECONDS}.M{{n}}P1Q1.host"), value)
        value = _MESSAGE_ID.sub(
            self._numbered(f"<{FIXED_SECONDS}.{{n}}.1@threadline.local>"), value
        )
        return _UUID.sub(self._placeholder, value)

    def __call__(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if isinstance(value, str):
            if key == "userAgent":
                value = _PLATFORM.sub("(Linux 6.8.0; x86_64)", value)
            elif key == "platformFamily":
                value = "unix"
            elif key == "platformOs":
                value = "linux"
            return self.text(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if key in _SECONDS_KEYS:
                return FIXED_SECONDS
            if key in _MS_KEYS:
                return FIXED_MS
            if key in _DURATION_KEYS:
                return FIXED_DURATION_MS
        return value
