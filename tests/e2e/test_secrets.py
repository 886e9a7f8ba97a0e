"""API keys and tokens from the environment never appear in what threadline writes: protocol
messages, stderr, its log file (at DEBUG) or its state directory — with the real `claude` CLI
(which is given the key) and with the mock backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import Rule, ToolUse
from tests.support.client import accept, running_server

pytestmark = pytest.mark.e2e

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-SECRET-1111-never-log-me",
    "OPENAI_API_KEY": "sk-SECRET-2222-never-log-me",
    "GEMINI_API_KEY": "AIzaSECRET-3333-never-log-me",
    "GITHUB_TOKEN": "ghp_SECRET4444nevershow",
}


def leaks(*blobs: bytes | str) -> list[str]:
    found = []
    for blob in blobs:
        text = blob.decode(errors="replace") if isinstance(blob, bytes) else blob
        found += [name for name, value in SECRETS.items() if value in text]
    return found


def state_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


async def test_secrets_stay_out_of_messages_logs_and_state_with_claude(
    nursery: trio.Nursery, claude_env: ClaudeEnv, tmp_path: Path
) -> None:
    env = claude_env
    env.script(
        Rule("run it", [ToolUse("Bash", {"command": "echo hello", "description": "x"}), "Ran."]),
    )
    log_file = tmp_path / "threadline.log"
    extra = {
        **SECRETS,
        "THREADLINE_LOG_LEVEL": "DEBUG",
        "THREADLINE_LOG_FILE": str(log_file),
    }
    async with env.server(nursery, **extra) as srv:
        init = await srv.initialize()
        tid = await srv.start_thread(env.work, modelProvider="claude")
        done, _ = await srv.run_turn(tid, "run it", on_request=accept)
        assert done["params"]["turn"]["status"] == "completed"
        # The key did reach the CLI: the fake API saw it (so the test is not vacuous).
        assert env.fake.model_requests
    assert "credentials" in str(init)
    raw = b"\n".join(srv.raw_lines)
    assert "started pid" in log_file.read_text(), "DEBUG logging should show the CLI argv"
    files = state_files(env.home)
    assert files
    assert not leaks(raw, srv.stderr_text, log_file.read_bytes()), "a secret leaked"
    for path in files:
        assert not leaks(path.read_bytes()), f"a secret leaked into {path}"


async def test_secrets_stay_out_with_the_mock_backend_and_doctor(
    nursery: trio.Nursery, home: Path, workdir: Path, tmp_path: Path
) -> None:
    log_file = tmp_path / "threadline.log"
    extra = {**SECRETS, "THREADLINE_LOG_LEVEL": "DEBUG", "THREADLINE_LOG_FILE": str(log_file)}
    async with running_server(nursery, home, extra) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        done, _ = await srv.run_turn(tid, "/text hi\n/fail boom", on_request=accept)
        assert done["params"]["turn"]["status"] == "failed"
    assert not leaks(b"\n".join(srv.raw_lines), srv.stderr_text, log_file.read_bytes())
    for path in state_files(home):
        assert not leaks(path.read_bytes()), path
