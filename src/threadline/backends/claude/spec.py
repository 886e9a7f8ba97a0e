"""What the claude backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities, per_turn_capabilities

__all__ = ["SPEC"]

_EFFORTS = tuple((e, f"{e} effort") for e in ("low", "medium", "high"))
_ROLE = "`--append-system-prompt` plus one bootstrap message on the first turn"

SPEC = BackendSpec(
    id="claude",
    display_name="Claude Code",
    capabilities={
        "stream": mode_capabilities(
            (
                "one live `claude -p --input-format stream-json --output-format stream-json` "
                "per thread; approvals over its control protocol (`--permission-prompt-tool "
                "stdio`); resume with `--resume`"
            ),
            _ROLE,
        ),
        "print": per_turn_capabilities(
            (
                "`claude -p --output-format stream-json` spawned per turn, `--resume <session>` "
                "from the 2nd turn; tools limited by `--allowedTools`"
            ),
            _ROLE,
        ),
    },
    npm=NpmCli("claude", "@anthropic-ai/claude-code", "2.1.332", oldest_tested="2.1.197"),
    login_fix="set ANTHROPIC_API_KEY, or run `claude login`",
    credential_files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"),
    credentials=(
        ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY set"),
        ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN set"),
    ),
    no_credentials="no API key in the environment (a logged-in CLI may still work)",
    model_patterns=(
        r"claude",
        r"anthropic\.",
        r"(us|eu|apac|global)\.anthropic\.",
        r"(sonnet|opus|haiku|opusplan)\b",
    ),
    models=(
        ("default", "Claude Code default", "The CLI's configured default model"),
        ("opus", "Claude Opus", "Alias resolved by the claude CLI"),
        ("sonnet", "Claude Sonnet", "Alias resolved by the claude CLI"),
        ("haiku", "Claude Haiku", "Alias resolved by the claude CLI"),
    ),
    efforts=_EFFORTS,
    default_effort="high",
)
