"""What the qwen backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, acp_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="qwen",
    display_name="Qwen Code",
    capabilities={"acp": acp_capabilities("qwen --acp")},
    npm=NpmCli("qwen", "@qwen-code/qwen-code", "0.24.4"),
    login_fix=(
        "set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible provider), or "
        "configure `security.auth` in ~/.qwen/settings.json"
    ),
    credentials=(("OPENAI_API_KEY", "OPENAI_API_KEY set"),),
    # Qwen Code takes any OpenAI-compatible model name: no patterns.
    models=(
        (
            "default",
            "Qwen Code default",
            "The model qwen is configured with (OPENAI_MODEL or its settings); any other name is "
            "passed to qwen --model",
        ),
    ),
)
