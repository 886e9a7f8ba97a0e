"""What the codex backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ...protocol.methods import BackendCapabilities
from ..spec import BackendSpec

__all__ = ["SPEC"]

SPEC = BackendSpec(
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
