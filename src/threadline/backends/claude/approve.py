"""A tool call claude asks permission for, decided by threadline's approval router: stream
mode's `can_use_tool` and tui mode's `PermissionRequest` hook take the same answer
(`{"behavior": "allow", "updatedInput", "updatedPermissions"}` or `{"behavior": "deny",
"message", "interrupt"}`)."""

from __future__ import annotations

from typing import Any

from ...protocol import ToolRequestUserInputOption, ToolRequestUserInputQuestion
from .. import base as b
from .invocation import _DECLINE_MESSAGE
from .mapping import EDIT_TOOLS, ClaudeTurnMapper

__all__ = ["approve", "ask_user"]


def _request(
    tool: str, tool_id: str, args: dict[str, Any], reason: str | None, cwd: str
) -> b.ApprovalRequest:
    if tool == "Bash":
        return b.ApprovalRequest(
            kind="command",
            item_id=tool_id,
            command=str(args.get("command", "")),
            cwd=cwd,
            reason=reason,
        )
    if tool in EDIT_TOOLS:
        return b.ApprovalRequest(kind="fileChange", item_id=tool_id, reason=reason)
    return b.ApprovalRequest(kind="tool", item_id=tool_id, tool=tool, arguments=args, reason=reason)


def _session_rule(tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """What `acceptForSession` allows from now on (destination "session" only: never a
    settings file in the repository)."""
    if tool == "Bash":
        return {
            "type": "addRules",
            "behavior": "allow",
            "destination": "session",
            "rules": [{"toolName": "Bash", "ruleContent": str(args.get("command", ""))}],
        }
    if tool in EDIT_TOOLS:
        return {"type": "setMode", "mode": "acceptEdits", "destination": "session"}
    return {
        "type": "addRules",
        "behavior": "allow",
        "destination": "session",
        "rules": [{"toolName": tool}],
    }


async def approve(
    ctx: b.TurnContext,
    mapper: ClaudeTurnMapper,
    tool: str,
    tool_id: str,
    args: dict[str, Any],
    reason: Any,
    cwd: str,
) -> dict[str, Any]:
    """Announce the call's item (if not yet), ask, and give claude's answer."""
    if mapper.is_dynamic_tool(tool):
        # One of the client's own tools: the client answers the call itself (threadline's
        # tool host asks it), so claude runs it unasked and no item of ours shows it.
        return {"behavior": "allow", "updatedInput": args}
    if tool_id not in mapper.tools:
        item = mapper.item_for_tool(tool_id, tool, args)
        mapper.tools[tool_id] = item
        await ctx.emit(b.ItemStarted(item))
    request = _request(tool, tool_id, args, str(reason) if reason else None, cwd)
    decision = await ctx.request_approval(request)
    mapper.decisions[tool_id] = decision
    if decision == "accept":
        return {"behavior": "allow", "updatedInput": args}
    if decision == "acceptForSession":
        rule = _session_rule(tool, args)
        return {"behavior": "allow", "updatedInput": args, "updatedPermissions": [rule]}
    if decision == "cancel":
        return {"behavior": "deny", "message": _DECLINE_MESSAGE, "interrupt": True}
    return {"behavior": "deny", "message": _DECLINE_MESSAGE}


async def ask_user(
    ctx: b.TurnContext, mapper: ClaudeTurnMapper, tool_id: str, args: dict[str, Any]
) -> dict[str, Any]:
    """An `AskUserQuestion` call: its questions asked of the client; the answers go back as
    the call's input (`answers`), or a deny when there are none (fail closed)."""
    if tool_id not in mapper.tools:
        item = mapper.item_for_tool(tool_id, "AskUserQuestion", args)
        mapper.tools[tool_id] = item
        await ctx.emit(b.ItemStarted(item))
    raw_questions = [q for q in args.get("questions") or [] if isinstance(q, dict)]
    questions = []
    for i, q in enumerate(raw_questions):
        options = [
            ToolRequestUserInputOption(
                label=str(o.get("label", "")), description=str(o.get("description", ""))
            )
            for o in q.get("options") or []
            if isinstance(o, dict)
        ]
        questions.append(
            ToolRequestUserInputQuestion(
                id=f"q{i}",
                header=str(q.get("header") or "Question"),
                question=str(q.get("question", "")),
                options=options or None,
            )
        )
    answers = await ctx.request_user_input(tool_id, questions)
    if answers is None:
        mapper.decisions[tool_id] = "decline"
        return {"behavior": "deny", "message": "The user did not answer."}
    mapped = {
        str(q.get("question", "")): ", ".join(answers.get(f"q{i}") or [])
        for i, q in enumerate(raw_questions)
    }
    return {"behavior": "allow", "updatedInput": {**args, "answers": mapped}}
