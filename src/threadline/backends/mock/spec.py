"""What the mock backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import OVERRIDE_FIELDS, BackendSpec, mode_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="mock",
    display_name="Mock (scripted, offline)",
    capabilities={
        "script": mode_capabilities(
            "in-process scripted agent (no CLI, no network); directives in the prompt",
            "bootstrap message echoed on the first turn",
            images=True,
            overrides=dict.fromkeys(OVERRIDE_FIELDS, "native"),
            output_schema=True,
            steer=True,
            fork=True,
            compact=True,
        )
    },
    models=(("mock-1", "Mock 1", "Scripted offline model for client development"),),
    efforts=(("medium", "The only effort"),),
    model_patterns=(r"mock-",),
)
