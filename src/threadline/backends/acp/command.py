"""Which agent a thread runs and with what environment, from its config or the operator's."""

from __future__ import annotations

import json
from typing import Any

from .. import base as b

__all__ = ["agent_command", "agent_env", "env_key"]

_NO_COMMAND = (
    "the acp backend needs the agent's command: set thread/start config.command (the agent"
    ' and its arguments, e.g. ["gemini", "--acp"]), or start threadline with AGENT_BACKEND=acp,'
    " BACKEND_CLI_PATH=<the agent> and BACKEND_CLI_ARGS=<its arguments>"
)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def agent_command(settings: b.SessionSettings) -> list[str]:
    """The agent's argv as configured (its program not looked up yet): `config.command`, else
    the thread's `cliPath` or BACKEND_CLI_PATH followed by BACKEND_CLI_ARGS."""
    command = settings.config.get("command")
    if command is not None:
        if not command or not _strings(command):
            raise b.ConfigInvalid(
                "config.command must be a non-empty list of strings (the agent, then its"
                f" arguments); got {json.dumps(command)}"
            )
        return list(command)
    if settings.cli_path:
        return [settings.cli_path, *settings.cli_args]
    raise b.ConfigInvalid(_NO_COMMAND)


def _config_env(settings: b.SessionSettings) -> dict[str, str]:
    env = settings.config.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise b.ConfigInvalid("config.env must be an object of strings (variable → value)")
    return env


def agent_env(settings: b.SessionSettings) -> dict[str, str]:
    """threadline's environment with `config.env` over it; PWD is the thread's cwd, where the
    agent runs."""
    return {**settings.env, **_config_env(settings), "PWD": settings.cwd}


def env_key(settings: b.SessionSettings) -> str:
    """What of the environment two threads must share to share one agent process."""
    return json.dumps(_config_env(settings), sort_keys=True)
