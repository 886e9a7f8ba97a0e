"""How codex is run: flags, environment, the native binary behind the npm launcher, exits."""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ...procs.group import GroupProcess, exit_status
from ...protocol import CommandAction, ThreadItem, ThreadTokenUsage, TurnError, TurnPlanStep
from .. import base as b

__all__ = ["LAUNCHER_VARS", "PROCESS_KEYS", "CodexCommand", "native_binary", "thread_config"]

_STOP_WAIT = 0.5  # how long the commands killed on interrupt get to go before a restart


_ITEM_DECODER = msgspec.json.Decoder(ThreadItem)


_USAGE_DECODER = msgspec.json.Decoder(ThreadTokenUsage)


_ERROR_DECODER = msgspec.json.Decoder(TurnError)


_STEP_DECODER = msgspec.json.Decoder(list[TurnPlanStep])


_ACTIONS_DECODER = msgspec.json.Decoder(list[CommandAction])


#: Flags for every Codex invocation: bounded retries (never hang on an unreachable provider).
_COMMON_FLAGS = ("--disable", "unbounded_connection_retries")


def _config_flags(settings: b.SessionSettings, *, process_only: bool = False) -> list[str]:
    """`config.codexConfig` {key: value} → `-c key=<TOML value>` overrides (`process_only`:
    only those an app-server takes for the whole process, see `PROCESS_KEYS`)."""
    extra = settings.config.get("codexConfig")
    flags: list[str] = []
    if isinstance(extra, dict):
        for key, value in extra.items():
            if not process_only or _process_key(key):
                flags += ["-c", f"{key}={json.dumps(value)}"]
    return flags


#: `codexConfig` keys (and tables) an app-server reads for the whole process, or that would
#: clash with the thread's own `mcp_servers` in `thread/start.config`: given as `-c` flags, so
#: threads that differ in them run on different processes. Every other key goes in the
#: thread's `thread/start` / `thread/resume` `config` (codex 0.169.0 takes dotted keys there,
#: e.g. `model_providers.x.base_url`, and derives the thread's configuration from them).
PROCESS_KEYS = (
    "mcp_servers",
    "otel",
    "analytics",
    "feedback",
    "log_dir",
    "sqlite_home",
    "history",
    "notify",
    "cli_auth_credentials_store",
    "mcp_oauth_credentials_store",
    "chatgpt_base_url",
    "forced_login_method",
    "forced_chatgpt_workspace_id",
)


def _process_key(key: str) -> bool:
    return key.split(".", 1)[0] in PROCESS_KEYS


def thread_config(settings: b.SessionSettings) -> dict[str, Any]:
    """The `codexConfig` keys an app-server takes per thread (see `PROCESS_KEYS`)."""
    extra = settings.config.get("codexConfig")
    if not isinstance(extra, dict):
        return {}
    return {str(k): v for k, v in extra.items() if not _process_key(str(k))}


@dataclass(frozen=True)
class CodexCommand:
    """The codex binary a session runs, and what the npm launcher would add to its
    environment (see `native_binary`)."""

    binary: str
    launcher_env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolved(cls, path: str) -> CodexCommand:
        binary, launcher_env = native_binary(path)
        return cls(binary, launcher_env)

    def env(self, settings: b.SessionSettings) -> dict[str, str]:
        """The CLI's environment: the thread's, the launcher's, and PWD = the thread's cwd."""
        env = {**settings.env, **self.launcher_env}
        env["PWD"] = settings.cwd
        return env


#: What the npm launcher adds to the binary's environment (no secret: a flag and a path).
LAUNCHER_VARS = ("CODEX_MANAGED_BY_NPM", "CODEX_MANAGED_PACKAGE_ROOT")

#: Node platform → (Rust target triple, npm platform package) as in the npm launcher.
_NPM_TARGETS = {
    ("linux", "x86_64"): ("x86_64-unknown-linux-musl", "codex-linux-x64"),
    ("linux", "aarch64"): ("aarch64-unknown-linux-musl", "codex-linux-arm64"),
    ("darwin", "x86_64"): ("x86_64-apple-darwin", "codex-darwin-x64"),
    ("darwin", "arm64"): ("aarch64-apple-darwin", "codex-darwin-arm64"),
}


def native_binary(path: str) -> tuple[str, dict[str, str]]:
    """The native binary behind the npm package's Node launcher, and the environment the
    launcher would add; `(path, {})` when `path` is not that launcher or the binary is missing.

    Why: on Node < 22 `bin/codex.js` spawns the binary as a child (no execve), which costs
    ~150-350 ms per start (measured: app-server ready 495 → 157 ms, an exec turn 826 → 470 ms,
    reference codex-runtime.md §6) plus a Node process per thread; the reference recommends
    running the binary directly. The lookup mirrors the launcher's own (`require.resolve` of the
    platform package, then the package's own vendor/)."""
    real = os.path.realpath(path)
    if os.path.basename(real) != "codex.js" or os.path.basename(os.path.dirname(real)) != "bin":
        return path, {}
    package_root = os.path.dirname(os.path.dirname(real))
    target = _NPM_TARGETS.get((sys.platform, platform.machine().lower()))
    if target is None:
        return path, {}
    triple, platform_package = target
    tail = ("vendor", triple, "bin", "codex")
    for candidate in (
        os.path.join(package_root, "node_modules", "@openai", platform_package, *tail),
        os.path.join(os.path.dirname(package_root), platform_package, *tail),
        os.path.join(package_root, *tail),
    ):
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            by_npm, root = LAUNCHER_VARS
            return candidate, {by_npm: "1", root: package_root}
    return path, {}


def _convert(raw: Any, decoder: msgspec.json.Decoder[Any]) -> Any:
    try:
        return decoder.decode(msgspec.json.encode(raw))
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def _exit_error(proc: GroupProcess | None, what: str) -> b.BackendError:
    tail = proc.stderr_tail(2000) if proc is not None else ""
    code = proc.returncode if proc is not None else None
    message = f"codex {what}" + (f" ({exit_status(code)})" if code is not None else "")
    if tail:
        message += f": {tail}"
    return b.BackendError(message, codex_error_info="other", additional_details=tail or None)
