"""Fixtures for driving the real `opencode` CLI through threadline, fully offline.

The CLI talks to `tests.fakes.openai_chat.FakeOpenAIChat` through a custom provider injected
with OPENCODE_CONFIG_CONTENT (`tests.fakes.openai_chat.opencode_env`: fresh HOME and XDG dirs,
no models catalogue fetch, no update check, the plugin install pre-seeded), so nothing of the
developer's own OpenCode set-up is read, nothing is written into the project dir and nothing
but 127.0.0.1 is contacted. The CLI is looked up in `TOOLS_BIN` (what
`scripts/install-clis` installs), then on PATH. Missing CLI: the tests skip, except under CI
(`CI` set), where they fail: CI must never go green by skipping the real-CLI tests.

After each test the `opencode_env` fixture checks the orphan rule: no process started for the
test (found by a per-test marker variable in its environment, which threadline passes to
opencode and opencode to the commands it runs — also to the bash tool's shells, which run in
their own session) may remain. It prints the timings a test recorded (`pytest -s`), and
threadline's stderr when DUMP_STDERR is set.
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
from tests.fakes.openai_chat import FakeOpenAIChat, Rule, StepLike
from tests.fakes.openai_chat import opencode_env as cli_environment
from tests.support.client import ServerProcess, descendants, running_server
from tests.support.tools import TOOLS_BIN

__all__ = [
    "OpenCodeEnv",
    "find_opencode",
    "opencode_bin",
    "opencode_env",
    "opencode_pids",
]

LOCAL_OPENCODE = TOOLS_BIN / "opencode"
MARKER_VAR = "THREADLINE_OPENCODE_E2E"


def find_opencode() -> Path | None:
    """The pinned CLI under the repo (scripts/install-clis), else `opencode` on PATH."""
    if LOCAL_OPENCODE.is_file() and os.access(LOCAL_OPENCODE, os.X_OK):
        return LOCAL_OPENCODE
    found = shutil.which("opencode")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    path = find_opencode()
    if path is None:
        message = (
            "the opencode CLI is not installed (run scripts/install-clis, or put opencode on PATH)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run the real-CLI tests", pytrace=False)
        pytest.skip(message)
    return path


# -- processes -----------------------------------------------------------------------------------


def opencode_pids(srv: ServerProcess, subcommand: str) -> list[int]:
    """Pids of the `opencode <subcommand>` processes threadline started itself (its direct
    children): `acp` (one per cwd, shared by threads) or `run` (one per turn)."""
    found = []
    for pid, info in sorted(descendants(srv.pid).items()):
        argv = cmdline(pid)
        if (
            info.ppid == srv.pid
            and argv[1:2] == [subcommand]
            and os.path.basename(argv[0]).startswith("opencode")
        ):
            found.append(pid)
    return found


# -- environment -----------------------------------------------------------------------------------


@dataclass
class OpenCodeEnv:
    opencode: Path
    fake: FakeOpenAIChat
    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path
    #: the thread's working directory (the project; the tests check what lands in it)
    work: Path
    #: the CLI's environment: scratch HOME/XDG dirs (sessions DB, logs, snapshots), the config
    cli_env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)
    servers: list[running_server] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return f"{MARKER_VAR}={self.tmp}"

    def env(self, **extra: str) -> dict[str, str]:
        path = os.environ.get("PATH", os.defpath)
        env = dict(self.cli_env)
        env.update(
            {
                "AGENT_BACKEND": "opencode",
                # As in CI (scripts/test): the pinned CLI's directory first on PATH, behind the
                # stubs that make `initialize` fast (see `_stub_other_clis`).
                "PATH": os.pathsep.join(
                    [str(self.tmp / "stub-bin"), str(self.opencode.parent), path]
                ),
                MARKER_VAR: str(self.tmp),
            }
        )
        env.update(extra)
        return env

    def server(self, nursery: trio.Nursery, **extra: str) -> running_server:
        server = running_server(nursery, self.home, self.env(**extra))
        self.servers.append(server)
        return server

    def script(self, *rules: Rule, default: Rule | list[StepLike] | StepLike | None = None) -> None:
        self.fake.set_script(*rules, default=default)

    def leftovers(self) -> list[int]:
        """Live processes started for this test (threadline, opencode, tool commands)."""
        return marked_pids(self.marker)

    def sleepers(self, seconds: int) -> list[int]:
        """Live `sleep <seconds>` processes of this test (however deep opencode ran them)."""
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

    def project_files(self) -> list[str]:
        """Every path under the project dir, relative (what the agent left there)."""
        return sorted(str(p.relative_to(self.work)) for p in self.work.rglob("*"))


def _scrub_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the developer's own OpenCode set-up may reach the CLI."""
    for key in list(os.environ):
        if key.startswith("OPENCODE_"):
            monkeypatch.delenv(key, raising=False)
    for key in ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS"):
        monkeypatch.delenv(key, raising=False)


def _stub_other_clis(bin_dir: Path) -> None:
    """`initialize` runs `--version` of every agent CLI it finds on PATH and waits for all of
    them (`gemini --version` alone takes seconds on a 2-core box). These tests are about
    opencode only, so the other CLIs are shadowed by instant stubs; opencode is never stubbed."""
    bin_dir.mkdir()
    for name in ("claude", "gemini", "codex"):
        stub = bin_dir / name
        stub.write_text(f"#!/bin/sh\necho '{name} (stubbed by the opencode e2e tests)'\n")
        stub.chmod(0o755)


@pytest.fixture
async def opencode_env(
    opencode_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[OpenCodeEnv]:
    _scrub_environment(monkeypatch)
    home, work = tmp_path / "threadline", tmp_path / "work"
    for d in (home, work):
        d.mkdir()
    _stub_other_clis(tmp_path / "stub-bin")
    with FakeOpenAIChat() as fake:
        env = OpenCodeEnv(
            opencode=opencode_bin,
            fake=fake,
            tmp=tmp_path,
            home=home,
            work=work,
            # No PWD here: threadline sets it to the thread's cwd for every opencode it starts.
            cli_env=cli_environment(tmp_path, fake.url, name="cli"),
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
