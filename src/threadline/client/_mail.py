"""The `mailbox/*` requests of `Client`, one typed method each (mail between threads; the
`mailbox/messageReceived` notification arrives on `subscribe()`)."""

from __future__ import annotations

from typing import TypeVar

from ..protocol import (
    Base,
    MailboxListParams,
    MailboxListResponse,
    MailboxMarkReadParams,
    MailboxMarkReadResponse,
    MailboxReadParams,
    MailboxReadResponse,
    MailboxSendParams,
    MailboxSendResponse,
    MailMessage,
)

__all__ = ["MailRequests"]

_R = TypeVar("_R", bound=Base)


class MailRequests:
    """Mixed into `Client`, which supplies `_call`."""

    async def _call(self, method: str, params: Base, result_type: type[_R]) -> _R:
        raise NotImplementedError

    async def send_mail(
        self,
        to: str,
        body: str,
        *,
        subject: str = "",
        thread_id: str | None = None,
        in_reply_to: str | None = None,
    ) -> MailMessage:
        """`mailbox/send` from the thread `thread_id` (from the client when None) to an
        address (`<thread id>@threadline.local` or an alias); `in_reply_to` (a message id of
        `thread_id`'s mailbox) answers it: to its sender, threaded, `to` then ignored."""
        params = MailboxSendParams(
            to=to, body=body, subject=subject, thread_id=thread_id, in_reply_to=in_reply_to
        )
        return (await self._call("mailbox/send", params, MailboxSendResponse)).message

    async def list_mail(self, thread_id: str, *, unread_only: bool = False) -> list[MailMessage]:
        """`mailbox/list`: the thread's messages, oldest first, without bodies."""
        params = MailboxListParams(thread_id=thread_id, unread_only=unread_only)
        return (await self._call("mailbox/list", params, MailboxListResponse)).data

    async def read_mail(self, thread_id: str, message_id: str) -> MailMessage:
        """`mailbox/read`: one message with its body (`message_id`: its `id`)."""
        params = MailboxReadParams(thread_id=thread_id, id=message_id)
        return (await self._call("mailbox/read", params, MailboxReadResponse)).message

    async def mark_mail_read(self, thread_id: str, message_id: str) -> MailMessage:
        params = MailboxMarkReadParams(thread_id=thread_id, id=message_id)
        return (await self._call("mailbox/markRead", params, MailboxMarkReadResponse)).message
