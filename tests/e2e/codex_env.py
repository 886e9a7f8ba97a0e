"""The real `codex` CLI through threadline, offline (tests/support/cli_env.py holds the rest).

The CLI talks to `tests.fakes.openai_responses.FakeResponses` through a custom model provider
written into a fresh CODEX_HOME (`codex_home`: no retries, no analytics, no plugin sync, bounded
connection retries), with a scratch HOME, so nothing of the developer's own Codex set-up is read
and nothing but 127.0.0.1 is contacted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.openai_responses import ENV_KEY, FakeResponses, codex_home
from tests.support.cli_env import CliEnv, child_pids, cli_fixtures, cmdline
from tests.support.client import ServerProcess

__all__ = ["CodexEnv", "codex_bin", "codex_env", "codex_pids"]


def codex_pids(srv: ServerProcess, subcommand: str) -> list[int]:
    """Pids of the `codex <subcommand>` processes threadline started itself (its direct
    children; the npm wrapper's native child is not counted)."""
    return child_pids(srv, lambda pid: subcommand in cmdline(pid)[1:3])


@dataclass(kw_only=True)
class CodexEnv(CliEnv[FakeResponses]):
    backend = "codex"
    fake_type = FakeResponses
    private = ("CODEX_", "OPENAI_")

    #: CODEX_HOME (config.toml for the fake, sessions, state DBs); HOME is a scratch dir
    codex_home: Path = field(init=False)

    def setup(self) -> None:
        self.codex_home = codex_home(self.tmp, self.fake.url)

    def cli_vars(self) -> dict[str, str]:
        return {"CODEX_HOME": str(self.codex_home), ENV_KEY: "fake-openai-key"}


codex_bin, codex_env = cli_fixtures(CodexEnv)
