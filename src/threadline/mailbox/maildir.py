"""The filesystem mail transport: a Maildir per address under the state directory
(`<state>/mail/<thread id>/`, Python's `mailbox.Maildir`), messages in RFC 5322 with
`Message-ID`, `In-Reply-To`, `References`, `From`, `To`, `Subject` and `Date`.

Safe for several threadline processes sharing one state root: a message is written under
`tmp/` and renamed into `new/` (Maildir's protocol), so a reader sees a whole message or
none, a crash mid-send leaves at most a stray file in `tmp/` (never delivered, never
doubled), and keys are unique across processes. Reading marks a message seen by moving it
to `cur/` with the `S` flag. An alias is a symlink `mail/<alias>` to the thread's directory,
created atomically (the first thread to claim it keeps it). Blocking file work: call it
from a worker thread."""

from __future__ import annotations

import contextlib
import email.policy
import email.utils
import mailbox
import os
import re
import shutil
from dataclasses import dataclass
from email.message import EmailMessage

__all__ = ["DOMAIN", "MailError", "Mailbox", "StoredMail"]

DOMAIN = "threadline.local"
_ALIAS = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}\Z")
_THREAD_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
#: The sender of mail the client sends in no thread's name.
CLIENT = f"client@{DOMAIN}"


class MailError(ValueError):
    """A request the mailbox cannot carry out (an unknown address or message, a taken
    alias): the message says which."""


@dataclass(frozen=True)
class StoredMail:
    #: The Maildir key: what `read`, `mark_read` and `reply` take.
    id: str
    message_id: str
    sender: str
    to: str
    subject: str
    #: unix seconds
    date: int
    in_reply_to: str | None
    unread: bool
    body: str


def _key_ok(key: str) -> bool:
    return bool(key) and "/" not in key and not key.startswith(".")


class Mailbox:
    """The mailboxes under one state directory's `mail/`."""

    def __init__(self, root: str) -> None:
        self.root = root

    @staticmethod
    def address(thread_id: str) -> str:
        return f"{thread_id}@{DOMAIN}"

    def _dir(self, local: str) -> str:
        return os.path.join(self.root, local)

    def open(self, thread_id: str, alias: str | None = None) -> str:
        """The thread's mailbox, created if new, with `alias` claimed for it; its address."""
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        mailbox.Maildir(self._dir(thread_id), create=True)
        if alias is not None:
            self._claim(thread_id, alias)
        return self.address(thread_id)

    def _claim(self, thread_id: str, alias: str) -> None:
        if not _ALIAS.match(alias) or _THREAD_ID.match(alias):
            raise MailError(
                f"mailbox alias {alias!r} must be lowercase letters, digits, '.', '_' or '-'"
            )
        link = self._dir(alias)
        try:
            os.symlink(thread_id, link)
        except FileExistsError:
            if os.path.islink(link) and os.readlink(link) == thread_id:
                return
            raise MailError(f"the mailbox alias {alias} is another thread's") from None

    def resolve(self, address: str) -> str:
        """The thread id an address (`<thread id or alias>@threadline.local`) delivers to."""
        local, _, domain = address.strip().partition("@")
        if domain.lower() not in ("", DOMAIN) or not local:
            raise MailError(f"{address!r} is not a threadline address (<thread>@{DOMAIN})")
        local = local.lower()
        path = self._dir(local)
        if _THREAD_ID.match(local) and os.path.isdir(path) and not os.path.islink(path):
            return local
        if _ALIAS.match(local) and os.path.islink(path):
            target = os.readlink(path)
            if _THREAD_ID.match(target) and os.path.isdir(self._dir(target)):
                return target
        raise MailError(f"no mailbox at {address}")

    def _maildir(self, thread_id: str) -> mailbox.Maildir:
        path = self._dir(thread_id)
        if not _THREAD_ID.match(thread_id) or not os.path.isdir(path):
            raise MailError(f"thread {thread_id} has no mailbox")
        return mailbox.Maildir(path, create=False)

    def send(
        self,
        sender: str,
        to: str,
        subject: str,
        body: str,
        *,
        reply_to: StoredMail | None = None,
    ) -> StoredMail:
        """Deliver a message to `to`'s mailbox (atomically: tmp/ then new/)."""
        target = self.resolve(to)
        message = EmailMessage(policy=email.policy.default)
        message["From"] = sender
        message["To"] = self.address(target)
        message["Subject"] = subject
        message["Date"] = email.utils.formatdate(localtime=False)
        message["Message-ID"] = email.utils.make_msgid(domain=DOMAIN)
        if reply_to is not None:
            message["In-Reply-To"] = reply_to.message_id
            message["References"] = reply_to.message_id
        message.set_content(body)
        key = self._maildir(target).add(mailbox.MaildirMessage(message))
        return _stored(key, mailbox.MaildirMessage(message), unread=True)

    def messages(self, thread_id: str, unread_only: bool = False) -> list[StoredMail]:
        """The thread's messages, oldest first."""
        box = self._maildir(thread_id)
        found = []
        for key in box.iterkeys():
            with contextlib.suppress(KeyError, FileNotFoundError):
                mail = _stored(key, box.get_message(key))
                if mail.unread or not unread_only:
                    found.append(mail)
        return sorted(found, key=lambda m: (m.date, m.id))

    def new_keys(self, thread_id: str) -> set[str]:
        """The keys in the mailbox's `new/` (delivered, never looked at): cheap to poll."""
        try:
            names = os.listdir(os.path.join(self._dir(thread_id), "new"))
        except OSError:
            return set()
        return {n.split(":", 1)[0] for n in names if not n.startswith(".")}

    def read(self, thread_id: str, key: str) -> StoredMail:
        box = self._maildir(thread_id)
        if not _key_ok(key):
            raise MailError(f"no message {key!r}")
        try:
            return _stored(key, box.get_message(key))
        except (KeyError, FileNotFoundError):
            raise MailError(f"no message {key!r} in thread {thread_id}'s mailbox") from None

    def mark_read(self, thread_id: str, key: str) -> StoredMail:
        box = self._maildir(thread_id)
        self.read(thread_id, key)  # (MailError for an unknown key)
        message = box.get_message(key)
        message.set_subdir("cur")
        message.add_flag("S")
        box[key] = message
        return _stored(key, message)

    def reply(self, thread_id: str, key: str, body: str) -> StoredMail:
        original = self.read(thread_id, key)
        subject = original.subject
        if not subject.lower().startswith("re:"):
            subject = f"Re: {subject}"
        return self.send(self.address(thread_id), original.sender, subject, body, reply_to=original)

    def remove(self, thread_id: str) -> None:
        """Delete the thread's mailbox and its aliases."""
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.root):
                link = self._dir(name)
                if os.path.islink(link) and os.readlink(link) == thread_id:
                    os.unlink(link)
        shutil.rmtree(self._dir(thread_id), ignore_errors=True)


def _stored(key: str, message: mailbox.MaildirMessage, unread: bool | None = None) -> StoredMail:
    parsed = email.message_from_bytes(bytes(message), policy=email.policy.default)
    body_part = parsed.get_body(preferencelist=("plain",)) if parsed.is_multipart() else parsed
    body = body_part.get_content() if body_part is not None else ""
    when = email.utils.parsedate_to_datetime(parsed["Date"]) if parsed["Date"] else None
    return StoredMail(
        id=key,
        message_id=str(parsed["Message-ID"] or ""),
        sender=str(parsed["From"] or ""),
        to=str(parsed["To"] or ""),
        subject=str(parsed["Subject"] or ""),
        date=int(when.timestamp()) if when is not None else 0,
        in_reply_to=str(parsed["In-Reply-To"]) if parsed["In-Reply-To"] else None,
        unread="S" not in message.get_flags() if unread is None else unread,
        body=body.rstrip("\n") if isinstance(body, str) else "",
    )
