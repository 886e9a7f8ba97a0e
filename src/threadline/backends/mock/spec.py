"""What the mock backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ...protocol.methods import BackendCapabilities
from ..spec import BackendSpec

__all__ = ["SPEC"]

SPEC = BackendSpec(
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
