"""What the opencode backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, acp_capabilities, per_turn_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="opencode",
    display_name="OpenCode",
    capabilities={
        "acp": acp_capabilities("opencode acp"),
        "run": per_turn_capabilities(
            ("`opencode run --format json` spawned per turn, `--session <id>` from the 2nd turn"),
            "bootstrap text prepended to the first prompt",
            deltas=False,
        ),
    },
    npm=NpmCli("opencode", "opencode-ai", "1.18.33"),
    login_fix="run `opencode auth login` (or set the provider's API key, e.g. ANTHROPIC_API_KEY)",
    credential_files=("$XDG_DATA_HOME/opencode/auth.json", "~/.local/share/opencode/auth.json"),
    credentials=(("OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_CONTENT set"),),
    no_credentials="provider credentials come from opencode's own config (opencode auth)",
    models=(("default", "OpenCode default", "The model configured for opencode (provider/model)"),),
)
