"""What each shipped backend is, without loading it: id, modes, capabilities per mode, the
CLI's name and how to tell whether credentials look configured.

This module costs no trio: `initialize` is answered from it before the engine is imported
(see `threadline.server.handshake`). The backend classes read their facts from here, so the
two cannot drift."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from ..protocol.methods import BackendCapabilities

__all__ = [
    "OVERRIDE_FIELDS",
    "BackendCheck",
    "BackendSpec",
    "NpmCli",
    "acp_capabilities",
    "foreign_model",
    "mode_capabilities",
    "per_turn_capabilities",
]


#: `turn/start` fields that change a thread's settings for this and later turns (Codex's
#: names), and how a mode applies each unless its spec says otherwise.
OVERRIDE_FIELDS = ("model", "effort", "summary", "approvalPolicy", "sandboxPolicy", "cwd")
_DEFAULT_OVERRIDES: dict[str, Literal["native", "restart", "unsupported"]] = {
    "model": "restart",
    "effort": "unsupported",
    "summary": "unsupported",
    "approvalPolicy": "native",
    "sandboxPolicy": "unsupported",
    "cwd": "unsupported",
}


@dataclass
class BackendCheck:
    """Result of `Backend.check()`: is the CLI usable here?"""

    available: bool
    path: str | None = None
    version: str | None = None
    message: str | None = None
    credentials: str | None = None
    #: The CLI is older than the oldest version the tests passed on (`message` says more).
    outdated: bool = False


@dataclass(frozen=True)
class NpmCli:
    """An agent CLI installed from npm: its command, its package, the version the project's
    tests pin (`scripts/install-clis` installs it) and the oldest they passed on (older
    installs are reported; default: the pin)."""

    command: str
    package: str
    pinned: str
    oldest_tested: str | None = None


@dataclass(frozen=True)
class BackendSpec:
    id: str
    display_name: str
    #: What the backend can do in each of its modes; the first mode is the default.
    capabilities: Mapping[str, BackendCapabilities]
    #: The CLI it drives; None for a backend that runs in-process or runs a configured command.
    npm: NpmCli | None = None
    #: (variable, hint) pairs: the first variable set gives the credentials hint.
    credentials: tuple[tuple[str, str], ...] = ()
    no_credentials: str = "none needed"
    #: What to do when the model API refuses the credentials (HTTP 401 / not logged in).
    login_fix: str | None = None
    #: Files a logged-in CLI keeps its credentials in (`~` and `$VAR` expanded; the first that
    #: exists counts).
    credential_files: tuple[str, ...] = ()
    #: What `model/list` offers: (model, display name, description); the first is the default.
    models: tuple[tuple[str, str, str], ...] = ()
    #: The reasoning efforts offered with every model: (effort, description).
    efforts: tuple[tuple[str, str], ...] = (("medium", "default"),)
    default_effort: str = "medium"
    #: Model names that are this backend's own (regular expressions, matched case-insensitively
    #: at the start). A name that is another backend's and not this one's is never passed to
    #: the CLI (a Codex client's `gpt-…` on a claude thread): the default model is used and a
    #: warning says so. None: the CLI takes models of any provider.
    model_patterns: tuple[str, ...] | None = None
    #: For a backend with no fixed CLI (it runs the command a thread or the operator
    #: configures): what to configure, reported by `initialize` and `doctor` while none is.
    command_setup: str | None = None

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.capabilities)

    @property
    def default_mode(self) -> str:
        return next(iter(self.capabilities))

    @property
    def cli(self) -> str | None:
        """The CLI's command name; None for a backend without a fixed CLI."""
        return self.npm.command if self.npm else None

    @property
    def npm_package(self) -> str | None:
        return self.npm.package if self.npm else None

    @property
    def pinned_version(self) -> str | None:
        return self.npm.pinned if self.npm else None

    @property
    def oldest_tested(self) -> str | None:
        return (self.npm.oldest_tested or self.npm.pinned) if self.npm else None

    @property
    def install_command(self) -> str | None:
        """The command that installs the pinned CLI, or None for an in-process backend."""
        if self.npm_package is None:
            return None
        pin = f"@{self.pinned_version}" if self.pinned_version else ""
        return f"npm install -g {self.npm_package}{pin}"

    def credentials_hint(self, env: Mapping[str, str]) -> str:
        """Whether credentials look configured: the first variable set in `env` (never its
        value), else a login file, else what to do."""
        hint = next((hint for var, hint in self.credentials if env.get(var)), None)
        if hint is not None:
            return hint
        if not self.credential_files and not self.credentials:
            return self.no_credentials  # nothing to look for
        for pattern in self.credential_files:
            path = _expand(pattern, env)
            if path is not None and os.path.isfile(path):
                return f"logged in ({pattern})"
        if self.login_fix is None:
            return self.no_credentials
        return f"none found: {self.login_fix}"


def _own(spec: BackendSpec, model: str) -> bool:
    return any(re.match(p, model, re.IGNORECASE) for p in spec.model_patterns or ())


def foreign_model(spec: BackendSpec, model: str, specs: Iterable[BackendSpec]) -> bool:
    """True when `model` matches another backend's `model_patterns` (one of `specs`) and not
    this backend's own (a backend without patterns takes any name)."""
    if spec.model_patterns is None or _own(spec, model):
        return False
    return any(other.id != spec.id and _own(other, model) for other in specs)


def _expand(pattern: str, env: Mapping[str, str]) -> str | None:
    """`pattern` with `~` and `$VAR` taken from `env`; None when a variable is unset."""
    missing = False

    def var(match: re.Match[str]) -> str:
        nonlocal missing
        value = env.get(match.group(1))
        missing = missing or not value
        return value or ""

    text = re.sub(r"\$([A-Z_][A-Z0-9_]*)", var, pattern)
    if missing:
        return None
    if text.startswith("~"):
        home = env.get("HOME")
        if not home:
            return None
        text = home + text[1:]
    return text


def mode_capabilities(
    invocation: str,
    role_injection: str,
    *,
    approvals: bool = True,
    interrupt: bool = True,
    resume: bool = True,
    deltas: bool = True,
    reasoning: bool = True,
    images: bool = False,
    image_urls: bool = True,
    overrides: Mapping[str, Literal["native", "restart", "unsupported"]] | None = None,
    output_schema: bool = False,
    steer: bool = False,
    fork: bool = False,
    compact: bool = False,
    inject_items: Literal["native", "transcript"] = "transcript",
) -> BackendCapabilities:
    """What a backend can do in one mode; the defaults are a full-featured mode's, except
    for the control surface, which each mode declares. `overrides` is merged over the
    default (model: restart, approvalPolicy: native, the rest unsupported)."""
    return BackendCapabilities(
        approvals=approvals,
        interrupt=interrupt,
        resume=resume,
        deltas=deltas,
        reasoning=reasoning,
        images=images,
        image_urls=image_urls,
        overrides={**_DEFAULT_OVERRIDES, **(overrides or {})},
        output_schema=output_schema,
        steer=steer,
        fork=fork,
        compact=compact,
        inject_items=inject_items,
        invocation=invocation,
        role_injection=role_injection,
    )


def per_turn_capabilities(
    invocation: str,
    role_injection: str,
    *,
    deltas: bool = True,
    reasoning: bool = True,
    overrides: Mapping[str, Literal["native", "restart", "unsupported"]] | None = None,
    output_schema: bool = False,
    fork: bool = False,
    compact: bool = False,
) -> BackendCapabilities:
    """A mode that runs the CLI once per turn: approvals by policy only (the CLI asks the
    client nothing) and no native interrupt (a turn is stopped by killing the process). A
    new model reaches the next spawn (native)."""
    return mode_capabilities(
        invocation,
        role_injection,
        approvals=False,
        interrupt=False,
        deltas=deltas,
        reasoning=reasoning,
        overrides={"model": "native", **(overrides or {})},
        output_schema=output_schema,
        fork=fork,
        compact=compact,
    )


def acp_capabilities(command: str) -> BackendCapabilities:
    """An ACP agent's mode: the same for every CLI that speaks ACP."""
    return mode_capabilities(
        f"one `{command}` per working directory shared by its threads (ACP over stdio);"
        " resume with `session/load`",
        "bootstrap text block prepended to the first prompt",
    )
