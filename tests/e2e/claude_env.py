"""Fixtures for driving the real `claude` CLI through threadline, fully offline.

The CLI talks to `tests.fakes.anthropic.FakeAnthropic` (ANTHROPIC_BASE_URL) with a fresh
HOME / CLAUDE_CONFIG_DIR per test, no retries and no non-essential traffic (`ClaudeEnv.env`).
The CLI is looked up in `TOOLS_BIN`
(what `scripts/install-clis` installs), then on PATH. Missing CLI: the tests skip, except under
CI (`CI` set), where they fail: CI must never go green by skipping the real-CLI tests.

After each test the `claude_env` fixture checks the orphan rule: no process started for the test
(found by the per-test CLAUDE_CONFIG_DIR in its environment) may remain. It prints the timings a
test recorded (`pytest -s`), and threadline's stderr when DUMP_STDERR is set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.fakes.anthropic import FakeAnthropic, Rule
from tests.support.client import (
    Message,
    ServerProcess,
    descendants,
    notifications,
    running_server,
)
from tests.support.tools import TOOLS_BIN

__all__ = [
    "ClaudeEnv",
    "agent_text",
    "answer_by_method",
    "claude_bin",
    "claude_env",
    "claude_pid",
    "cmdline",
    "find_claude",
    "items_completed",
    "items_started",
    "marked_pids",
    "requests_in",
    "wait_claude_pid",
]

LOCAL_CLAUDE = TOOLS_BIN / "claude"


def find_claude() -> Path | None:
    """The pinned CLI under the repo (scripts/install-clis), else `claude` on PATH."""
    if LOCAL_CLAUDE.is_file() and os.access(LOCAL_CLAUDE, os.X_OK):
        return LOCAL_CLAUDE
    found = shutil.which("claude")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def claude_bin() -> Path:
    path = find_claude()
    if path is None:
        message = (
            "the claude CLI is not installed (run scripts/install-clis, or put claude on PATH)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run the real-CLI tests", pytrace=False)
        pytest.skip(message)
    return path


# -- processes -----------------------------------------------------------------------------------


def _environ(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def _state(pid: int) -> str | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()[0].decode()


def marked_pids(marker: str) -> list[int]:
    """Live processes whose environment contains `marker` (a NAME=value pair)."""
    needle = b"\0" + marker.encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        if needle in b"\0" + _environ(pid) and _state(pid) not in (None, "Z", "X"):
            found.append(pid)
    return sorted(found)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def claude_pid(srv: ServerProcess) -> int | None:
    """The pid of the `claude` process threadline runs (a descendant of the server)."""
    for pid in sorted(descendants(srv.pid)):
        argv = cmdline(pid)
        if argv and "--output-format" in argv and "claude" in os.path.basename(argv[0]):
            return pid
    return None


async def wait_claude_pid(srv: ServerProcess, timeout: float = 15) -> int:
    with trio.fail_after(timeout):
        while (pid := claude_pid(srv)) is None:  # noqa: ASYNC110 - polling /proc
            await trio.sleep(0.05)
    return pid


# -- environment -----------------------------------------------------------------------------------


@dataclass
class ClaudeEnv:
    claude: Path
    fake: FakeAnthropic
    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path
    #: the thread's working directory: its own project root
    work: Path
    #: the CLI's HOME; its config dir (transcripts, sessions) is `config_dir`
    cli_home: Path
    config_dir: Path
    timings: dict[str, float] = field(default_factory=dict)
    servers: list[running_server] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return f"CLAUDE_CONFIG_DIR={self.config_dir}"

    def env(self, **extra: str) -> dict[str, str]:
        path = os.environ.get("PATH", os.defpath)
        env = {
            "AGENT_BACKEND": "claude",
            # As in CI (scripts/test): the pinned CLI's directory first on PATH, behind the
            # stubs that make `initialize` fast (see `_stub_other_clis`).
            "PATH": os.pathsep.join([str(self.tmp / "stub-bin"), str(self.claude.parent), path]),
            "ANTHROPIC_BASE_URL": self.fake.url,
            "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "HOME": str(self.cli_home),
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "LANG": "C.UTF-8",
        }
        env.update(extra)
        return env

    def server(self, nursery: trio.Nursery, **extra: str) -> running_server:
        server = running_server(nursery, self.home, self.env(**extra))
        self.servers.append(server)
        return server

    def script(self, *rules: Rule, default: Any = None) -> None:
        self.fake.set_script(*rules, default=default)

    def leftovers(self) -> list[int]:
        """Live processes started for this test (threadline, claude, tool commands)."""
        return marked_pids(self.marker)

    async def wait_transcript(self, needle: str, timeout: float = 10) -> None:
        """Wait until the CLI's session transcript (under CLAUDE_CONFIG_DIR) contains `needle`."""

        def written() -> bool:
            files = self.config_dir.glob("projects/*/*.jsonl")
            return any(needle in p.read_text(errors="replace") for p in files)

        with trio.fail_after(timeout):
            while not written():  # noqa: ASYNC110 - polling a file the CLI writes
                await trio.sleep(0.02)

    async def wait_no_leftovers(self, timeout: float = 5) -> list[int]:
        """Wait up to `timeout` s for every process of this test to end; return survivors."""
        with trio.move_on_after(timeout):
            while self.leftovers():  # noqa: ASYNC110 - polling /proc
                await trio.sleep(0.05)
        return self.leftovers()


def _scrub_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the developer's own Claude/Anthropic set-up may reach the CLI."""
    for key in list(os.environ):
        if key.startswith(("ANTHROPIC_", "CLAUDE_")) or key == "CLAUDECODE":
            monkeypatch.delenv(key, raising=False)
    for key in ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS"):
        monkeypatch.delenv(key, raising=False)


def _stub_other_clis(bin_dir: Path) -> None:
    """`initialize` runs `--version` of every agent CLI it finds on PATH, and waits for all of
    them: `gemini --version` alone takes ~3.5 s on a 2-core box (node start-up), paid on every
    server start. These tests are about claude only, so the other CLIs are shadowed by
    instant stubs (put first on PATH; claude itself is never stubbed)."""
    bin_dir.mkdir()
    for name in ("codex", "gemini", "opencode"):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho '{name} (stubbed by the claude e2e tests)'\n")
        stub.chmod(0o755)


def _own_project_root(work: Path) -> None:
    # The CLI takes the nearest parent with a `.git` as the project root (memory dir, trust
    # key; reference §6). Make the work dir its own root if anything above it is a checkout.
    if any((parent / ".git").exists() for parent in work.parents):
        subprocess.run(["git", "init", "-q", str(work)], check=True)


@pytest.fixture
async def claude_env(
    claude_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ClaudeEnv]:
    _scrub_environment(monkeypatch)
    home, work, cli_home = tmp_path / "threadline", tmp_path / "work", tmp_path / "cli-home"
    for d in (home, work, cli_home):
        d.mkdir()
    _own_project_root(work)
    _stub_other_clis(tmp_path / "stub-bin")
    with FakeAnthropic() as fake:
        env = ClaudeEnv(
            claude=claude_bin,
            fake=fake,
            tmp=tmp_path,
            home=home,
            work=work,
            cli_home=cli_home,
            config_dir=cli_home / ".claude",
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


# -- event helpers ---------------------------------------------------------------------------------


def items_started(events: list[Any], item_type: str | None = None) -> list[dict[str, Any]]:
    return [
        e["params"]["item"]
        for e in notifications(events, "item/started")
        if item_type is None or e["params"]["item"]["type"] == item_type
    ]


def items_completed(events: list[Any], item_type: str | None = None) -> list[dict[str, Any]]:
    return [
        e["params"]["item"]
        for e in notifications(events, "item/completed")
        if item_type is None or e["params"]["item"]["type"] == item_type
    ]


def agent_text(events: list[Any]) -> str:
    """What a client shows as the answer: the concatenated agentMessage deltas."""
    return "".join(e["params"]["delta"] for e in notifications(events, "item/agentMessage/delta"))


def requests_in(events: list[Any], method: str | None = None) -> list[Message]:
    """Server→client requests among `events`."""
    return [
        e
        for e in events
        if isinstance(e, dict)
        and "id" in e
        and "method" in e
        and (method is None or e["method"] == method)
    ]


def answer_by_method(answers: dict[str, Callable[[Message], Any]]) -> Callable[[Message], Any]:
    def on_request(message: Message) -> Any:
        handler = answers.get(message["method"])
        if handler is None:
            raise AssertionError(f"unexpected server request {message['method']}: {message}")
        return handler(message)

    return on_request
