"""The real `opencode` CLI through threadline, offline (tests/support/cli_env.py holds the rest).

The CLI talks to `tests.fakes.openai_chat.FakeOpenAIChat` through a custom provider injected
with OPENCODE_CONFIG_CONTENT (`tests.fakes.openai_chat.opencode_env`: fresh HOME and XDG dirs,
no models catalogue fetch, no update check, the plugin install pre-seeded), so nothing of the
developer's own OpenCode set-up is read, nothing is written into the project dir and nothing
but 127.0.0.1 is contacted. The marker variable reaches the bash tool's shells too (they run
in a session of their own).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tests.fakes.openai_chat import FakeOpenAIChat
from tests.fakes.openai_chat import opencode_env as cli_environment
from tests.support.cli_env import CliEnv, child_pids, cli_fixtures, cmdline
from tests.support.client import ServerProcess

__all__ = ["OpenCodeEnv", "opencode_bin", "opencode_env", "opencode_pids"]


def opencode_pids(srv: ServerProcess, subcommand: str) -> list[int]:
    """Pids of the `opencode <subcommand>` processes threadline started itself (its direct
    children): `acp` (one per cwd, shared by threads) or `run` (one per turn)."""

    def match(pid: int) -> bool:
        argv = cmdline(pid)
        return argv[1:2] == [subcommand] and os.path.basename(argv[0]).startswith("opencode")

    return child_pids(srv, match)


@dataclass(kw_only=True)
class OpenCodeEnv(CliEnv[FakeOpenAIChat]):
    backend = "opencode"
    fake_type = FakeOpenAIChat
    private = ("OPENCODE_",)

    #: the CLI's environment: HOME/XDG dirs in `cli_home` (sessions DB, logs, snapshots), the
    #: config
    cli_env: dict[str, str] = field(init=False)

    def setup(self) -> None:
        # No PWD here: threadline sets it to the thread's cwd for every opencode it starts.
        self.cli_env = cli_environment(self.tmp, self.fake.url, name=self.cli_home.name)

    def cli_vars(self) -> dict[str, str]:
        return dict(self.cli_env)

    def project_files(self) -> list[str]:
        """Every path under the project dir, relative (what the agent left there)."""
        return sorted(str(p.relative_to(self.work)) for p in self.work.rglob("*"))


opencode_bin, opencode_env = cli_fixtures(OpenCodeEnv)
