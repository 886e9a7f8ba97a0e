"""The real `qwen` CLI (Qwen Code) through threadline, offline (tests/support/cli_env.py holds
the rest).

The CLI talks to `tests.fakes.openai_chat.FakeOpenAIChat` (OPENAI_BASE_URL, OPENAI_API_KEY,
OPENAI_MODEL) with a fresh HOME per test whose `~/.qwen/settings.json` (`qwen_settings`) turns
off what would call the model besides the conversation (follow-up suggestions, the memory
agents) or reach the network (usage statistics, telemetry, update checks), and runs shells
without a PTY.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fakes.openai_chat import API_KEY, MODEL, FakeOpenAIChat, ToolCall
from tests.support.cli_env import CliEnv, child_pids, cli_fixtures, cmdline
from tests.support.client import ServerProcess

__all__ = [
    "PRINTING_COMMAND",
    "SLEEP_NOTE",
    "QwenEnv",
    "acp_pids",
    "qwen_bin",
    "qwen_env",
    "qwen_settings",
    "shell_call",
    "write_file_call",
]

#: qwen refuses a bare `sleep N` (its sleep guard) unless a trailing comment says why.
SLEEP_NOTE = "# intentional-sleep: a threadline test"

#: A command that prints `made-it` and creates `accepted.txt`. It prints well before it exits:
#: qwen 0.24.4's non-PTY shell settles on the child's `exit` event, which can come before the
#: last `data` event of a command that prints and exits at once, and then reports (to the model
#: too) `Output: (empty)`.
PRINTING_COMMAND = f"echo made-it && sleep 0.3 && touch accepted.txt {SLEEP_NOTE}"


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
        # context window that takes the fault matrix's 1 MB prompt (the fake has no limit);
        # image input (qwen guesses it from the model's name, and the fake's says nothing).
        "model": {
            "generationConfig": {
                "maxRetries": 0,
                "contextWindowSize": 2_000_000,
                "modalities": {"image": True},
            }
        },
    }


def acp_pids(srv: ServerProcess) -> list[int]:
    """The `qwen --acp` agent processes threadline started (its direct children)."""

    def match(pid: int) -> bool:
        argv = cmdline(pid)
        return "--acp" in argv and "qwen" in " ".join(argv)

    return child_pids(srv, match)


@dataclass(kw_only=True)
class QwenEnv(CliEnv[FakeOpenAIChat]):
    backend = "qwen"
    fake_type = FakeOpenAIChat
    private = ("QWEN_", "OPENAI_", "DASHSCOPE_")

    def setup(self) -> None:
        # HOME: .qwen/settings.json, sessions under .qwen/projects/<project>/chats
        settings = self.cli_home / ".qwen" / "settings.json"
        settings.parent.mkdir()
        settings.write_text(json.dumps(qwen_settings(), indent=2))

    def cli_vars(self) -> dict[str, str]:
        return {
            "OPENAI_API_KEY": API_KEY,
            "OPENAI_BASE_URL": self.fake.base_url,
            "OPENAI_MODEL": MODEL,
        }

    def session_files(self, session_id: str) -> list[Path]:
        """qwen's record of an ACP session (`~/.qwen/projects/<project>/chats/<id>.jsonl`)."""
        return sorted((self.cli_home / ".qwen" / "projects").glob(f"*/chats/{session_id}.jsonl"))


qwen_bin, qwen_env = cli_fixtures(QwenEnv)
