"""Provider profiles: named set-ups of a CLI with a provider (backend, model, mode and the
environment that points the CLI at the provider), from the operator's TOML file
(`THREADLINE_PROFILES`, default `<user config dir>/threadline/profiles.toml`):

    [profiles.zai]
    backend = "claude"
    model = "glm-4.6"
    [profiles.zai.env]
    ANTHROPIC_BASE_URL = "https://gateway.example/anthropic"
    ANTHROPIC_API_KEY = { env = "ZAI_API_KEY" }       # or { file = "~/.secrets/zai" }

A thread names one (`thread/start.config.profile`, else `AGENT_PROFILE`); threadline stores
the name only, and resolves the references each time it opens the thread's CLI: a secret is
in the operator's environment or file, never in threadline's state, logs or messages. What a
listing shows of a profile is its names, never a value. Light module: no trio."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

__all__ = [
    "Profile",
    "ProfileError",
    "load_profiles",
    "profiles_path",
    "thread_env",
]


class ProfileError(ValueError):
    """A profile cannot be used: the message names the profile and what is missing, never a
    value."""


class EnvRef(msgspec.Struct, forbid_unknown_fields=True):
    """A value read when the CLI starts: from the operator's environment or a file."""

    env: str | None = None
    file: str | None = None


class _Profile(msgspec.Struct, forbid_unknown_fields=True):
    backend: str
    model: str | None = None
    mode: str | None = None
    env: dict[str, str | EnvRef] = {}


class _File(msgspec.Struct, forbid_unknown_fields=True):
    profiles: dict[str, _Profile] = {}


@dataclass(frozen=True)
class Profile:
    name: str
    backend: str
    model: str | None
    mode: str | None
    env: Mapping[str, str | EnvRef]

    def resolve(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The profile's environment entries with every reference read; ProfileError naming
        the first one that does not resolve."""
        out = {}
        for name, value in self.env.items():
            out[name] = value if isinstance(value, str) else self._read(name, value, environ)
        return out

    def problems(self, environ: Mapping[str, str]) -> list[str]:
        """What keeps the profile from resolving (names and paths, never values)."""
        found = []
        for name, value in self.env.items():
            if isinstance(value, EnvRef):
                try:
                    self._read(name, value, environ)
                except ProfileError as exc:
                    found.append(str(exc))
        return found

    def _read(self, name: str, ref: EnvRef, environ: Mapping[str, str]) -> str:
        if (ref.env is None) == (ref.file is None):
            raise ProfileError(
                f"profile {self.name!r}: {name} must name one of env or file, not "
                + ("both" if ref.env else "neither")
            )
        if ref.env is not None:
            value = environ.get(ref.env)
            if not value:
                raise ProfileError(
                    f"profile {self.name!r}: {name} comes from the variable {ref.env}, "
                    "which is not set"
                )
            return value
        path = os.path.expanduser(ref.file or "")
        try:
            with open(path, encoding="utf-8") as source:
                value = source.read().strip()
        except OSError as exc:
            raise ProfileError(
                f"profile {self.name!r}: {name} comes from the file {path}, which cannot be "
                f"read ({exc.strerror or exc})"
            ) from None
        if not value:
            raise ProfileError(f"profile {self.name!r}: {name} comes from {path}, which is empty")
        return value


def profiles_path(environ: Mapping[str, str]) -> str:
    named = environ.get("THREADLINE_PROFILES", "").strip()
    if named:
        return os.path.expanduser(named)
    config = environ.get("XDG_CONFIG_HOME") or os.path.join(
        environ.get("HOME") or os.path.expanduser("~"), ".config"
    )
    return os.path.join(config, "threadline", "profiles.toml")


def load_profiles(environ: Mapping[str, str]) -> dict[str, Profile]:
    """The operator's profiles ({} without a file); ProfileError when the file is unreadable
    or not a profiles file (the message says where)."""
    path = profiles_path(environ)
    try:
        with open(path, "rb") as source:
            raw = source.read()
    except FileNotFoundError:
        if environ.get("THREADLINE_PROFILES", "").strip():
            raise ProfileError(f"THREADLINE_PROFILES names {path}, which does not exist") from None
        return {}
    except OSError as exc:
        raise ProfileError(f"cannot read the profiles file {path}: {exc.strerror}") from None
    try:
        data = msgspec.toml.decode(raw, type=_File)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProfileError(f"the profiles file {path} is not valid: {exc}") from None
    return {
        name: Profile(name, spec.backend, spec.model, spec.mode, dict(spec.env))
        for name, spec in data.profiles.items()
    }


#: Names a thread's own variables may not have: secrets go in a profile, as references.
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def thread_env(given: object, allowed: str) -> dict[str, str]:
    """`thread/start.config.env`: a thread's own non-secret variables, each allowed by the
    operator's `THREADLINE_THREAD_ENV` (comma-separated names; `PREFIX_*` for a prefix).
    ValueError saying which and why for anything else."""
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in given.items()
    ):
        raise ValueError("config.env must be an object of string values")
    patterns = [p.strip() for p in allowed.split(",") if p.strip()]
    for name in given:
        if any(word in name.upper() for word in _SECRET_WORDS):
            raise ValueError(
                f"config.env.{name} looks like a secret: give it in a profile, as a reference"
            )
        if not any(name == p or (p.endswith("*") and name.startswith(p[:-1])) for p in patterns):
            raise ValueError(
                f"config.env.{name} is not allowed here (THREADLINE_THREAD_ENV allows "
                + (", ".join(patterns) or "none")
                + ")"
            )
    return dict(given)
