"""Finding a CLI's executable, and the errors for one that cannot be started.

Kept free of trio (and of everything heavy) so `initialize` can report the backends before the
engine is loaded; `group` re-exports all of it. `backends.kit.cli_binary.resolve_cli` adds
the install command of a backend's CLI to the not-found message."""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["CliNotExecutable", "CliNotFound", "ProcessError", "resolve_executable"]


class ProcessError(Exception):
    """A CLI could not be started or talked to."""


class CliNotFound(ProcessError):
    """The CLI binary does not exist."""


class CliNotExecutable(ProcessError):
    """The CLI binary exists but cannot be executed."""


def resolve_executable(name_or_path: str, env: Mapping[str, str] | None = None) -> str:
    """Absolute path of the executable `name_or_path`, checked before anything is spawned.

    A name containing "/" is a path (relative ones are taken relative to our cwd, not the
    child's). A bare name is searched on ``env["PATH"]`` when `env` is given (that is the PATH
    the CLI will see), else on ours. Empty PATH entries are skipped: treating them as "." would
    run whatever sits in the working directory.
    """
    if not name_or_path:
        raise CliNotFound("empty command name")
    if os.sep in name_or_path:
        path = os.path.abspath(name_or_path)
        label = os.path.basename(path) or name_or_path
        if not os.path.exists(path):
            raise CliNotFound(f"{label}: not found at {path}")
        if os.path.isdir(path):
            raise CliNotExecutable(f"{label}: {path} is a directory")
        if not os.access(path, os.X_OK):
            raise CliNotExecutable(f"{label}: {path} is not executable (permission denied)")
        return path

    search = (env if env is not None else os.environ).get("PATH", os.defpath)
    not_executable: str | None = None
    for directory in search.split(os.pathsep):
        if not directory:
            continue
        candidate = os.path.join(directory, name_or_path)
        if not os.path.isfile(candidate):
            continue
        if os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
        not_executable = not_executable or os.path.abspath(candidate)
    if not_executable is not None:
        raise CliNotExecutable(
            f"{name_or_path}: {not_executable} is not executable (permission denied)"
        )
    raise CliNotFound(f"{name_or_path}: command not found (looked for {name_or_path!r} on PATH)")
