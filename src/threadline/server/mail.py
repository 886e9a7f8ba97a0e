"""Mail between threads, in the engine: every persisted thread has a mailbox (the Maildir
transport, `mailbox/maildir.py`); `mailbox/*` requests; `mailbox/messageReceived` to a loaded
thread's followers when mail arrives (from this process or another sharing the state root:
each loaded thread's `new/` is polled); and, for a thread whose `config.mailbox` asks for it,
the mail tools for its agent and a turn started by arriving mail (`wakeOnMail`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ..agent_tools.host import ToolHosting
from ..mailbox.maildir import CLIENT, Mailbox, MailError, StoredMail
from ..mailbox.tools import MAIL_SERVER, MailTools
from ..mailbox.transport import MailTransport
from ..protocol import (
    MailboxListParams,
    MailboxListResponse,
    MailboxMarkReadParams,
    MailboxMarkReadResponse,
    MailboxMessageReceivedNotification,
    MailboxReadParams,
    MailboxReadResponse,
    MailboxSendParams,
    MailboxSendResponse,
    MailMessage,
    TextInput,
)
from ..rpc.errors import INVALID_PARAMS, INVALID_REQUEST, RpcError
from .threads import LoadedThread

__all__ = ["MailService", "mail_message"]

log = logging.getLogger("threadline.mail")

#: How often the loaded threads' mailboxes are looked at for new mail (seconds).
POLL = 0.25
#: The least time between two turns that mail starts on one thread (`wakeIntervalMs`).
WAKE_INTERVAL = 30.0

_T = TypeVar("_T")


def mail_message(mail: StoredMail, body: bool = False) -> MailMessage:
    return MailMessage(
        id=mail.id,
        message_id=mail.message_id,
        sender=mail.sender,
        to=mail.to,
        subject=mail.subject,
        date=mail.date,
        unread=mail.unread,
        in_reply_to=mail.in_reply_to,
        body=mail.body if body else None,
    )


def _options(thread: LoadedThread) -> dict[str, Any] | None:
    """The thread's `config.mailbox` (None: no tools, no wake)."""
    found = thread.settings.config.get("mailbox")
    return found if isinstance(found, dict) else None


class MailService:
    def __init__(
        self,
        state_root: str,
        loaded: dict[str, LoadedThread],
        known: Callable[[str], bool],
    ) -> None:
        self.box: MailTransport = Mailbox(os.path.join(state_root, "mail"))
        self._loaded = loaded
        #: Whether a thread id is a persisted thread (it has an address, loaded or not).
        self._known = known
        self._seen: dict[str, set[str]] = {}
        self._pending_wake: dict[str, list[StoredMail]] = {}
        self._last_wake: dict[str, float] = {}

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return await trio.to_thread.run_sync(fn, *args)
        except MailError as exc:
            raise RpcError(INVALID_REQUEST, str(exc)) from None
        except OSError as exc:
            raise RpcError(INVALID_REQUEST, f"the mailbox cannot be used: {exc}") from None

    # -- threads -------------------------------------------------------------------------------

    @staticmethod
    def check_options(config: dict[str, Any]) -> None:
        """-32602 for a `config.mailbox` that is not `{alias?, wakeOnMail?, wakeIntervalMs?}`."""
        options = config.get("mailbox")
        if options is None:
            return
        ok = isinstance(options, dict) and set(options) <= {"alias", "wakeOnMail", "wakeIntervalMs"}
        ok = ok and isinstance(options.get("alias", ""), str)
        ok = ok and isinstance(options.get("wakeOnMail", False), bool)
        interval = options.get("wakeIntervalMs", 1) if ok else None
        if not ok or not isinstance(interval, (int, float)) or interval <= 0:
            raise RpcError(
                INVALID_PARAMS,
                "Invalid params: config.mailbox must be an object with alias (string), "
                "wakeOnMail (boolean), wakeIntervalMs (number > 0)",
            )

    async def open(self, thread: LoadedThread, tools: ToolHosting) -> None:
        """The thread's mailbox (and its alias); its agent's mail tools when it asks."""
        if thread.record.ephemeral:
            return
        # (a listing of one small directory: no worker thread, so a thread/start answers
        # as soon as it did without a mailbox; the mailbox itself is made when first used)
        self._seen[thread.id] = self.box.new_keys(thread.id)
        options = _options(thread)
        if options is None:
            return
        try:
            await self._run(self.box.open, thread.id, options.get("alias"))
        except RpcError as exc:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {exc.message}") from None
        mail_tools = MailTools(self.box, thread.id, self._delivered)
        host = await tools.host()
        thread.settings.mcp_servers.append(host.register(mail_tools, MAIL_SERVER))
        thread.on_close.append(lambda: host.unregister(mail_tools))

    async def _delivered(self, mail: StoredMail) -> None:
        """Mail sent from this process: its recipient's followers hear of it now."""
        target = self._loaded.get(mail.to.partition("@")[0])
        if target is not None:
            await self._announce(target, [mail])

    def _resolve(self, address: str) -> str:
        try:
            return self.box.resolve(address)
        except MailError:
            local = address.partition("@")[0].lower()
            if self._known(local):  # a thread whose mailbox was never opened
                self.box.open(local)
                return local
            raise

    # -- requests ------------------------------------------------------------------------------

    def _thread(self, thread_id: str) -> str:
        if not self._known(thread_id):
            raise MailError(f"no thread {thread_id} (an ephemeral thread has no mailbox)")
        self.box.open(thread_id)
        return thread_id

    async def send(self, p: MailboxSendParams) -> MailboxSendResponse:
        def deliver() -> StoredMail:
            if p.thread_id is None:
                if p.in_reply_to is not None:
                    raise MailError("inReplyTo needs the threadId whose message it answers")
                return self.box.send(
                    CLIENT, self.box.address(self._resolve(p.to)), p.subject, p.body
                )
            sender = self._thread(p.thread_id)
            if p.in_reply_to is not None:
                return self.box.reply(sender, p.in_reply_to, p.body)
            to = self.box.address(self._resolve(p.to))
            return self.box.send(self.box.address(sender), to, p.subject, p.body)

        mail = await self._run(deliver)
        await self._delivered(mail)
        return MailboxSendResponse(message=mail_message(mail, body=True))

    async def list_messages(self, p: MailboxListParams) -> MailboxListResponse:
        def listed() -> list[StoredMail]:
            return self.box.messages(self._thread(p.thread_id), p.unread_only)

        return MailboxListResponse(data=[mail_message(m) for m in await self._run(listed)])

    async def read(self, p: MailboxReadParams) -> MailboxReadResponse:
        mail = await self._run(lambda: self.box.read(self._thread(p.thread_id), p.id))
        return MailboxReadResponse(message=mail_message(mail, body=True))

    async def mark_read(self, p: MailboxMarkReadParams) -> MailboxMarkReadResponse:
        mail = await self._run(lambda: self.box.mark_read(self._thread(p.thread_id), p.id))
        return MailboxMarkReadResponse(message=mail_message(mail))

    def remove(self, thread_id: str) -> None:
        self._seen.pop(thread_id, None)
        self.box.remove(thread_id)

    # -- arrivals ------------------------------------------------------------------------------

    async def watch(self) -> None:
        """Announce mail arriving for loaded threads, and start the turns it wakes."""
        while True:
            await trio.sleep(POLL)
            for tid, thread in list(self._loaded.items()):
                if tid in self._seen:
                    await self._poll(thread)

    async def _poll(self, thread: LoadedThread) -> None:
        tid = thread.id
        now = await trio.to_thread.run_sync(self.box.new_keys, tid)
        # (the thread's mailbox may have been removed meanwhile: thread/delete)
        known = self._seen.get(tid)
        if known is None:
            return
        fresh, self._seen[tid] = now - known, known | now
        arrived = []
        for key in sorted(fresh):
            try:
                arrived.append(await self._run(self.box.read, tid, key))
            except RpcError as exc:
                log.info("thread %s: mail %s is gone before it was read: %s", tid, key, exc)
        if arrived:
            await self._announce(thread, arrived, seen=True)
        self._maybe_wake(thread)

    async def _announce(
        self, thread: LoadedThread, arrived: list[StoredMail], seen: bool = False
    ) -> None:
        if not seen:
            known = self._seen.setdefault(thread.id, set())
            arrived = [m for m in arrived if m.id not in known]
            known.update(m.id for m in arrived)
        for mail in arrived:
            await thread.notify(
                "mailbox/messageReceived",
                MailboxMessageReceivedNotification(thread_id=thread.id, message=mail_message(mail)),
            )
        options = _options(thread)
        if arrived and options and options.get("wakeOnMail"):
            self._pending_wake.setdefault(thread.id, []).extend(arrived)
            self._maybe_wake(thread)

    def _maybe_wake(self, thread: LoadedThread) -> None:
        """Start a turn for the mail waiting to wake `thread`: once it is idle, and at most
        once per `wakeIntervalMs`."""
        waiting = self._pending_wake.get(thread.id)
        options = _options(thread)
        if not waiting or not options or thread.running_turn is not None:
            return
        interval = float(options.get("wakeIntervalMs", WAKE_INTERVAL * 1000)) / 1000
        now = trio.current_time()
        if now - self._last_wake.get(thread.id, -interval) < interval:
            return
        del self._pending_wake[thread.id]
        self._last_wake[thread.id] = now
        lines = [f"- id {m.id}: from {m.sender}, subject {m.subject!r}" for m in waiting]
        prompt = (
            "You have new mail in your mailbox (read it with mail_read; reply with mail_reply):\n"
            + "\n".join(lines)
        )
        log.info("thread %s: %d new message(s) start a turn", thread.id, len(waiting))
        run = thread.start_turn([TextInput(text=prompt)])
        thread.nursery.start_soon(run.response_sent)
