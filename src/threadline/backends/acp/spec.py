"""What the generic acp backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, mode_capabilities
from .agents import KNOWN_AGENTS

__all__ = ["SPEC"]

_TESTED = ", ".join(f"`{agent.command}`" for agent in KNOWN_AGENTS if agent.tested)

# An ACP agent's mode, where what the agent offers decides on resume and images.
_MODE = mode_capabilities(
    "the configured command (`config.command`, else `BACKEND_CLI_PATH` with"
    " `BACKEND_CLI_ARGS`), one process per command, `config.env` and working directory,"
    " shared by its threads (ACP over stdio); resume with `session/load` and images only"
    " when the agent offers them",
    "bootstrap text block prepended to the first prompt",
    images=True,
    image_urls=False,  # (an ACP image block carries the data: no http(s) URL)
    # The model is the agent's own (its command chooses it); approvals go through
    # session/request_permission whatever the policy.
    overrides={"model": "unsupported"},
)

SPEC = BackendSpec(
    id="acp",
    display_name="ACP agent",
    capabilities={"acp": _MODE},
    command_setup=(
        "available: configure a command: thread/start `config.command` (the agent and its"
        ' arguments, e.g. ["gemini", "--acp"]), or AGENT_BACKEND=acp with BACKEND_CLI_PATH'
        f" and BACKEND_CLI_ARGS; known to work: {_TESTED}"
    ),
    login_fix=(
        "give the agent its credentials (its API key in `config.env` or threadline's"
        " environment, or its own login)"
    ),
    no_credentials="the agent's own (its API key in `config.env` or the environment, or its login)",
    models=(("default", "Agent default", "The model the agent picks (its own flags choose one)"),),
)
