"""What each shipped backend is, without loading it: id, modes, capabilities per mode, the
CLI's name and how to tell whether credentials look configured.

This module costs no trio: `initialize` is answered from it before the engine is imported
(see `threadline.server.handshake`). The backend classes read their facts from here, so the
two cannot drift."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..protocol.methods import BackendCapabilities

__all__ = ["BackendCheck", "BackendSpec"]


@dataclass
class BackendCheck:
    """Result of `Backend.check()`: is the CLI usable here?"""

    available: bool
    path: str | None = None
    version: str | None = None
    message: str | None = None
    credentials: str | None = None
    #: The CLI is older than the oldest version the tests passed on (`message` says more).
    outdated: bool = False


@dataclass(frozen=True)
class BackendSpec:
    id: str
    display_name: str
    modes: tuple[str, ...]
    default_mode: str
    capabilities: Mapping[str, BackendCapabilities]
    #: The CLI's command name; None for a backend that runs in-process.
    cli: str | None = None
    #: (variable, hint) pairs: the first variable set gives the credentials hint.
    credentials: tuple[tuple[str, str], ...] = ()
    no_credentials: str = "none needed"
    #: The npm package that ships the CLI (None: not installed from npm).
    npm_package: str | None = None
    #: The CLI version the project's tests pin (`scripts/install-clis` installs it).
    pinned_version: str | None = None
    #: The oldest CLI version the tests have passed on; older installs are reported.
    oldest_tested: str | None = None
    #: What to do when the model API refuses the credentials (HTTP 401 / not logged in).
    login_fix: str | None = None
    #: Files a logged-in CLI keeps its credentials in (`~` and `$VAR` expanded; the first that
    #: exists counts).
    credential_files: tuple[str, ...] = ()

    @property
    def install_command(self) -> str | None:
        """The command that installs the pinned CLI, or None for an in-process backend."""
        if self.npm_package is None:
            return None
        pin = f"@{self.pinned_version}" if self.pinned_version else ""
        return f"npm install -g {self.npm_package}{pin}"

    def credentials_hint(self, env: Mapping[str, str]) -> str:
        """Whether credentials look configured: the first variable set in `env` (never its
        value), else a login file, else what to do."""
        hint = next((hint for var, hint in self.credentials if env.get(var)), None)
        if hint is not None:
            return hint
        for pattern in self.credential_files:
            path = _expand(pattern, env)
            if path is not None and os.path.isfile(path):
                return f"logged in ({pattern})"
        if self.login_fix is None:
            return self.no_credentials
        return f"none found: {self.login_fix}"


def _expand(pattern: str, env: Mapping[str, str]) -> str | None:
    """`pattern` with `~` and `$VAR` taken from `env`; None when a variable is unset."""
    missing = False

    def var(match: re.Match[str]) -> str:
        nonlocal missing
        value = env.get(match.group(1))
        missing = missing or not value
        return value or ""

    text = re.sub(r"\$([A-Z_][A-Z0-9_]*)", var, pattern)
    if missing:
        return None
    if text.startswith("~"):
        home = env.get("HOME")
        if not home:
            return None
        text = home + text[1:]
    return text


def _acp_capabilities(command: str) -> BackendCapabilities:
    """An ACP agent's mode: the same for every CLI that speaks ACP."""
    return BackendCapabilities(
        approvals=True,
        interrupt=True,
        resume=True,
        deltas=True,
        reasoning=True,
        images=False,
        invocation=(
            f"one `{command}` per working directory shared by its threads (ACP over stdio);"
            " resume with `session/load`"
        ),
        role_injection="bootstrap text block prepended to the first prompt",
    )


_CLAUDE_ROLE = "`--append-system-prompt` plus one bootstrap message on the first turn"

CLAUDE = BackendSpec(
    id="claude",
    display_name="Claude Code",
    modes=("stream", "print"),
    default_mode="stream",
    capabilities={
        "stream": BackendCapabilities(
            approvals=True,
            interrupt=True,
            resume=True,
            deltas=True,
            reasoning=True,
            images=False,
            invocation=(
                "one live `claude -p --input-format stream-json --output-format stream-json` "
                "per thread; approvals over its control protocol (`--permission-prompt-tool "
                "stdio`); resume with `--resume`"
            ),
            role_injection=_CLAUDE_ROLE,
        ),
        "print": BackendCapabilities(
            approvals=False,
            interrupt=False,
            resume=True,
            deltas=True,
            reasoning=True,
            images=False,
            invocation=(
                "`claude -p --output-format stream-json` spawned per turn, `--resume <session>` "
                "from the 2nd turn; tools limited by `--allowedTools`"
            ),
            role_injection=_CLAUDE_ROLE,
        ),
    },
    cli="claude",
    npm_package="@anthropic-ai/claude-code",
    pinned_version="2.1.332",
    oldest_tested="2.1.197",
    login_fix="set ANTHROPIC_API_KEY, or run `claude login`",
    credential_files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"),
    credentials=(
        ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY set"),
        ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN set"),
    ),
    no_credentials="no API key in the environment (a logged-in CLI may still work)",
)

CODEX = BackendSpec(
    id="codex",
    display_name="Codex",
    modes=("app-server", "exec"),
    default_mode="app-server",
    capabilities={
        "app-server": BackendCapabilities(
            approvals=True,
            interrupt=True,
            resume=True,
            deltas=True,
            reasoning=True,
            images=True,
            invocation=(
                "one `codex app-server` per thread (native binary), proxied 1:1; resume with "
                "`thread/resume`"
            ),
            role_injection="native: `developerInstructions` / `baseInstructions` on thread/start",
        ),
        "exec": BackendCapabilities(
            approvals=False,
            interrupt=False,
            resume=True,
            deltas=False,
            reasoning=True,
            images=False,
            invocation=(
                "`codex exec --json` spawned per turn (prompt on stdin), `codex exec resume "
                "<session>` from the 2nd turn"
            ),
            role_injection="native: `-c developer_instructions=…` / `-c instructions=…`",
        ),
    },
    cli="codex",
    npm_package="@openai/codex",
    pinned_version="0.169.0",
    oldest_tested="0.169.0",
    # Codex's own OpenAI provider reads only its login (auth.json), never OPENAI_API_KEY.
    login_fix="run `codex login` (or `printenv OPENAI_API_KEY | codex login --with-api-key`)",
    credential_files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"),
)

GEMINI = BackendSpec(
    id="gemini",
    display_name="Gemini CLI",
    modes=("acp", "headless"),
    default_mode="acp",
    capabilities={
        "acp": _acp_capabilities("gemini --acp"),
        "headless": BackendCapabilities(
            approvals=False,
            interrupt=False,
            resume=True,
            deltas=True,
            reasoning=False,
            images=False,
            invocation=(
                "`gemini -p -o stream-json` spawned per turn, `--resume <session>` from the 2nd "
                "turn"
            ),
            role_injection="bootstrap text prepended to the first prompt",
        ),
    },
    cli="gemini",
    npm_package="@google/gemini-cli",
    pinned_version="0.61.0",
    oldest_tested="0.61.0",
    login_fix="set GEMINI_API_KEY (or run `gemini` once to sign in with Google)",
    credential_files=("~/.gemini/oauth_creds.json",),
    credentials=(
        ("GEMINI_API_KEY", "GEMINI_API_KEY set"),
        ("GOOGLE_API_KEY", "GOOGLE_API_KEY set"),
    ),
    no_credentials="no GEMINI_API_KEY (a logged-in CLI may still work)",
)

OPENCODE = BackendSpec(
    id="opencode",
    display_name="OpenCode",
    modes=("acp", "run"),
    default_mode="acp",
    capabilities={
        "acp": _acp_capabilities("opencode acp"),
        "run": BackendCapabilities(
            approvals=False,
            interrupt=False,
            resume=True,
            deltas=False,
            reasoning=True,
            images=False,
            invocation=(
                "`opencode run --format json` spawned per turn, `--session <id>` from the 2nd turn"
            ),
            role_injection="bootstrap text prepended to the first prompt",
        ),
    },
    cli="opencode",
    npm_package="opencode-ai",
    pinned_version="1.18.33",
    oldest_tested="1.18.33",
    login_fix="run `opencode auth login` (or set the provider's API key, e.g. ANTHROPIC_API_KEY)",
    credential_files=("$XDG_DATA_HOME/opencode/auth.json", "~/.local/share/opencode/auth.json"),
    credentials=(("OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_CONTENT set"),),
    no_credentials="provider credentials come from opencode's own config (opencode auth)",
)

MOCK = BackendSpec(
    id="mock",
    display_name="Mock (scripted, offline)",
    modes=("script",),
    default_mode="script",
    capabilities={
        "script": BackendCapabilities(
            approvals=True,
            interrupt=True,
            resume=True,
            deltas=True,
            reasoning=True,
            invocation="in-process scripted agent (no CLI, no network); directives in the prompt",
            role_injection="bootstrap message echoed on the first turn",
        )
    },
)
