"""Fixtures for driving the real `codex` CLI through threadline, fully offline.

The CLI talks to `tests.fakes.openai_responses.FakeResponses` through a custom model provider
written into a fresh CODEX_HOME (`codex_home`: no retries, no analytics, no plugin sync, bounded
connection retries), with a scratch HOME, so nothing of the developer's own Codex set-up is read
and nothing but 127.0.0.1 is contacted. The CLI is looked up in `TOOLS_BIN`
(what `scripts/install-clis` installs), then on PATH. Missing CLI: the tests skip, except under
CI (`CI` set), where they fail: CI must never go green by skipping the real-CLI tests.

After each test the `codex_env` fixture checks the orphan rule: no process started for the test
(found by a per-test marker variable in its environment, which threadline passes to codex and
codex to the commands it runs) may remain. It prints the timings a test recorded (`pytest -s`),
and threadline's stderr when DUMP_STDERR is set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.fakes.openai_responses import ENV_KEY, FakeResponses, Rule, StepLike, codex_home
from tests.support.client import (
    Message,
    ServerProcess,
    descendants,
    notifications,
    running_server,
)
from tests.support.tools import TOOLS_BIN

__all__ = [
    "CodexEnv",
    "agent_text",
    "answer_by_method",
    "cmdline",
    "codex_bin",
    "codex_env",
    "find_codex",
    "items_completed",
    "items_started",
    "marked_pids",
    "requests_in",
    "sleep_pids",
]

LOCAL_CODEX = TOOLS_BIN / "codex"
MARKER_VAR = "THREADLINE_CODEX_E2E"


def find_codex() -> Path | None:
    """The pinned CLI under the repo (scripts/install-clis), else `codex` on PATH."""
    if LOCAL_CODEX.is_file() and os.access(LOCAL_CODEX, os.X_OK):
        return LOCAL_CODEX
    found = shutil.which("codex")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    path = find_codex()
    if path is None:
        message = "the codex CLI is not installed (run scripts/install-clis, or put codex on PATH)"
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


def codex_pids(srv: ServerProcess, subcommand: str) -> list[int]:
    """Pids of the `codex <subcommand>` processes threadline started itself (its direct
    children; the npm wrapper's native child is not counted)."""
    found = []
    for pid, info in sorted(descendants(srv.pid).items()):
        argv = cmdline(pid)
        if info.ppid == srv.pid and subcommand in argv[1:3]:
            found.append(pid)
    return found


def sleep_pids(marker: str, seconds: int) -> list[int]:
    """Live `sleep <seconds>` processes of this test (however deep codex ran them)."""
    return [p for p in marked_pids(marker) if cmdline(p)[:2] == ["sleep", str(seconds)]]


# -- environment -----------------------------------------------------------------------------------


@dataclass
class CodexEnv:
    codex: Path
    fake: FakeResponses
    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path
    #: the thread's working directory
    work: Path
    #: the CLI's HOME (scratch) and CODEX_HOME (config.toml for the fake, sessions, state DBs)
    cli_home: Path
    codex_home: Path
    timings: dict[str, float] = field(default_factory=dict)
    servers: list[running_server] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return f"{MARKER_VAR}={self.tmp}"

    def env(self, **extra: str) -> dict[str, str]:
        path = os.environ.get("PATH", os.defpath)
        env = {
            "AGENT_BACKEND": "codex",
            # As in CI (scripts/test): the pinned CLI's directory first on PATH, behind the
            # stubs that make `initialize` fast (see `_stub_other_clis`).
            "PATH": os.pathsep.join([str(self.tmp / "stub-bin"), str(self.codex.parent), path]),
            "CODEX_HOME": str(self.codex_home),
            ENV_KEY: "fake-openai-key",
            "HOME": str(self.cli_home),
            "LANG": "C.UTF-8",
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
        """Live processes started for this test (threadline, codex, tool commands)."""
        return marked_pids(self.marker)

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


def _scrub_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the developer's own Codex/OpenAI set-up may reach the CLI."""
    for key in list(os.environ):
        if key.startswith(("CODEX_", "OPENAI_")):
            monkeypatch.delenv(key, raising=False)
    for key in ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS"):
        monkeypatch.delenv(key, raising=False)


def _stub_other_clis(bin_dir: Path) -> None:
    """`initialize` runs `--version` of every agent CLI it finds on PATH and waits for all of
    them (`gemini --version` alone takes seconds on a 2-core box). These tests are about codex
    only, so the other CLIs are shadowed by instant stubs; codex itself is never stubbed."""
    bin_dir.mkdir()
    for name in ("claude", "gemini", "opencode"):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho '{name} (stubbed by the codex e2e tests)'\n")
        stub.chmod(0o755)


@pytest.fixture
async def codex_env(
    codex_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CodexEnv]:
    _scrub_environment(monkeypatch)
    home, work, cli_home = tmp_path / "threadline", tmp_path / "work", tmp_path / "cli-home"
    for d in (home, work, cli_home):
        d.mkdir()
    _stub_other_clis(tmp_path / "stub-bin")
    with FakeResponses() as fake:
        env = CodexEnv(
            codex=codex_bin,
            fake=fake,
            tmp=tmp_path,
            home=home,
            work=work,
            cli_home=cli_home,
            codex_home=codex_home(tmp_path, fake.url),
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
