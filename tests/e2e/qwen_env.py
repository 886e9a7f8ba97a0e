"""Fixtures for driving the real `qwen` CLI (Qwen Code) through threadline, fully offline.

The CLI talks to `tests.fakes.openai_chat.FakeOpenAIChat` (OPENAI_BASE_URL, OPENAI_API_KEY,
OPENAI_MODEL) with a fresh HOME per test whose `~/.qwen/settings.json` (`qwen_settings`) turns
off what would call the model besides the conversation (follow-up suggestions, the memory
agents) or reach the network (usage statistics, telemetry, update checks), and runs shells
without a PTY. The CLI is looked up in `TOOLS_BIN` (what `scripts/install-clis` installs),
then on PATH. Missing CLI: the tests skip, except under CI (`CI` set), where they fail: CI must
never go green by skipping the real-CLI tests.

After each test the `qwen_env` fixture checks the orphan rule: no process started for the test
(found by a per-test marker variable in its environment, which threadline passes to qwen and
qwen to the commands it runs) may remain. It prints the timings a test recorded (`pytest -s`),
and threadline's stderr when DUMP_STDERR is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.claude_env import cmdline, marked_pids
from tests.fakes.openai_chat import API_KEY, MODEL, FakeOpenAIChat, Rule, StepLike, ToolCall
from tests.support.client import ServerProcess, descendants, running_server
from tests.support.tools import TOOLS_BIN

__all__ = [
    "QwenEnv",
    "acp_pids",
    "qwen_bin",
    "qwen_env",
    "qwen_settings",
    "shell_call",
    "write_file_call",
]

LOCAL_QWEN = TOOLS_BIN / "qwen"
MARKER_VAR = "THREADLINE_QWEN_E2E"
#: qwen refuses a bare `sleep N` (its sleep guard) unless a trailing comment says why.
SLEEP_NOTE = "# intentional-sleep: a threadline test"


def shell_call(command: str, description: str = "run it", *, id: str | None = None) -> ToolCall:
    """qwen's shell tool."""
    return ToolCall("run_shell_command", {"command": command, "description": description}, id)


def write_file_call(file_path: Path | str, content: str, *, id: str | None = None) -> ToolCall:
    """qwen's file-writing tool (the path must be absolute)."""
    return ToolCall("write_file", {"file_path": str(file_path), "content": content}, id)


def qwen_settings() -> dict[str, Any]:
    """`~/.qwen/settings.json` for the tests: API-key auth, and nothing that calls the model or
    the network besides the conversation."""
    off = False
    return {
        "security": {"auth": {"selectedType": "openai"}},
        "privacy": {"usageStatisticsEnabled": off},
        "telemetry": {"enabled": off},
        "general": {"enableAutoUpdate": off},
        "ui": {
            "enableFollowupSuggestions": off,  # an extra model call after every answer
            "enableUserFeedback": off,
            "enableWelcomeBack": off,
        },
        "ide": {"enabled": off},
        # The background memory agents send model requests of their own.
        "memory": {"enableManagedAutoMemory": off, "enableManagedAutoDream": off},
        # No PTY: the shell's output comes in the ACP tool updates.
        "tools": {"shell": {"enableInteractiveShell": off}},
        # One HTTP request per attempt of qwen's (the OpenAI client's own retries off); a
        # context window that takes the fault matrix's 1 MB prompt (the fake has no limit).
        "model": {"generationConfig": {"maxRetries": 0, "contextWindowSize": 2_000_000}},
    }


def find_qwen() -> Path | None:
    """The pinned CLI under the repo (scripts/install-clis), else `qwen` on PATH."""
    if LOCAL_QWEN.is_file() and os.access(LOCAL_QWEN, os.X_OK):
        return LOCAL_QWEN
    found = shutil.which("qwen")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def qwen_bin() -> Path:
    path = find_qwen()
    if path is None:
        message = "the qwen CLI is not installed (run scripts/install-clis, or put qwen on PATH)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run the real-CLI tests", pytrace=False)
        pytest.skip(message)
    return path


def acp_pids(srv: ServerProcess) -> list[int]:
    """The `qwen --acp` agent processes threadline started (its direct children)."""
    return [
        pid
        for pid, info in sorted(descendants(srv.pid).items())
        if info.ppid == srv.pid and "--acp" in cmdline(pid) and "qwen" in " ".join(cmdline(pid))
    ]


@dataclass
class QwenEnv:
    qwen: Path
    fake: FakeOpenAIChat
    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path
    #: the thread's working directory
    work: Path
    #: the CLI's HOME: .qwen/settings.json, sessions under .qwen/projects/<project>/chats
    cli_home: Path
    timings: dict[str, float] = field(default_factory=dict)
    servers: list[running_server] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return f"{MARKER_VAR}={self.tmp}"

    def env(self, **extra: str) -> dict[str, str]:
        path = os.environ.get("PATH", os.defpath)
        env = {
            "AGENT_BACKEND": "qwen",
            "HOME": str(self.cli_home),
            "LANG": "C.UTF-8",
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": self.fake.base_url,
            "OPENAI_MODEL": MODEL,
            # As in CI (scripts/test): the pinned CLI's directory first on PATH, behind the
            # stubs that make `initialize` fast (see `_stub_other_clis`).
            "PATH": os.pathsep.join([str(self.tmp / "stub-bin"), str(self.qwen.parent), path]),
            MARKER_VAR: str(self.tmp),
        }
        env.update(extra)
        return env

    def server(self, nursery: trio.Nursery, **extra: str) -> running_server:
        server = running_server(nursery, self.home, self.env(**extra))
        self.servers.append(server)
        return server

    def script(self, *rules: Rule, default: Rule | list[StepLike] | StepLike | None = None) -> None:
        self.fake.set_script(*rules, default=default)

    def leftovers(self) -> list[int]:
        """Live processes started for this test (threadline, qwen, tool commands)."""
        return marked_pids(self.marker)

    def sleepers(self, seconds: int) -> list[int]:
        """Live `sleep <seconds>` processes of this test (however deep qwen ran them)."""
        return [p for p in self.leftovers() if cmdline(p)[:2] == ["sleep", str(seconds)]]

    async def wait_until(self, pred: Callable[[], bool], what: str, timeout: float = 15) -> None:
        """Poll `pred` (a /proc or file check) until true; fail with `what` after `timeout` s."""
        with trio.move_on_after(timeout):
            while not pred():  # noqa: ASYNC110 - polling /proc or a file
                await trio.sleep(0.02)
            return
        raise AssertionError(f"not within {timeout} s: {what}")

    async def wait_no_leftovers(self, timeout: float = 5) -> list[int]:
        """Wait up to `timeout` s for every process of this test to end; return survivors."""
        with trio.move_on_after(timeout):
            while self.leftovers():  # noqa: ASYNC110 - polling /proc
                await trio.sleep(0.05)
        return self.leftovers()

    def thread_record(self, thread_id: str) -> dict[str, Any]:
        """threadline's stored record of a thread (backend session id, bootstrap flag)."""
        data = json.loads((self.home / "threads" / thread_id / "meta.json").read_text())
        assert isinstance(data, dict) and data["id"] == thread_id, data
        return data

    def session_files(self, session_id: str) -> list[Path]:
        """qwen's record of an ACP session (`~/.qwen/projects/<project>/chats/<id>.jsonl`)."""
        return sorted((self.cli_home / ".qwen" / "projects").glob(f"*/chats/{session_id}.jsonl"))


def _scrub_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the developer's own Qwen/OpenAI set-up may reach the CLI."""
    for key in list(os.environ):
        if key.startswith(("QWEN_", "OPENAI_", "DASHSCOPE_")):
            monkeypatch.delenv(key, raising=False)
    for key in ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS"):
        monkeypatch.delenv(key, raising=False)


def _stub_other_clis(bin_dir: Path) -> None:
    """`initialize` runs `--version` of every agent CLI it finds on PATH and waits for all of
    them (seconds of node start-up each on a 2-core box). These tests are about qwen only, so
    the other CLIs are shadowed by instant stubs; qwen is never stubbed."""
    bin_dir.mkdir()
    for name in ("claude", "codex", "gemini", "opencode"):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho '{name} (stubbed by the qwen e2e tests)'\n")
        stub.chmod(0o755)


@pytest.fixture
async def qwen_env(
    qwen_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[QwenEnv]:
    _scrub_environment(monkeypatch)
    home, work, cli_home = tmp_path / "threadline", tmp_path / "work", tmp_path / "cli-home"
    for d in (home, work, cli_home / ".qwen"):
        d.mkdir(parents=True)
    (cli_home / ".qwen" / "settings.json").write_text(json.dumps(qwen_settings(), indent=2))
    _stub_other_clis(tmp_path / "stub-bin")
    with FakeOpenAIChat() as fake:
        env = QwenEnv(
            qwen=qwen_bin, fake=fake, tmp=tmp_path, home=home, work=work, cli_home=cli_home
        )
        yield env
        # The orphan rule: every process started for this test is gone once threadline is.
        left = await env.wait_no_leftovers()
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"processes left behind: {[(p, cmdline(p)[:3]) for p in left]}"
        assert not fake.errors, fake.errors[0]
        for server in env.servers:
            if server.server is not None and os.environ.get("DUMP_STDERR"):
                print("---- threadline stderr\n" + server.server.stderr_text)
        if env.timings:
            print("timings:", {k: round(v, 2) for k, v in env.timings.items()})
