"""The real `claude` CLI through threadline, offline (tests/support/cli_env.py holds the rest).

The CLI talks to `tests.fakes.anthropic.FakeAnthropic` (ANTHROPIC_BASE_URL) with a fresh
HOME / CLAUDE_CONFIG_DIR per test, no retries and no non-essential traffic. Its processes are
found by that CLAUDE_CONFIG_DIR in their environment.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import trio

from tests.fakes.anthropic import FakeAnthropic
from tests.support.cli_env import CliEnv, cli_fixtures, cmdline
from tests.support.client import ServerProcess, descendants

__all__ = ["ClaudeEnv", "claude_bin", "claude_env", "claude_pid", "wait_claude_pid"]


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


@dataclass(kw_only=True)
class ClaudeEnv(CliEnv[FakeAnthropic]):
    backend = "claude"
    fake_type = FakeAnthropic
    private = ("ANTHROPIC_", "CLAUDE")

    #: the CLI's config dir (transcripts, sessions), in its HOME
    config_dir: Path = field(init=False)

    def setup(self) -> None:
        self.config_dir = self.cli_home / ".claude"
        # The CLI takes the nearest parent with a `.git` as the project root (memory dir,
        # trust key; reference §6): the work dir is a root of its own.
        if any((parent / ".git").exists() for parent in self.work.parents):
            subprocess.run(["git", "init", "-q", str(self.work)], check=True)

    @property
    def marker(self) -> str:
        return f"CLAUDE_CONFIG_DIR={self.config_dir}"

    def cli_vars(self) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": self.fake.url,
            "ANTHROPIC_API_KEY": "sk-ant-fake-key-for-tests",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
        }

    async def wait_transcript(self, needle: str, timeout: float = 10) -> None:
        """Wait until the CLI's session transcript (under CLAUDE_CONFIG_DIR) contains `needle`."""

        def written() -> bool:
            files = self.config_dir.glob("projects/*/*.jsonl")
            return any(needle in p.read_text(errors="replace") for p in files)

        await self.wait_until(written, f"{needle!r} in the transcript", timeout)


claude_bin, claude_env = cli_fixtures(ClaudeEnv)
