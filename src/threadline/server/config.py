"""Operator configuration from the environment. Per-thread params override these."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ..backends.registry import BACKEND_IDS
from ..rpc.limits import DEFAULT_MAX_REQUEST

__all__ = ["ConfigError", "ServerConfig"]


class ConfigError(Exception):
    """Invalid operator configuration: threadline refuses to start."""


_N = TypeVar("_N", int, float)


def _positive(
    env: Mapping[str, str], name: str, parse: Callable[[str], _N], unit: str = ""
) -> _N | None:
    """The variable's value as a number > 0, None when unset (ConfigError if malformed)."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    kind = "an integer" if parse is int else "a number"
    suffix = f" ({unit})" if unit else ""
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not {kind}{suffix}") from None
    if value <= 0:
        raise ConfigError(f"{name}={raw!r} must be > 0{suffix}")
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
    #: THREADLINE_IDLE_TIMEOUT: seconds a thread may go without a turn before its CLI is
    #: stopped (reopened on the same conversation at the next turn).
    idle_timeout: float = 600.0
    #: THREADLINE_UNLOAD_AFTER: seconds a loaded thread with no subscriber and no running
    #: turn stays loaded (Codex: 30 minutes).
    unload_after: float = 1800.0
    #: THREADLINE_MAX_REQUEST_BYTES: the longest accepted request line.
    max_request: int = DEFAULT_MAX_REQUEST
    #: The operator chose the backend (AGENT_BACKEND or BACKEND_CLI_PATH set): its CLI must
    #: be usable before threadline serves anyone.
    backend_set: bool = False
    #: AGENT_PROFILE: the provider profile a thread gets when its config names none.
    profile: str | None = None
    #: THREADLINE_THREAD_ENV: the variables a thread may set itself (`config.env`):
    #: comma-separated names, `PREFIX_*` for a prefix.
    thread_env: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerConfig:
        env = os.environ if env is None else env
        backend = env.get("AGENT_BACKEND", "").strip() or "claude"
        if backend not in BACKEND_IDS:
            raise ConfigError(
                f"AGENT_BACKEND={backend!r} is not a known backend; valid values: "
                + ", ".join(BACKEND_IDS)
            )
        tools_raw = env.get("ALLOWED_TOOLS", "").strip()
        tools = tuple(t.strip() for t in tools_raw.split(",") if t.strip()) or None
        max_turns = _positive(env, "BACKEND_MAX_TURNS", int)
        grace = _positive(env, "THREADLINE_INTERRUPT_GRACE", float, "seconds")
        max_request = _positive(env, "THREADLINE_MAX_REQUEST_BYTES", int, "bytes")
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
            max_turns=max_turns or 25,
            allowed_tools=tools,
            turn_timeout=_positive(env, "BACKEND_TURN_TIMEOUT", float, "seconds"),
            approval_timeout=_positive(env, "THREADLINE_APPROVAL_TIMEOUT", float, "seconds"),
            interrupt_grace=grace or 5.0,
            idle_timeout=_positive(env, "THREADLINE_IDLE_TIMEOUT", float, "seconds") or 600.0,
            unload_after=_positive(env, "THREADLINE_UNLOAD_AFTER", float, "seconds") or 1800.0,
            max_request=max_request or DEFAULT_MAX_REQUEST,
            profile=env.get("AGENT_PROFILE", "").strip() or None,
            thread_env=env.get("THREADLINE_THREAD_ENV", ""),
            backend_set=bool(
                env.get("AGENT_BACKEND", "").strip() or env.get("BACKEND_CLI_PATH", "").strip()
            ),
        )
