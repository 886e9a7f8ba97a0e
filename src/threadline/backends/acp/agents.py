"""ACP agents known to work through the generic `acp` backend, and how to start each: read by
its spec (what `initialize` and `doctor` say while no command is configured) and by the docs."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KNOWN_AGENTS", "KnownAgent"]


@dataclass(frozen=True)
class KnownAgent:
    name: str
    #: The command that starts it as an ACP agent (`config.command`, shell-quoted).
    command: str
    #: How to install it.
    install: str
    #: Whether the project's real-CLI tests drive it through the generic backend.
    tested: bool
    #: What else it needs (in `config.env` or the command), if anything.
    note: str = ""


KNOWN_AGENTS = (
    KnownAgent(
        "Gemini CLI",
        "gemini --acp",
        "npm install -g @google/gemini-cli",
        tested=True,
        note="`-m <model>` picks the model; `GEMINI_CLI_NO_RELAUNCH=1` in `config.env` keeps it"
        " one process. Its own backend (`gemini`) also works around a `session/load` of a"
        " session created in the same minute, which wipes the session.",
    ),
    KnownAgent(
        "OpenCode",
        "opencode acp",
        "npm install -g opencode-ai",
        tested=True,
        note="it runs every tool without asking unless told to: `OPENCODE_PERMISSION="
        '\'{"bash":"ask","edit":"ask"}\'` in `config.env`. Its own backend (`opencode`) also'
        " shows a command's real text from the start and reads provider errors' HTTP status.",
    ),
    KnownAgent(
        "Qwen Code",
        "qwen --acp --approval-mode default",
        "npm install -g @qwen-code/qwen-code",
        tested=True,
        note="it starts in mode `auto`, where a model call approves tools: `--approval-mode"
        " default` asks. Its own backend (`qwen`) also sets the mode from the approval policy,"
        " shows a command's real text from the start, reports token usage and says what a"
        " failed model API call means.",
    ),
    KnownAgent(
        "Goose",
        "goose acp",
        "see https://block.github.io/goose/docs/getting-started/installation",
        tested=False,
    ),
    KnownAgent(
        "Claude Code (ACP adapter)",
        "claude-agent-acp",
        "npm install -g @agentclientprotocol/claude-agent-acp",
        tested=False,
        note="needs `ANTHROPIC_API_KEY` (or a logged-in Claude Code)",
    ),
    KnownAgent(
        "Codex (ACP adapter)",
        "codex-acp",
        "npm install -g @agentclientprotocol/codex-acp",
        tested=False,
        note="needs `OPENAI_API_KEY` or `CODEX_API_KEY` (or a logged-in Codex)",
    ),
    KnownAgent(
        "VT Code",
        "vtcode acp",
        "see https://github.com/vinhnx/vtcode",
        tested=False,
    ),
)
