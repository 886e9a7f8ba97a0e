"""The backends this build ships, by id."""

from __future__ import annotations

from .base import Backend
from .claude import ClaudeBackend
from .codex import CodexBackend
from .gemini import GeminiBackend
from .mock import MockBackend
from .opencode import OpenCodeBackend

__all__ = ["create_backends"]


def create_backends() -> dict[str, Backend]:
    return {
        "claude": ClaudeBackend(),
        "codex": CodexBackend(),
        "gemini": GeminiBackend(),
        "opencode": OpenCodeBackend(),
        "mock": MockBackend(),
    }
