"""Options a backend cannot honour are named (then a warning goes to the client and the log)."""

from __future__ import annotations

import pytest

from threadline.backends import base as b
from threadline.backends.instances import create_backends
from threadline.backends.registry import BACKEND_IDS


def settings(**kw: object) -> b.SessionSettings:
    return b.SessionSettings(thread_id="t", cwd="/tmp", mode="x", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend_id", [b for b in BACKEND_IDS if b != "claude"])
def test_turn_limit_and_tool_list_are_reported_where_ignored(backend_id: str) -> None:
    backend = create_backends()[backend_id]
    assert backend.unsupported_options(settings()) == []  # the defaults: nothing to warn about
    explicit = settings(config={"maxTurns": 3}, allowed_tools=["Read"])
    assert backend.unsupported_options(explicit) == [
        "maxTurns (BACKEND_MAX_TURNS)",
        "allowedTools (ALLOWED_TOOLS)",
    ]
    from_env = settings(env={"BACKEND_MAX_TURNS": "7"})
    assert backend.unsupported_options(from_env) == ["maxTurns (BACKEND_MAX_TURNS)"]


def test_claude_honours_both() -> None:
    claude = create_backends()["claude"]
    explicit = settings(
        config={"maxTurns": 3}, allowed_tools=["Read"], env={"BACKEND_MAX_TURNS": "3"}
    )
    assert claude.unsupported_options(explicit) == []
