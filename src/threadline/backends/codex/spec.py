"""What the codex backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities, per_turn_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="codex",
    display_name="Codex",
    capabilities={
        "app-server": mode_capabilities(
            (
                "one `codex app-server` per thread (native binary), proxied 1:1; resume with "
                "`thread/resume`"
            ),
            "native: `developerInstructions` / `baseInstructions` on thread/start",
            images=True,
        ),
        "exec": per_turn_capabilities(
            (
                "`codex exec --json` spawned per turn (prompt on stdin), `codex exec resume "
                "<session>` from the 2nd turn"
            ),
            "native: `-c developer_instructions=…` / `-c instructions=…`",
            deltas=False,
        ),
    },
    npm=NpmCli("codex", "@openai/codex", "0.169.0"),
    # Codex's own OpenAI provider reads only its login (auth.json), never OPENAI_API_KEY.
    login_fix="run `codex login` (or `printenv OPENAI_API_KEY | codex login --with-api-key`)",
    credential_files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"),
    model_patterns=(r"gpt-", r"o\d", r"codex-", r"chatgpt-"),
    models=(("default", "Codex default", "The model configured for the codex CLI"),),
    efforts=tuple((e, f"{e} effort") for e in ("low", "medium", "high")),
)
