"""Fixtures for driving the real `gemini` CLI through threadline, fully offline.

The CLI talks to `tests.fakes.gemini.FakeGemini` (GOOGLE_GEMINI_BASE_URL) with a fresh HOME per
test whose settings select API-key auth, turn telemetry off, allow one API attempt (no retry
backoff) and run shells without a PTY (so ACP tool updates carry the output); see
`tests.fakes.gemini.gemini_home`. `BACKEND_MODEL` names a
known model, so the CLI skips its router side call. The CLI is looked up in
`TOOLS_BIN` (what `scripts/install-clis` installs), then on PATH. Missing CLI: the
tests skip, except under CI (`CI` set), where they fail: CI must never go green by skipping the
real-CLI tests.

After each test the `gemini_env` fixture checks the orphan rule: no process started for the test
(found by a per-test marker variable in its environment, which threadline passes to gemini and
gemini to the commands it runs) may remain. It prints the timings a test recorded (`pytest -s`),
and threadline's stderr when DUMP_STDERR is set.
"""

from __future__ import annotations

import contextlib
import datetime as dt
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
from tests.fakes.gemini import MODEL, FakeGemini, Rule, StepLike, gemini_home
from tests.fakes.gemini import gemini_env as cli_environment
from tests.support.client import ServerProcess, descendants, running_server
from tests.support.tools import TOOLS_BIN

__all__ = [
    "MODEL",
    "GeminiEnv",
    "acp_pids",
    "find_gemini",
    "gemini_bin",
    "gemini_env",
    "headless_pids",
]

LOCAL_GEMINI = TOOLS_BIN / "gemini"
MARKER_VAR = "THREADLINE_GEMINI_E2E"


def find_gemini() -> Path | None:
    """The pinned CLI under the repo (scripts/install-clis), else `gemini` on PATH."""
    if LOCAL_GEMINI.is_file() and os.access(LOCAL_GEMINI, os.X_OK):
        return LOCAL_GEMINI
    found = shutil.which("gemini")
    return Path(found) if found else None


@pytest.fixture(scope="session")
def gemini_bin() -> Path:
    path = find_gemini()
    if path is None:
        message = (
            "the gemini CLI is not installed (run scripts/install-clis, or put gemini on PATH)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run the real-CLI tests", pytrace=False)
        pytest.skip(message)
    return path


# -- processes -----------------------------------------------------------------------------------


def _gemini_children(srv: ServerProcess, flag: str) -> list[int]:
    """Pids of the gemini processes threadline started itself (its direct children) whose
    argv has `flag`."""
    found = []
    for pid, info in sorted(descendants(srv.pid).items()):
        argv = cmdline(pid)
        if info.ppid == srv.pid and flag in argv and any("gemini" in a for a in argv[:2]):
            found.append(pid)
    return found


def acp_pids(srv: ServerProcess) -> list[int]:
    """The `gemini --acp` agent processes threadline runs."""
    return _gemini_children(srv, "--acp")


def headless_pids(srv: ServerProcess) -> list[int]:
    """The `gemini -p` (headless, one per turn) processes threadline runs."""
    return _gemini_children(srv, "-p")


# -- environment -----------------------------------------------------------------------------------


@dataclass
class GeminiEnv:
    gemini: Path
    fake: FakeGemini
    tmp: Path
    #: threadline's state directory (THREADLINE_HOME)
    home: Path
    #: the thread's working directory (its own Gemini project: sessions are bound to it)
    work: Path
    #: the CLI's HOME: .gemini/settings.json, sessions under .gemini/tmp/<project>/chats
    cli_home: Path
    timings: dict[str, float] = field(default_factory=dict)
    servers: list[running_server] = field(default_factory=list)

    @property
    def marker(self) -> str:
        return f"{MARKER_VAR}={self.tmp}"

    def env(self, **extra: str) -> dict[str, str]:
        env = cli_environment(self.cli_home, self.fake.url)
        path = os.environ.get("PATH", os.defpath)
        env.update(
            {
                "AGENT_BACKEND": "gemini",
                # As in CI (scripts/test): the pinned CLI's directory first on PATH.
                "PATH": os.pathsep.join([str(self.gemini.parent), path]),
                # A known model: no router side call (one API request per model round).
                "BACKEND_MODEL": MODEL,
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
        """Live processes started for this test (threadline, gemini, tool commands)."""
        return marked_pids(self.marker)

    def sleepers(self, seconds: int) -> list[int]:
        """Live `sleep <seconds>` processes of this test (however deep gemini ran them)."""
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

    # -- the CLI's session files

    def session_files(self, session_id: str) -> list[Path]:
        """Gemini's session files for `session_id`
        (``~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<uuid8>.jsonl``)."""
        chats = self.cli_home / ".gemini" / "tmp"
        return sorted(chats.glob(f"*/chats/session-*-{session_id[:8]}.jsonl"))

    def session_text(self, session_id: str) -> str:
        return "".join(p.read_text(errors="replace") for p in self.session_files(session_id))

    def age_session(self, session_id: str, minutes: int = 5) -> None:
        """Make the session look `minutes` older: its file names carry the minute it was
        created, and an ACP `session/load` within that same minute wipes it (reference §7.6),
        so threadline waits for the next minute. Renaming stands in for "resumed later"
        without the test sleeping a minute. The `startTime` inside is left alone."""
        files = self.session_files(session_id)
        assert files, f"no session file for {session_id}"
        for path in files:
            stamp = path.name[len("session-") : len("session-") + 16]
            when = dt.datetime.strptime(stamp, "%Y-%m-%dT%H-%M") - dt.timedelta(minutes=minutes)
            older = when.strftime("%Y-%m-%dT%H-%M")
            path.rename(path.with_name(path.name.replace(stamp, older, 1)))

    def thread_record(self, thread_id: str) -> dict[str, Any]:
        """threadline's stored record of a thread (backend session id, bootstrap flag)."""
        data = json.loads((self.home / "threads" / thread_id / "meta.json").read_text())
        assert isinstance(data, dict) and data["id"] == thread_id, data
        return data


def _scrub_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing from the developer's own Gemini/Google set-up may reach the CLI."""
    for key in list(os.environ):
        if key.startswith(("GEMINI_", "GOOGLE_")):
            monkeypatch.delenv(key, raising=False)
    for key in ("BACKEND_CLI_PATH", "BACKEND_MODEL", "ALLOWED_TOOLS", "BACKEND_MAX_TURNS"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
async def gemini_env(
    gemini_bin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[GeminiEnv]:
    _scrub_environment(monkeypatch)
    home, work = tmp_path / "threadline", tmp_path / "work"
    for d in (home, work):
        d.mkdir()
    with FakeGemini() as fake:
        env = GeminiEnv(
            gemini=gemini_bin,
            fake=fake,
            tmp=tmp_path,
            home=home,
            work=work,
            cli_home=gemini_home(tmp_path, fake.url, max_attempts=1, name="cli-home"),
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
