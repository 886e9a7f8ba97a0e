"""Mail between threads (threadline additions): `mailbox/*` requests and the
`mailbox/messageReceived` notification. A thread's address is `<thread id>@threadline.local`
(or an alias of it, `config.mailbox.alias`)."""

from __future__ import annotations

import msgspec

from .base import Base

__all__ = [
    "MailMessage",
    "MailboxListParams",
    "MailboxListResponse",
    "MailboxMarkReadParams",
    "MailboxMarkReadResponse",
    "MailboxMessageReceivedNotification",
    "MailboxReadParams",
    "MailboxReadResponse",
    "MailboxSendParams",
    "MailboxSendResponse",
]


class MailMessage(Base, kw_only=True):
    """A message in a thread's mailbox."""

    #: Its key in the mailbox: what `mailbox/read`, `mailbox/markRead` and `inReplyTo` take.
    id: str
    #: Its RFC 5322 `Message-ID`.
    message_id: str
    sender: str = msgspec.field(name="from")
    to: str
    subject: str
    #: unix seconds
    date: int
    unread: bool
    #: The `Message-ID` it answers.
    in_reply_to: str | None = None
    #: The text (left out of listings).
    body: str | None = None


class MailboxSendParams(Base, kw_only=True):
    """Send mail: from the thread `threadId` (from the client when it is left out)."""

    to: str
    body: str
    subject: str = ""
    thread_id: str | None = None
    #: Reply to this message of `threadId`'s mailbox (its id): sent to its sender, threaded
    #: (`In-Reply-To`, `References`), "Re: " before its subject.
    in_reply_to: str | None = None


class MailboxSendResponse(Base, kw_only=True):
    message: MailMessage


class MailboxListParams(Base, kw_only=True):
    thread_id: str
    unread_only: bool = False


class MailboxListResponse(Base, kw_only=True):
    #: Oldest first, without bodies.
    data: list[MailMessage]


class MailboxReadParams(Base, kw_only=True):
    thread_id: str
    id: str


class MailboxReadResponse(Base, kw_only=True):
    message: MailMessage


class MailboxMarkReadParams(Base, kw_only=True):
    thread_id: str
    id: str


class MailboxMarkReadResponse(Base, kw_only=True):
    message: MailMessage


class MailboxMessageReceivedNotification(Base, kw_only=True):
    """Mail arrived for a loaded thread (to the thread's followers); no body."""

    thread_id: str
    message: MailMessage
