"""The backends this build ships, by id."""

from __future__ import annotations

from .base import Backend
from .claude import ClaudeBackend
from .cli_pending import PendingCliBackend
from .codex import CodexBackend
from .mock import MockBackend

__all__ = ["create_backends"]


def create_backends() -> dict[str, Backend]:
    return {
        "claude": ClaudeBackend(),
        "codex": CodexBackend(),
        "gemini": PendingCliBackend("gemini", "gemini", "Gemini CLI", ("acp", "headless")),
        "opencode": PendingCliBackend("opencode", "opencode", "OpenCode", ("acp", "run")),
        "mock": MockBackend(),
    }
