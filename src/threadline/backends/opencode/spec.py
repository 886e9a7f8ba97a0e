"""What the opencode backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="opencode",
    display_name="OpenCode",
    capabilities={
        "acp": mode_capabilities(
            "one `opencode acp` per working directory and permission set shared by its threads"
            " (ACP over stdio); resume with `session/load`",
            "bootstrap text block prepended to the first prompt",
            # (ACP `image` blocks; the model must take images: its `modalities` in OpenCode's
            # config, else OpenCode tells the model it cannot read them.)
            images=True,
            image_urls=False,  # (an ACP image block carries the data: no http(s) URL)
            # model and effort: the session's `model` and `effort` config options (effort when
            # the model has variants); approvalPolicy: OPENCODE_PERMISSION of a new agent.
            overrides={"model": "native", "effort": "native", "approvalPolicy": "restart"},
            fork=True,  # session/fork
            compact=True,  # `/compact` (OpenCode's session summary)
        ),
        "run": mode_capabilities(
            ("`opencode run --format json` spawned per turn, `--session <id>` from the 2nd turn"),
            "bootstrap text prepended to the first prompt",
            # Per turn: approvals by policy only, a turn is stopped by killing the process.
            approvals=False,
            interrupt=False,
            deltas=False,
            images=True,  # `--file` (a data: URL image through a temporary file)
            image_urls=False,  # (files only: no http(s) URL)
            # model `--model`, effort `--variant` (OpenCode ignores a variant the model lacks).
            overrides={"model": "native", "effort": "native"},
            fork=True,  # `--session <source> --fork` on the fork's first turn
        ),
    },
    npm=NpmCli("opencode", "opencode-ai", "1.18.33"),
    login_fix="run `opencode auth login` (or set the provider's API key, e.g. ANTHROPIC_API_KEY)",
    credential_files=("$XDG_DATA_HOME/opencode/auth.json", "~/.local/share/opencode/auth.json"),
    credentials=(("OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_CONTENT set"),),
    no_credentials="provider credentials come from opencode's own config (opencode auth)",
    models=(("default", "OpenCode default", "The model configured for opencode (provider/model)"),),
)
