"""The mailbox as tools of the thread's agent: an MCP server named `mailbox` served by the tool
host (`agent_tools/host.py`), with `mail_send`, `mail_check`, `mail_read`, `mail_reply` and
`mail_mark_read`. The CLI reports each call as an `mcpToolCall` item and asks for approval
as it does for any MCP tool (per the thread's policy)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ..agent_tools.calls import CallOutcome, DynamicTool
from ..protocol import ToolOutputText
from .maildir import MailError, StoredMail
from .transport import MailTransport

__all__ = ["MAIL_SERVER", "MailTools"]

MAIL_SERVER = "mailbox"

_ID = {"type": "string", "description": "a message's id, as mail_check lists it"}
_SPECS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "mail_send": (
        "Send mail to another agent's address (<thread>@threadline.local or an alias).",
        {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        ["to", "body"],
    ),
    "mail_check": (
        "List the messages in your mailbox (id, from, subject, date; unread only by default).",
        {"unread_only": {"type": "boolean", "default": True}},
        [],
    ),
    "mail_read": ("Read one message of your mailbox.", {"id": _ID}, ["id"]),
    "mail_reply": (
        "Reply to a message of your mailbox (to its sender, threaded).",
        {"id": _ID, "body": {"type": "string"}},
        ["id", "body"],
    ),
    "mail_mark_read": ("Mark a message of your mailbox as read.", {"id": _ID}, ["id"]),
}


def _summary(mail: StoredMail, body: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": mail.id,
        "from": mail.sender,
        "to": mail.to,
        "subject": mail.subject,
        "date": mail.date,
        "unread": mail.unread,
        "messageId": mail.message_id,
    }
    if mail.in_reply_to:
        out["inReplyTo"] = mail.in_reply_to
    if body:
        out["body"] = mail.body
    return out


class MailTools:
    """One thread's mailbox tools (`agent_tools.calls.ToolSet`). `sent` is told of each
    message the agent sends (the server notifies a recipient it has loaded at once)."""

    def __init__(
        self,
        box: MailTransport,
        thread_id: str,
        sent: Callable[[StoredMail], Awaitable[None]] | None = None,
    ) -> None:
        self.box = box
        self._thread_id = thread_id
        self._sent = sent
        self._tools = {
            name: DynamicTool(
                mcp_name=name,
                tool=name,
                namespace=MAIL_SERVER,
                description=description,
                input_schema={"type": "object", "properties": props, "required": required},
            )
            for name, (description, props, required) in _SPECS.items()
        }

    @property
    def thread_id(self) -> str:
        return self._thread_id

    @property
    def tools(self) -> Mapping[str, DynamicTool]:
        return self._tools

    async def call(self, name: str, arguments: Any) -> CallOutcome:
        args = arguments if isinstance(arguments, dict) else {}
        try:
            result = await trio.to_thread.run_sync(self._run, name, args)
        except MailError as exc:
            return CallOutcome([ToolOutputText(text=str(exc))], success=False)
        except (KeyError, TypeError) as exc:
            return CallOutcome([ToolOutputText(text=f"bad arguments for {name}: {exc}")], False)
        if isinstance(result, StoredMail) and name in ("mail_send", "mail_reply") and self._sent:
            await self._sent(result)
        shown = (
            [_summary(m) for m in result]
            if isinstance(result, list)
            else _summary(result, body=name == "mail_read")
        )
        return CallOutcome([ToolOutputText(text=json.dumps(shown))], success=True)

    def _run(self, name: str, args: dict[str, Any]) -> StoredMail | list[StoredMail]:
        box, me = self.box, self._thread_id
        if name == "mail_send":
            text = _text(args, "body")
            return box.send(box.address(me), _text(args, "to"), str(args.get("subject", "")), text)
        if name == "mail_check":
            return box.messages(me, unread_only=bool(args.get("unread_only", True)))
        if name == "mail_read":
            return box.read(me, _text(args, "id"))
        if name == "mail_reply":
            return box.reply(me, _text(args, "id"), _text(args, "body"))
        if name == "mail_mark_read":
            return box.mark_read(me, _text(args, "id"))
        raise MailError(f"no tool named {name!r}; the tools are: {', '.join(_SPECS)}")


def _text(args: dict[str, Any], key: str) -> str:
    value = args[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value
