"""The engine's watch over loaded threads' mailboxes (server/mail.py): a mailbox removed
(`thread/delete` with `deleteMailbox`) while the watch looks at it stops neither the watch
nor the announcements to the other threads."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import trio

from threadline.mailbox.maildir import CLIENT, Mailbox
from threadline.server.mail import MailService
from threadline.server.threads import LoadedThread


class _Thread(SimpleNamespace):
    """What the watch uses of a loaded thread: its id, record, config, running turn, notify."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(
            id=thread_id,
            record=SimpleNamespace(ephemeral=False),
            settings=SimpleNamespace(config={}),
            running_turn=None,
        )
        self.heard: list[Any] = []
        self.told = trio.Event()

    async def notify(self, method: str, params: Any) -> None:
        self.heard.append((method, params))
        self.told.set()


class _RemovedWhilePolled(Mailbox):
    """`new_keys` of `victim` lets the thread's removal happen while the watch waits for it."""

    def __init__(self, root: str, victim: str) -> None:
        super().__init__(root)
        self.victim, self.service, self.removed = victim, cast(MailService, None), trio.Event()

    def new_keys(self, thread_id: str) -> set[str]:
        keys = super().new_keys(thread_id)
        if thread_id == self.victim and keys and not self.removed.is_set():
            self.service.remove(thread_id)
            trio.from_thread.run_sync(self.removed.set)  # (the watch runs this in a thread)
        return keys


async def test_a_mailbox_removed_while_polled(tmp_path: Path) -> None:
    doomed, other = str(uuid.uuid4()), str(uuid.uuid4())
    threads = {tid: _Thread(tid) for tid in (doomed, other)}
    loaded = cast(dict[str, LoadedThread], threads)
    service = MailService(str(tmp_path), loaded, lambda tid: tid in threads)
    box = _RemovedWhilePolled(str(tmp_path / "mail"), doomed)
    box.service, service.box = service, box
    for tid in threads:
        box.open(tid)
        await service.open(cast(LoadedThread, threads[tid]), cast(Any, None))
    box.send(CLIENT, box.address(doomed), "going", "away")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.watch)
            await box.removed.wait()
            sent = box.send(CLIENT, box.address(other), "still", "here")
            await threads[other].told.wait()
            nursery.cancel_scope.cancel()
    [(method, params)] = threads[other].heard
    assert method == "mailbox/messageReceived" and params.message.id == sent.id
    assert threads[doomed].heard == [] and not (tmp_path / "mail" / doomed).exists()
