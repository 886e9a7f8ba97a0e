"""What the engine asks of a mail transport: the interface `maildir.Mailbox` (the filesystem
transport) implements, and the plug-in point for another (an IMAP or JMAP server: each
thread's address a mailbox there). Every method is blocking (the engine calls them in a
worker thread) and raises `MailError` with a message for the client or agent."""

from __future__ import annotations

from typing import Protocol

from .maildir import MailError, StoredMail

__all__ = ["MailError", "MailTransport", "StoredMail"]


class MailTransport(Protocol):
    def address(self, thread_id: str) -> str:
        """The thread's own address (`<thread id>@threadline.local`)."""
        ...

    def open(self, thread_id: str, alias: str | None = None) -> str:
        """Create the thread's mailbox if it is new, claim `alias` for it; its address."""
        ...

    def resolve(self, address: str) -> str:
        """The thread id an address (an id's or an alias's) delivers to."""
        ...

    def send(
        self, sender: str, to: str, subject: str, body: str, *, reply_to: StoredMail | None = None
    ) -> StoredMail:
        """Deliver once, atomically (a crash delivers it whole or not at all)."""
        ...

    def messages(self, thread_id: str, unread_only: bool = False) -> list[StoredMail]: ...

    def new_keys(self, thread_id: str) -> set[str]:
        """The ids of messages delivered and never looked at: polled for arrivals."""
        ...

    def read(self, thread_id: str, key: str) -> StoredMail: ...

    def mark_read(self, thread_id: str, key: str) -> StoredMail: ...

    def reply(self, thread_id: str, key: str, body: str) -> StoredMail:
        """Answer a message to its sender, threaded (`In-Reply-To`, `References`)."""
        ...

    def remove(self, thread_id: str) -> None: ...
