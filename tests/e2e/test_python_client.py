"""`threadline.client` end to end: the Python client spawns the real `threadline` process and
drives it (mock backend, and the real `claude` CLI against the fake Anthropic API)."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import Rule, ToolUse
from threadline.client import (
    RpcError,
    ServerClosed,
    ServerRequest,
    UnknownNotification,
    accept_all,
    decline_all,
    image,
    message_item,
    spawn,
)
from threadline.protocol import (
    AgentMessageDeltaNotification,
    AgentMessageItem,
    CommandExecutionItem,
    CommandExecutionRequestApprovalParams,
    ContextCompactedNotification,
    ContextCompactionItem,
    FileChangeItem,
    FileChangeRequestApprovalParams,
    GitInfo,
    ImageInput,
    ItemCompletedNotification,
    ItemStartedNotification,
    LocalImageInput,
    MailboxMessageReceivedNotification,
    ReadOnlySandbox,
    TextInput,
    ThreadNameUpdatedNotification,
    ThreadStartedNotification,
    ToolRequestUserInputParams,
    TurnCompletedNotification,
    TurnStartedNotification,
    UserMessageItem,
    WarningNotification,
)

pytestmark = pytest.mark.e2e


def mock_env(home: Path, **extra: str) -> dict[str, str]:
    return {"AGENT_BACKEND": "mock", "THREADLINE_HOME": str(home), **extra}


async def test_streamed_turn_yields_typed_notifications_in_order(home: Path, workdir: Path) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        assert client.server_info is not None
        assert "mock" in [b.id for b in client.server_info.backends]
        thread = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread
        turn = await client.start_turn(thread.id, "/reason weighing it\n/text hello there world")
        seen = [n async for n in turn]

    assert isinstance(seen[0], TurnStartedNotification) or any(
        isinstance(n, TurnStartedNotification) for n in seen
    )
    assert isinstance(seen[-1], TurnCompletedNotification)
    assert seen[-1].turn.status == "completed" and seen[-1].turn.id == turn.turn_id
    deltas = [n.delta for n in seen if isinstance(n, AgentMessageDeltaNotification)]
    assert len(deltas) > 1 and "".join(deltas) == "hello there world"
    assert turn.text == "hello there world"
    started = {n.item.id for n in seen if isinstance(n, ItemStartedNotification)}
    completed = {n.item.id for n in seen if isinstance(n, ItemCompletedNotification)}
    assert started == completed and len(started) == 3  # userMessage, reasoning, agentMessage
    assert not [n for n in seen if isinstance(n, UnknownNotification)]


async def test_approvals_reach_the_handler_typed_and_decide_what_runs(
    home: Path, workdir: Path
) -> None:
    requests: list[ServerRequest] = []

    async def record_then(decision: str, request: ServerRequest) -> Any:
        requests.append(request)
        return {"decision": decision}

    async def accept(request: ServerRequest) -> Any:
        return await record_then("accept", request)

    async def decline(request: ServerRequest) -> Any:
        return await record_then("decline", request)

    async def broken(request: ServerRequest) -> Any:
        requests.append(request)
        raise RuntimeError("handler bug")

    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id

        done = await client.run_turn(tid, "/run echo ran > ran.txt", on_request=accept)
        assert isinstance(requests[-1].params, CommandExecutionRequestApprovalParams)
        assert requests[-1].params.command == "echo ran > ran.txt"
        [cmd] = [i for i in done.items if isinstance(i, CommandExecutionItem)]
        assert cmd.status == "completed" and (workdir / "ran.txt").read_text() == "ran\n"

        done = await client.run_turn(tid, "/write kept.txt never", on_request=decline)
        assert isinstance(requests[-1].params, FileChangeRequestApprovalParams)
        [change] = [i for i in done.items if isinstance(i, FileChangeItem)]
        assert change.status == "declined" and not (workdir / "kept.txt").exists()

        # A handler that raises is a decline (fail closed), and the turn still completes.
        done = await client.run_turn(tid, "/write bug.txt never", on_request=broken)
        [change] = [i for i in done.items if isinstance(i, FileChangeItem)]
        assert change.status == "declined" and not (workdir / "bug.txt").exists()
        assert done.completed is not None and done.completed.turn.status == "completed"

        # No handler at all: declined too.
        done = await client.run_turn(tid, "/run touch none.txt")
        [cmd] = [i for i in done.items if isinstance(i, CommandExecutionItem)]
        assert cmd.status == "declined" and not (workdir / "none.txt").exists()

        # The client-wide handler answers when the turn has none.
        client.approval_handler = accept_all
        await client.run_turn(tid, "/write yes.txt written")
        assert (workdir / "yes.txt").read_text().strip() == "written"
        client.approval_handler = decline_all
        await client.run_turn(tid, "/write no.txt never")
        assert not (workdir / "no.txt").exists()
    assert len(requests) == 3


async def test_questions_are_answered_through_the_handler(home: Path, workdir: Path) -> None:
    async def answer(request: ServerRequest) -> Any:
        assert isinstance(request.params, ToolRequestUserInputParams)
        [question] = request.params.questions
        return {"answers": {question.id: {"answers": ["Ada"]}}}

    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        done = await client.run_turn(tid, "/ask What is your name?", on_request=answer)
    assert "Ada" in done.text


async def test_cancel_interrupts_the_turn_and_the_thread_takes_the_next(
    home: Path, workdir: Path
) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        turn = await client.start_turn(tid, "/text going\n/sleep 30")
        async for n in turn:
            if isinstance(n, AgentMessageDeltaNotification):
                await turn.cancel()
        assert turn.completed is not None and turn.completed.turn.status == "interrupted"
        again = await client.run_turn(tid, "/text again")
        assert again.text == "again"


async def test_resume_in_a_new_process_and_errors_are_typed(home: Path, workdir: Path) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        events = client.subscribe()
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        started = await events.receive()
        assert isinstance(started, ThreadStartedNotification) and started.thread.id == tid
        await client.run_turn(tid, "/text first")

    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        listed = await client.list_threads()
        assert tid in [t.id for t in listed.data]
        resumed = await client.resume_thread(tid)
        assert resumed.thread.id == tid
        second = await client.run_turn(tid, "/text second")
        assert second.text == "second"
        read = await client.read_thread(tid)
        assert len(read.thread.turns) == 2

        with pytest.raises(RpcError) as unknown:
            await client.request("no/such/method", {})
        assert unknown.value.code == -32601
        with pytest.raises(RpcError) as bad:
            await client.read_thread("../../etc")
        assert bad.value.code in (-32600, -32602)
        # A second turn on a busy thread is refused by the server; the live turn is untouched.
        live = await client.start_turn(tid, "/sleep 30")
        with pytest.raises(RpcError):
            await client.start_turn(tid, "/text no")
        await live.cancel()
        assert (await live.wait()).turn.status == "interrupted"


async def test_server_death_ends_pending_turns_and_requests(home: Path, workdir: Path) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        turn = await client.start_turn(tid, "/sleep 30")
        pid = _server_pid()
        os.kill(pid, signal.SIGKILL)
        with trio.fail_after(10), pytest.raises(ServerClosed):
            await turn.wait()
        with pytest.raises(ServerClosed):
            await client.list_threads()


def _server_pid() -> int:
    """The threadline child of this test process (the only `-m threadline` child)."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
        if ppid == me and b"threadline" in argv:
            return int(name)
    raise AssertionError("no threadline child found")


async def test_drives_the_real_claude_cli(claude_env: ClaudeEnv) -> None:
    """The same client code drives a real CLI: a Bash approval accepted by the handler."""
    env = claude_env
    env.script(
        Rule(
            "make the file",
            [ToolUse("Bash", {"command": "touch via-client.txt", "description": "x"}), "Made."],
        )
    )
    requests: list[ServerRequest] = []

    async def accept(request: ServerRequest) -> Any:
        requests.append(request)
        return {"decision": "accept"}

    async with spawn(
        env={**env.env(), "THREADLINE_HOME": str(env.home)}, stderr=subprocess.DEVNULL
    ) as client:
        tid = (await client.start_thread(model_provider="claude", cwd=str(env.work))).thread.id
        done = await client.run_turn(tid, "make the file", on_request=accept)
    assert done.completed is not None and done.completed.turn.status == "completed"
    assert done.text == "Made."
    [request] = requests
    assert isinstance(request.params, CommandExecutionRequestApprovalParams)
    assert request.params.command == "touch via-client.txt"
    assert (env.work / "via-client.txt").exists()


async def test_cancel_right_after_turn_start_uses_the_native_interrupt(
    home: Path, workdir: Path
) -> None:
    # With a 60 s grace, a cancel that misses the backend's native interrupt would wait it out.
    env = mock_env(home, THREADLINE_INTERRUPT_GRACE="60")
    async with spawn(env=env, stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        for _ in range(10):
            turn = await client.start_turn(tid, "/sleep 30")
            await turn.cancel()
            with trio.fail_after(10):
                done = await turn.wait()
            assert done.turn.status == "interrupted"


async def test_options_the_backend_ignores_are_reported_as_warnings(
    home: Path, workdir: Path
) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        events = client.subscribe()
        config = {"maxTurns": 3, "allowedTools": ["Read"]}
        tid = (
            await client.start_thread(model_provider="mock", cwd=str(workdir), config=config)
        ).thread.id
        await client.run_turn(tid, "/text ok")
        warnings = [
            n.message
            for n in [
                events.receive_nowait() for _ in range(events.statistics().current_buffer_used)
            ]
            if isinstance(n, WarningNotification) and n.thread_id == tid
        ]
    assert warnings == [
        "the mock backend cannot honour maxTurns (BACKEND_MAX_TURNS); it is ignored",
        "the mock backend cannot honour allowedTools (ALLOWED_TOOLS); it is ignored",
    ]


async def test_client_defined_tools_are_answered_by_their_handlers(
    home: Path, workdir: Path
) -> None:
    from threadline.client import tool
    from threadline.protocol import DynamicToolCallItem

    @tool("Look a word up.", {"type": "object", "properties": {"q": {"type": "string"}}})
    async def lookup(arguments: Any) -> str:
        return f"{arguments['q']} means hello"

    @tool("Always breaks.", namespace="kb")
    async def broken(arguments: Any) -> str:
        raise RuntimeError("the index is offline")

    prompt = '/mcp threadline lookup {"q": "hola"}\n/mcp threadline kb__broken {}'
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        thread = (
            await client.start_thread(
                model_provider="mock", cwd=str(workdir), tools=[lookup, broken]
            )
        ).thread
        turn = await client.run_turn(thread.id, prompt)
    assert turn.completed is not None and turn.completed.turn.status == "completed"
    calls = [i for i in turn.items if isinstance(i, DynamicToolCallItem)]
    assert [(c.tool, c.namespace, c.status) for c in calls] == [
        ("lookup", None, "completed"),
        ("broken", "kb", "failed"),
    ]
    assert "lookup: hola means hello" in turn.text
    assert "kb__broken: broken failed: the index is offline" in turn.text


# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _drain(events: trio.MemoryReceiveChannel[Any]) -> list[Any]:
    return [events.receive_nowait() for _ in range(events.statistics().current_buffer_used)]


async def test_images_and_typed_overrides_reach_the_agent(home: Path, workdir: Path) -> None:
    (workdir / "shot.png").write_bytes(PNG)
    data_url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    other = workdir / "sub"
    other.mkdir()
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        seen = await client.run_turn(
            tid, ["What is in these?", image(data_url), image(Path("shot.png"))]
        )
        assert seen.text.count(f"[image: image/png, {len(PNG)} bytes]") == 2, seen.text
        [user] = [i for i in seen.items if isinstance(i, UserMessageItem)]
        assert [type(c) for c in user.content] == [TextInput, ImageInput, LocalImageInput]

        settings = await client.run_turn(
            tid,
            "/settings",
            model="mock-2",
            effort="high",
            sandbox_policy=ReadOnlySandbox(),
            cwd=str(other),
            output_schema={"type": "object"},
        )
        for part in ("model=mock-2", "effort=high", "sandbox=read-only", f"cwd={other}"):
            assert part in settings.text, settings.text
        assert "outputSchema=True" in settings.text
        later = await client.run_turn(tid, "/settings")  # overrides stick, the schema does not
        assert "model=mock-2" in later.text and "outputSchema=False" in later.text

        with pytest.raises(RpcError) as bad:
            await client.start_turn(tid, [image(workdir / "missing.png")])
        assert bad.value.code == -32602 and "missing.png" in bad.value.message
        assert (await client.run_turn(tid, "/text still fine")).text == "still fine"


async def test_steer_fork_compact_and_injected_history(home: Path, workdir: Path) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        await client.inject_items(
            tid,
            [message_item("user", "Hi"), message_item("assistant", "The secret word is PLUM.")],
        )
        turn = await client.start_turn(tid, "/text working\n/sleep 1\nfirst part")
        steered = []
        async for n in turn:
            if isinstance(n, AgentMessageDeltaNotification) and not steered:
                steered.append(await turn.steer("also this"))  # the agent is at work
        assert [s.turn_id for s in steered] == [turn.turn_id]
        assert turn.completed is not None and turn.completed.turn.status == "completed"
        assert "steered: also this" in turn.text
        with pytest.raises(RpcError) as idle:
            await turn.steer("too late")
        assert "no active turn" in idle.value.message

        history = (await client.run_turn(tid, "/history")).text
        said = [line for line in history.splitlines() if line.startswith("user:")]
        assert [("PLUM" in line) for line in said] == [True, False]  # injected once
        assert said[0].index("PLUM") < said[0].index("first part")

        last = turn.turn_id
        forked = await client.fork_thread(tid, exclude_turns=True)
        fork = forked.thread.id
        assert fork != tid and forked.thread.forked_from_id == tid
        with pytest.raises(RpcError) as not_last:
            await client.fork_thread(tid, last_turn_id=last)  # /history ran after it
        assert not_last.value.code == -32602 and "lastTurnId" in not_last.value.message
        in_fork = (await client.run_turn(fork, "the fork speaks\n/history")).text
        assert "first part" in in_fork and "the fork speaks" in in_fork
        assert "the fork speaks" not in (await client.run_turn(tid, "/history")).text

        events = client.subscribe()
        compaction = await client.compact_thread(tid)
        done = await compaction.wait()
        assert done.turn.status == "completed" and compaction.turn_id == done.turn.id
        assert [type(i) for i in compaction.items] == [ContextCompactionItem]
        assert any(isinstance(n, ContextCompactedNotification) for n in _drain(events))
        after = (await client.run_turn(tid, "/history")).text
        assert "[compacted:" in after and "PLUM" not in after


async def test_thread_management_and_history_lists_across_a_restart(
    home: Path, workdir: Path
) -> None:
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        events = client.subscribe()
        tid = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        turn_ids = [(await client.run_turn(tid, f"/text turn {n}")).turn_id for n in range(3)]
        await client.set_thread_name(tid, "  Release notes  ")
        updated = await client.update_thread_metadata(tid, branch="main", sha="abc123")
        assert updated.thread.git_info == GitInfo(branch="main", sha="abc123")
        cleared = await client.update_thread_metadata(tid, sha=None)
        assert cleared.thread.git_info == GitInfo(branch="main")
        await client.archive_thread(tid)
        [named] = [n for n in _drain(events) if isinstance(n, ThreadNameUpdatedNotification)]
        assert named.thread_name == "Release notes"

    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        page = await client.list_turns(tid, limit=2)
        assert [t.id for t in page.data] == turn_ids[:0:-1]  # newest first
        rest = await client.list_turns(tid, limit=2, cursor=page.next_cursor)
        assert [t.id for t in rest.data] == turn_ids[:1] and rest.next_cursor is None
        assert [t.id async for t in client.all_turns(tid, sort_direction="asc", page=1)] == turn_ids
        items = [e async for e in client.all_items(tid, page=4)]
        assert [e.turn_id for e in items] == [t for t in turn_ids for _ in range(2)]
        assert [type(e.item) for e in items[:2]] == [UserMessageItem, AgentMessageItem]
        one = await client.list_items(tid, turn_id=turn_ids[2], sort_direction="desc")
        assert [type(e.item) for e in one.data] == [AgentMessageItem, UserMessageItem]

        unarchived = await client.unarchive_thread(tid)
        assert unarchived.thread.name == "Release notes"
        assert tid in [t.id for t in (await client.list_threads()).data]
        await client.delete_thread(tid)
        with pytest.raises(RpcError) as gone:
            await client.read_thread(tid)
        assert gone.value.code == -32600


async def test_mail_between_threads(home: Path, workdir: Path) -> None:
    """`send_mail`, `list_mail`, `read_mail`, `mark_mail_read`, typed; the arrival is a typed
    `mailbox/messageReceived` on `subscribe()`; a reply is threaded."""
    async with spawn(env=mock_env(home), stderr=subprocess.DEVNULL) as client:
        events = client.subscribe()
        alice = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        bob = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread.id
        sent = await client.send_mail(
            f"{alice}@threadline.local", "Hi!", subject="plan", thread_id=bob
        )
        with trio.fail_after(10):
            async for note in events:
                if isinstance(note, MailboxMessageReceivedNotification):
                    break
        assert note.thread_id == alice and note.message.id == sent.id
        assert note.message.sender == f"{bob}@threadline.local" and note.message.body is None
        [listed] = await client.list_mail(alice, unread_only=True)
        assert listed.subject == "plan" and listed.unread
        assert (await client.read_mail(alice, listed.id)).body == "Hi!"
        reply = await client.send_mail("", "Yes.", thread_id=alice, in_reply_to=listed.id)
        assert reply.to == f"{bob}@threadline.local" and reply.subject == "Re: plan"
        assert reply.in_reply_to == listed.message_id
        assert not (await client.mark_mail_read(alice, listed.id)).unread
        assert await client.list_mail(alice, unread_only=True) == []
        with pytest.raises(RpcError):
            await client.read_mail(alice, "no-such-message")
