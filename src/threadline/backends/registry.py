"""The one list of backends this build ships.

`SPECS` costs no trio (`initialize`, config validation and `doctor` read it before the engine
is imported); `create_backends()` loads the backend classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .catalog import CLAUDE, CODEX, GEMINI, MOCK, OPENCODE, BackendSpec

if TYPE_CHECKING:
    from .base import Backend

__all__ = ["BACKEND_IDS", "SPECS", "create_backends"]

#: Every shipped backend, in the order `initialize` and `doctor` list them.
SPECS: dict[str, BackendSpec] = {s.id: s for s in (CLAUDE, CODEX, GEMINI, OPENCODE, MOCK)}
#: Every backend id a thread (or AGENT_BACKEND) may name.
BACKEND_IDS: tuple[str, ...] = tuple(SPECS)


def create_backends() -> dict[str, Backend]:
    from .claude import ClaudeBackend
    from .codex import CodexBackend
    from .gemini import GeminiBackend
    from .mock import MockBackend
    from .opencode import OpenCodeBackend

    return {
        "claude": ClaudeBackend(),
        "codex": CodexBackend(),
        "gemini": GeminiBackend(),
        "opencode": OpenCodeBackend(),
        "mock": MockBackend(),
    }
