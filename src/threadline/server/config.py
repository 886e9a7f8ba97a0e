"""Operator configuration from the environment. Per-thread params override these."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends.registry import BACKEND_IDS

__all__ = ["ConfigError", "ServerConfig"]


class ConfigError(Exception):
    """Invalid operator configuration: threadline refuses to start."""


def _positive_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number (seconds)") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be > 0 (seconds)")
    return value


@dataclass(frozen=True)
class ServerConfig:
    default_backend: str = "claude"
    cli_path: str | None = None
    #: BACKEND_CLI_ARGS, shell-split: the arguments the default backend's CLI runs with.
    cli_args: tuple[str, ...] = ()
    model: str | None = None
    max_turns: int = 25
    allowed_tools: tuple[str, ...] | None = None
    #: Per-turn wall-clock limit; on expiry the turn fails with "Query timed out".
    turn_timeout: float | None = None
    #: How long an approval may stay unanswered before it is declined (None: forever).
    approval_timeout: float | None = None
    #: How long a native interrupt may take before the CLI's process group is killed.
    interrupt_grace: float = 5.0
    #: The operator chose the backend (AGENT_BACKEND or BACKEND_CLI_PATH set): its CLI must
    #: be usable before threadline serves anyone.
    backend_set: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerConfig:
        env = os.environ if env is None else env
        backend = env.get("AGENT_BACKEND", "").strip() or "claude"
        if backend not in BACKEND_IDS:
            raise ConfigError(
                f"AGENT_BACKEND={backend!r} is not a known backend; valid values: "
                + ", ".join(BACKEND_IDS)
            )
        max_turns_raw = env.get("BACKEND_MAX_TURNS", "").strip()
        max_turns = 25
        if max_turns_raw:
            try:
                max_turns = int(max_turns_raw)
            except ValueError:
                raise ConfigError(
                    f"BACKEND_MAX_TURNS={max_turns_raw!r} is not an integer"
                ) from None
            if max_turns <= 0:
                raise ConfigError(f"BACKEND_MAX_TURNS={max_turns_raw!r} must be > 0")
        tools_raw = env.get("ALLOWED_TOOLS", "").strip()
        tools = tuple(t.strip() for t in tools_raw.split(",") if t.strip()) or None
        grace = _positive_float(env, "THREADLINE_INTERRUPT_GRACE")
        try:
            cli_args = tuple(shlex.split(env.get("BACKEND_CLI_ARGS", "")))
        except ValueError as exc:
            raise ConfigError(
                f"BACKEND_CLI_ARGS cannot be split like a shell would: {exc}"
            ) from None
        return cls(
            default_backend=backend,
            cli_path=env.get("BACKEND_CLI_PATH", "").strip() or None,
            cli_args=cli_args,
            model=env.get("BACKEND_MODEL", "").strip() or None,
            max_turns=max_turns,
            allowed_tools=tools,
            turn_timeout=_positive_float(env, "BACKEND_TURN_TIMEOUT"),
            approval_timeout=_positive_float(env, "THREADLINE_APPROVAL_TIMEOUT"),
            interrupt_grace=grace if grace is not None else 5.0,
            backend_set=bool(
                env.get("AGENT_BACKEND", "").strip() or env.get("BACKEND_CLI_PATH", "").strip()
            ),
        )
