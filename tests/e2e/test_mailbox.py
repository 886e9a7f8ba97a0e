"""Mail between threads over the protocol (mock backend: the mailbox is the engine's): the
`mailbox/*` methods, `mailbox/messageReceived`, reply threading, aliases, a turn woken by
mail, two threadline processes sharing one state root, and a kill -9 in the middle of
sends (nothing lost that was acknowledged, nothing doubled)."""

from __future__ import annotations

import email
import email.policy
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import ServerProcess, running_server

pytestmark = pytest.mark.e2e


async def received(srv: ServerProcess, thread_id: str, timeout: float = 10) -> dict[str, Any]:
    event = await srv.wait_for(
        lambda e: (
            isinstance(e, dict)
            and e.get("method") == "mailbox/messageReceived"
            and e["params"]["threadId"] == thread_id
        ),
        timeout,
    )
    return event["params"]["message"]  # type: ignore[no-any-return]


async def test_send_list_read_reply_and_aliases(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        alice = await srv.start_thread(workdir, config={"mailbox": {"alias": "alice"}})
        bob = await srv.start_thread(workdir)
        sent = await srv.call(
            "mailbox/send",
            {"threadId": bob, "to": "alice@threadline.local", "subject": "plan", "body": "Hi!"},
        )
        arrived = await received(srv, alice)
        assert arrived["id"] == sent["message"]["id"] and "body" not in arrived
        assert arrived["from"] == f"{bob}@threadline.local"
        assert arrived["to"] == f"{alice}@threadline.local"
        [listed] = (await srv.call("mailbox/list", {"threadId": alice, "unreadOnly": True}))["data"]
        assert listed["subject"] == "plan" and listed["unread"] is True
        read = await srv.call("mailbox/read", {"threadId": alice, "id": listed["id"]})
        assert read["message"]["body"] == "Hi!"
        # a reply goes to the sender, threaded
        reply = await srv.call(
            "mailbox/send", {"threadId": alice, "inReplyTo": listed["id"], "to": "", "body": "Yes."}
        )
        back = await received(srv, bob)
        assert back["subject"] == "Re: plan"
        assert back["inReplyTo"] == listed["messageId"] == reply["message"]["inReplyTo"]
        await srv.call("mailbox/markRead", {"threadId": alice, "id": listed["id"]})
        assert (await srv.call("mailbox/list", {"threadId": alice, "unreadOnly": True}))[
            "data"
        ] == []
        # the message is a real RFC 5322 file in a Maildir
        [path] = (home / "mail" / alice / "cur").iterdir()
        parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        assert parsed["Message-ID"] == listed["messageId"] and parsed["Subject"] == "plan"
        # errors name what is wrong, and the server goes on
        err = await srv.error(
            "mailbox/send", {"threadId": bob, "to": "nobody@threadline.local", "body": "x"}
        )
        assert "nobody@threadline.local" in err["message"], err
        err = await srv.error("mailbox/read", {"threadId": alice, "id": "no-such-id"})
        assert "no-such-id" in err["message"], err
        err = await srv.error(
            "thread/start", {"cwd": str(workdir), "config": {"mailbox": {"alias": "alice"}}}
        )
        assert "alice" in err["message"], err
        # thread/delete keeps the mailbox unless asked
        await srv.call("thread/delete", {"threadId": bob})
        assert (home / "mail" / bob).is_dir()
        await srv.call("thread/delete", {"threadId": alice, "deleteMailbox": True})
        assert not (home / "mail" / alice).exists() and not (home / "mail" / "alice").exists()


async def test_mail_wakes_an_idle_thread(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        sleeper = await srv.start_thread(workdir, config={"mailbox": {"wakeOnMail": True}})
        sent = await srv.call(
            "mailbox/send", {"to": f"{sleeper}@threadline.local", "subject": "wake", "body": "go"}
        )
        started = await srv.wait_method("turn/started", timeout=10)
        assert started["params"]["threadId"] == sleeper
        item = await srv.wait_for(
            lambda e: (
                isinstance(e, dict)
                and e.get("method") == "item/completed"
                and e["params"]["item"]["type"] == "userMessage"
            ),
            10,
        )
        prompt = item["params"]["item"]["content"][0]["text"]
        assert sent["message"]["id"] in prompt and "client@threadline.local" in prompt
        await srv.wait_method("turn/completed", timeout=10)


async def test_two_processes_share_one_root(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as one, running_server(nursery, home) as two:
        await one.initialize()
        await two.initialize()
        here = await one.start_thread(workdir)
        there = await two.start_thread(workdir)
        await one.call(
            "mailbox/send", {"threadId": here, "to": f"{there}@threadline.local", "body": "across"}
        )
        arrived = await received(two, there)
        assert arrived["from"] == f"{here}@threadline.local"
        await two.call(
            "mailbox/send",
            {"threadId": there, "inReplyTo": arrived["id"], "to": "", "body": "back"},
        )
        assert (await received(one, here))["inReplyTo"] == arrived["messageId"]


async def test_a_kill_9_mid_send_loses_and_doubles_nothing(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        inbox = await srv.start_thread(workdir)
    acknowledged: set[str] = set()
    enough = trio.Event()
    async with running_server(nursery, home, check_exit=False) as srv:
        await srv.initialize()

        async def sender() -> None:
            for n in range(10_000):
                sent = await srv.call(
                    "mailbox/send", {"to": f"{inbox}@threadline.local", "body": f"n{n}"}
                )
                acknowledged.add(sent["message"]["messageId"])
                if len(acknowledged) >= 30:
                    enough.set()

        async with trio.open_nursery() as inner:
            inner.start_soon(sender)
            with trio.fail_after(20):
                await enough.wait()
            srv.signal(signal.SIGKILL)
            await srv.wait()
            inner.cancel_scope.cancel()
    ids = []
    for path in (home / "mail" / inbox / "new").iterdir():
        parsed = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
        ids.append(str(parsed["Message-ID"]))
    assert len(ids) == len(set(ids)), "a message was delivered twice"
    assert acknowledged <= set(ids), "an acknowledged message was lost"
    assert len(set(ids) - acknowledged) <= 1  # at most the one in flight when killed
