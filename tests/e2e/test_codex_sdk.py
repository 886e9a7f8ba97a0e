"""Third-party Codex app-server clients, unmodified, against `threadline` with the mock backend.

Both SDKs are installed from PyPI at pinned versions (the `test` extra in pyproject.toml) and
start their "codex" themselves; each is pointed at threadline instead of `codex app-server`:

- `codex-python-sdk` 0.2.1 (`codex_python_sdk`): runs `<command> app-server -c …`; the command
  is the `threadline` executable. Plain dicts on the wire, approvals by callbacks.
- `codex-python-sdk-unofficial` 0.128.0 (`codex_agent_sdk`): pydantic models generated from
  Codex's stable schema, so every response it receives is type-checked by a third party. It
  always runs `<codex_bin> app-server --listen stdio://`: `codex_bin` is the `threadline`
  executable, whose `app-server` subcommand takes `codex app-server`'s arguments.

Both are asyncio libraries: each test is a plain function that runs one `asyncio.run`. What
these SDKs do differently from Codex 0.169.0 itself is in docs/codex-conformance.md.

The SDKs start threadline themselves, so their traffic is not seen by the Codex schema check of
`ServerProcess`; the last test makes the mock write, through `running_server`, the Codex-shaped
messages such clients read that no other e2e test produces (model/list, plan updates, a
non-command tool call, streamed reasoning), so those are checked against Codex's schema too.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import running_server

#: The installed `threadline` executable (the venv's, beside this interpreter).
THREADLINE = Path(sys.executable).with_name("threadline")


def _sdk(module: str) -> Any:
    """Import an SDK; missing: skip, except under CI (the `test` extra installs it)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        message = f"{module} is not installed ({exc}): pip install -e '.[test]'"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AGENT_BACKEND": "mock",
        "THREADLINE_HOME": str(home),
        "THREADLINE_LOG_LEVEL": "WARNING",
    }


# -- codex-python-sdk ----------------------------------------------------------------------------


def test_codex_python_sdk_turns_and_approvals(home: Path, workdir: Path) -> None:
    sdk = _sdk("codex_python_sdk")
    asked: list[tuple[str, dict[str, Any]]] = []
    decisions = {"command": "accept", "file": "accept"}

    def on_command(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("command", params))
        return {"decision": decisions["command"]}

    def on_file_change(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("file", params))
        return {"decision": decisions["file"]}

    def on_user_input(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(("input", params))
        question = params["questions"][0]["id"]
        return {"answers": {question: {"answers": ["Ada"]}}}

    async def scenario() -> None:
        client = sdk.AsyncCodexAgenticClient(
            # `threadline app-server` stands in for `codex app-server`, Codex's flags and all
            # (here `-c web_search="live"`, which threadline ignores).
            codex_command=str(THREADLINE),
            env=_env(home),
            process_cwd=str(workdir),
            # Codex's guardian sub-agent reviews approvals itself: not what this test is about.
            automatic_approval_review=False,
            default_thread_params={"cwd": str(workdir)},
            stream_idle_timeout_seconds=30,
            on_command_approval=on_command,
            on_file_change_approval=on_file_change,
            on_tool_request_user_input=on_user_input,
        )
        async with client:
            # initialize + a thread + a turn; the answer aggregated from the stream
            first = await client.responses_create(
                prompt="/text Hello from the mock", include_events=True
            )
            assert first.text == "Hello from the mock"
            thread_id = first.thread_id
            kinds = [e.type for e in first.events]
            assert kinds.index("turn/started") < kinds.index("item/agentMessage/delta")
            assert kinds[-1] == "turn/completed"

            # the streamed text, delta by delta, on the same thread (thread/resume)
            chunks = [
                chunk
                async for chunk in client.responses_stream_text(
                    prompt="/text streamed word by word", thread_id=thread_id
                )
            ]
            assert chunks == ["streamed ", "word ", "by ", "word"]

            # approvals, accepted: the command runs, the file is written
            done = await client.responses_create(
                prompt="/run echo approved > ran.txt\n/write notes.txt written\n/text ok",
                thread_id=thread_id,
                include_events=True,
            )
            assert done.text == "ok"
            assert (workdir / "ran.txt").read_text() == "approved\n"
            assert (workdir / "notes.txt").read_text().startswith("written")
            command = next(p for kind, p in asked if kind == "command")
            assert command["command"] == "echo approved > ran.txt"
            assert command["threadId"] == thread_id
            assert any(kind == "file" for kind, _ in asked)

            # declined: the command does not run and its item says so
            decisions["command"] = "decline"
            declined = await client.responses_create(
                prompt="/run echo nope > nope.txt\n/text after",
                thread_id=thread_id,
                include_events=True,
            )
            assert not (workdir / "nope.txt").exists()
            statuses = [
                e.raw["params"]["item"].get("status")
                for e in declined.events
                if e.type == "item/completed"
                and e.raw["params"]["item"]["type"] == "commandExecution"
            ]
            assert statuses == ["declined"]

            # a question for the user (item/tool/requestUserInput)
            answered = await client.responses_create(
                prompt="/ask What is your name?", thread_id=thread_id
            )
            question = next(p for kind, p in asked if kind == "input")
            assert question["questions"][0]["question"] == "What is your name?"
            assert answered.text == "answer: Ada"  # the mock repeats the answer it got

            thread = await client.thread_read(thread_id)
            assert thread["id"] == thread_id
            assert thread_id in [t["id"] for t in await client.thread_list()]

    asyncio.run(asyncio.wait_for(scenario(), 60))


# -- codex-python-sdk-unofficial -----------------------------------------------------------------


def test_codex_agent_sdk_typed_turns_and_file_approval(
    home: Path, workdir: Path, tmp_path: Path
) -> None:
    sdk = _sdk("codex_agent_sdk")
    from codex_agent_sdk.events import AgentTextDeltaEvent, TurnCompletedEvent

    approvals: list[Any] = []

    async def approve(request: Any) -> Any:
        approvals.append(request)
        return sdk.ApprovalDecision.accept()

    async def run_turn(client: Any, prompt: str) -> tuple[str, Any]:
        turn = await client.query(prompt)
        text = []
        async for event in turn:
            if isinstance(event, AgentTextDeltaEvent):
                text.append(event.text_delta)
            if isinstance(event, TurnCompletedEvent):
                break
        return "".join(text), await turn.wait()

    async def scenario() -> None:
        config = sdk.AppServerConfig(
            codex_bin=str(THREADLINE),  # runs `<codex_bin> app-server --listen stdio://`
            env=_env(home),
            cwd=str(workdir),
            client_name="threadline-tests",
        )
        options = sdk.CodexOptions(cwd=str(workdir), approval_policy="on-request")
        async with sdk.CodexSDKClient(
            options=options, app_server=config, approval_handler=approve
        ) as client:
            # thread/start and turn/start answers are parsed into the SDK's pydantic models
            thread_id = await client.start_thread()
            text, result = await run_turn(client, "/text Hello from the mock")
            assert text == "Hello from the mock"
            assert result.status == "completed"
            assert result.assistant_text == "Hello from the mock"

            # a file-change approval round trip through the SDK's typed ApprovalRequest
            text, result = await run_turn(client, "/write typed.txt from the sdk\n/text written")
            assert result.status == "completed", result
            assert text == "written"
            assert (workdir / "typed.txt").read_text().startswith("from the sdk")
            assert [type(a).__name__ for a in approvals] == ["FileChangeApprovalRequest"]
            assert approvals[0].thread_id == thread_id

        # a new process, the SDK's low-level client: the thread is still there
        async with sdk.AppServerClient(config) as low:
            await low.initialize()
            # include_turns explicitly: the SDK would send `null`, which Codex 0.169.0 rejects
            read = await low.thread_read(thread_id=thread_id, include_turns=False)
            assert read.thread.id == thread_id
            listed = await low.thread_list()
            assert thread_id in [t.id for t in listed.data]

    asyncio.run(asyncio.wait_for(scenario(), 60))


# -- what such clients read, checked against Codex's schema --------------------------------------


async def test_codex_shapes_no_other_e2e_test_produces(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        models = await srv.call("model/list", {})
        assert any(m["model"] for m in models["data"])
        thread_id = await srv.start_thread(workdir)
        done, events = await srv.run_turn(
            thread_id,
            '/reason weighing it\n/plan Read | Edit | Test\n/tool fetch {"url": "x"}\n/text ok',
            on_request=lambda _request: {"decision": "accept"},
        )
        assert done["params"]["turn"]["status"] == "completed"
        methods = [e.get("method") for e in events if isinstance(e, dict)]
        assert "turn/plan/updated" in methods
        assert "item/reasoning/summaryTextDelta" in methods
        tool = [
            e["params"]["item"]
            for e in events
            if e.get("method") == "item/completed"
            and e["params"]["item"]["type"] == "dynamicToolCall"
        ]
        assert tool and tool[0]["status"] == "completed"
        read = await srv.call("thread/read", {"threadId": thread_id, "includeTurns": True})
        assert read["thread"]["turns"]
