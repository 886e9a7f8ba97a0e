"""What the claude backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ...protocol.methods import BackendCapabilities
from ..spec import BackendSpec

__all__ = ["SPEC"]

_ROLE = "`--append-system-prompt` plus one bootstrap message on the first turn"

SPEC = BackendSpec(
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
            role_injection=_ROLE,
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
            role_injection=_ROLE,
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
