"""The real `gemini` CLI through threadline, offline (tests/support/cli_env.py holds the rest).

The CLI talks to `tests.fakes.gemini.FakeGemini` (GOOGLE_GEMINI_BASE_URL) with a fresh HOME per
test whose settings select API-key auth, turn telemetry off, allow one API attempt (no retry
backoff) and run shells without a PTY (so ACP tool updates carry the output); see
`tests.fakes.gemini.gemini_home`. `BACKEND_MODEL` names a known model, so the CLI skips its
router side call.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.gemini import MODEL, FakeGemini, gemini_home
from tests.fakes.gemini import gemini_env as cli_environment
from tests.support.cli_env import CliEnv, child_pids, cli_fixtures, cmdline
from tests.support.client import ServerProcess

__all__ = [
    "MODEL",
    "GeminiEnv",
    "acp_pids",
    "age_session",
    "gemini_bin",
    "gemini_env",
    "headless_pids",
    "session_files",
]


def _gemini_children(srv: ServerProcess, flag: str) -> list[int]:
    """Pids of the gemini processes threadline started itself (its direct children) whose
    argv has `flag`."""

    def match(pid: int) -> bool:
        argv = cmdline(pid)
        return flag in argv and any("gemini" in a for a in argv[:2])

    return child_pids(srv, match)


def acp_pids(srv: ServerProcess) -> list[int]:
    """The `gemini --acp` agent processes threadline runs."""
    return _gemini_children(srv, "--acp")


def headless_pids(srv: ServerProcess) -> list[int]:
    """The `gemini -p` (headless, one per turn) processes threadline runs."""
    return _gemini_children(srv, "-p")


def session_files(cli_home: Path, session_id: str) -> list[Path]:
    """Gemini's session files for `session_id` under the CLI's HOME
    (``~/.gemini/tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<uuid8>.jsonl``)."""
    chats = cli_home / ".gemini" / "tmp"
    return sorted(chats.glob(f"*/chats/session-*-{session_id[:8]}.jsonl"))


def age_session(cli_home: Path, session_id: str, minutes: int = 5) -> None:
    """Make the session look `minutes` older: its file names carry the minute it was
    created, and an ACP `session/load` within that same minute wipes it (reference §7.6),
    so threadline waits for the next minute. Renaming stands in for "resumed later"
    without the test sleeping a minute. The `startTime` inside is left alone."""
    files = session_files(cli_home, session_id)
    assert files, f"no session file for {session_id}"
    for path in files:
        stamp = path.name[len("session-") : len("session-") + 16]
        when = dt.datetime.strptime(stamp, "%Y-%m-%dT%H-%M") - dt.timedelta(minutes=minutes)
        older = when.strftime("%Y-%m-%dT%H-%M")
        path.rename(path.with_name(path.name.replace(stamp, older, 1)))


@dataclass(kw_only=True)
class GeminiEnv(CliEnv[FakeGemini]):
    backend = "gemini"
    fake_type = FakeGemini
    private = ("GEMINI_", "GOOGLE_")

    def setup(self) -> None:
        # HOME: .gemini/settings.json, sessions under .gemini/tmp/<project>/chats
        gemini_home(self.tmp, self.fake.url, max_attempts=1, name=self.cli_home.name)

    def cli_vars(self) -> dict[str, str]:
        # A known model: no router side call (one API request per model round).
        return {**cli_environment(self.cli_home, self.fake.url), "BACKEND_MODEL": MODEL}

    def session_files(self, session_id: str) -> list[Path]:
        return session_files(self.cli_home, session_id)

    def session_text(self, session_id: str) -> str:
        return "".join(p.read_text(errors="replace") for p in self.session_files(session_id))

    def age_session(self, session_id: str, minutes: int = 5) -> None:
        age_session(self.cli_home, session_id, minutes)


gemini_bin, gemini_env = cli_fixtures(GeminiEnv)
