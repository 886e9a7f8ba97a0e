"""A CLI's todo list as the turn's plan."""

from __future__ import annotations

from typing import Any, Literal

from ...protocol import TurnPlanStep

__all__ = ["todo_steps"]

_STATUS: dict[str, Literal["pending", "inProgress", "completed"]] = {
    "pending": "pending",
    "in_progress": "inProgress",
    "completed": "completed",
}


def todo_steps(todos: Any, *, fallback_text: str = "") -> list[TurnPlanStep]:
    """`[{content, status}]` (claude's TodoWrite, opencode's todowrite, ACP `plan` entries)
    as plan steps; an unknown status is pending, a todo without content shows `fallback_text`
    (a key of the todo)."""
    steps = []
    for todo in todos if isinstance(todos, list) else []:
        if isinstance(todo, dict):
            text = todo.get("content") or (todo.get(fallback_text) if fallback_text else None)
            status = _STATUS.get(str(todo.get("status")), "pending")
            steps.append(TurnPlanStep(step=str(text or ""), status=status))
    return steps
