"""Mail between two real agents: a claude thread and a gemini thread on one threadline, each
against its fake model server, with the mailbox tools (`config.mailbox`). The claude agent
sends (`mail_send`) to the gemini thread's alias; its client hears `mailbox/messageReceived`;
the gemini agent reads the message (`mail_read`) and answers it (`mail_reply`), threaded; the
answer wakes the idle claude thread (`wakeOnMail`), which runs a turn by itself."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.gemini_env import MODEL, GeminiEnv
from tests.fakes.anthropic import Rule, ToolUse
from tests.fakes.gemini import FunctionCall
from tests.fakes.gemini import Rule as GeminiRule
from tests.support.client import Message, ServerProcess, accept, notifications
from tests.support.events import items_completed, status, turn

pytestmark = pytest.mark.e2e


def mail_calls(events: list[Any]) -> list[dict[str, Any]]:
    return [i for i in items_completed(events, "mcpToolCall") if i["server"] == "mailbox"]


def of_thread(events: list[Any], thread_id: str) -> list[Any]:
    return [
        e
        for e in events
        if isinstance(e, dict) and e.get("params", {}).get("threadId") == thread_id
    ]


async def finish(srv: ServerProcess, thread_id: str, events: list[Any]) -> list[Any]:
    """`events` and what follows until a turn of `thread_id` has completed."""
    seen = list(events)
    if not notifications(of_thread(seen, thread_id), "turn/completed"):
        await srv.wait_for(
            lambda e: (
                isinstance(e, dict)
                and e.get("method") == "turn/completed"
                and e["params"]["threadId"] == thread_id
            ),
            60,
            seen,
        )
    return seen


async def test_claude_and_gemini_agents_mail_each_other(
    nursery: trio.Nursery, claude_env: ClaudeEnv, gemini_env: GeminiEnv
) -> None:
    claude, gemini = claude_env, gemini_env
    claude.script(
        Rule(
            "tell the reviewer",
            [
                ToolUse(
                    "mcp__mailbox__mail_send",
                    {"to": "reviewer@threadline.local", "subject": "patch", "body": "PATCH-42?"},
                ),
                "Sent.",
            ],
        ),
        Rule("You have new mail", ["The reviewer answered."]),
    )
    # the gemini thread's CLI: its own HOME and variables. Both envs share the test's tmp dir,
    # whose stub-bin stubs every CLI but one: each thread names its real binary (cliPath).
    extra = {k: v for k, v in gemini.cli_vars().items() if k not in ("PATH", "BACKEND_MODEL")}
    extra.update(HOME=str(gemini.cli_home), **{gemini.marker_var: str(gemini.tmp)})
    async with claude.server(nursery, **extra) as srv:
        await srv.initialize()
        author = await srv.start_thread(
            claude.work,
            modelProvider="claude",
            config={
                "mailbox": {"alias": "author", "wakeOnMail": True, "wakeIntervalMs": 10},
                "cliPath": str(claude.cli),
            },
        )
        reviewer = await srv.start_thread(
            gemini.work,
            modelProvider="gemini",
            model=MODEL,
            config={"mailbox": {"alias": "reviewer"}, "cliPath": str(gemini.cli)},
        )
        t1, events = await turn(srv, author, "tell the reviewer", on_request=accept)
        assert status(t1) == "completed", json.dumps([t1.get("error"), events[-4:]])[:3000]
        [sent] = mail_calls(events)
        assert sent["tool"] == "mail_send" and sent["status"] == "completed"
        [arrived] = notifications(events, "mailbox/messageReceived")
        message = arrived["params"]["message"]
        assert arrived["params"]["threadId"] == reviewer and message["subject"] == "patch"
        assert message["from"] == f"{author}@threadline.local"

        gemini.script(
            GeminiRule(
                "check your mail",
                [
                    FunctionCall("mcp_mailbox_mail_read", {"id": message["id"]}),
                    FunctionCall("mcp_mailbox_mail_reply", {"id": message["id"], "body": "LGTM"}),
                    "Replied.",
                ],
            )
        )
        t2, events = await turn(srv, reviewer, "check your mail", on_request=accept)
        assert status(t2) == "completed"
        read, replied = mail_calls(events)
        assert (read["tool"], replied["tool"]) == ("mail_read", "mail_reply")
        # the agent got the message itself back from mail_read
        assert "PATCH-42?" in json.dumps(read["result"])
        assert "PATCH-42?" in json.dumps(gemini.fake.model_requests[1].contents)

        # the reply wakes the idle claude thread: a turn nobody started over the protocol
        woken: list[Message] = of_thread(await finish(srv, author, events), author)
        methods = [e["method"] for e in woken]
        assert methods[0] == "mailbox/messageReceived" and "turn/started" in methods
        [answer] = [e["params"]["message"] for e in notifications(woken, "mailbox/messageReceived")]
        assert answer["subject"] == "Re: patch" and answer["inReplyTo"] == message["messageId"]
        [prompt] = [i for i in items_completed(woken, "userMessage")]
        assert answer["id"] in prompt["content"][0]["text"]
        assert [i["text"] for i in items_completed(woken, "agentMessage")] == [
            "The reviewer answered."
        ]
    await gemini.check_orphans()
