"""A CLI's version, quickly: agent CLIs are node programs whose `--version` costs 0.2-3.5 s
(gemini), so `initialize` and `doctor` read the npm package's own package.json when the
binary comes from one, and otherwise run `--version` once per binary (cached by mtime)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

import trio

from .base import BackendCheck
from .process import ProcessError, resolve_executable

__all__ = ["check_cli", "cli_version", "credentials_hint"]

_cache: dict[tuple[str, float], str | None] = {}


def _package_version(path: str) -> str | None:
    """The version in the package.json of the npm package that ships `path`, if any."""
    real = os.path.realpath(path)
    folder = os.path.dirname(real)
    for _ in range(4):
        manifest = os.path.join(folder, "package.json")
        if os.path.isfile(manifest):
            try:
                with open(manifest, encoding="utf-8") as fh:
                    data = json.load(fh)
            except (OSError, ValueError):
                return None
            version = data.get("version") if isinstance(data, dict) else None
            return str(version) if version else None
        parent = os.path.dirname(folder)
        if parent == folder or os.path.basename(folder) == "node_modules":
            break
        folder = parent
    return None


async def cli_version(path: str, timeout: float = 10.0) -> str | None:
    """The CLI's version string, or None when it cannot be determined."""
    try:
        key = (os.path.realpath(path), os.stat(path).st_mtime)
    except OSError:
        return None
    if key in _cache:
        return _cache[key]
    version = _package_version(path)
    if version is None:
        with trio.move_on_after(timeout):
            try:
                result = await trio.run_process(
                    [path, "--version"],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    stdin=b"",
                )
            except OSError:
                return None
            text = (result.stdout or result.stderr).decode("utf-8", "replace").strip()
            version = text.splitlines()[0] if text else None
    _cache[key] = version
    return version


def credentials_hint(
    checks: Sequence[tuple[str, str]], fallback: str, env: Mapping[str, str] | None = None
) -> str:
    """The first `(variable, hint)` whose variable is set, else `fallback` (never the value)."""
    env = os.environ if env is None else env
    return next((hint for var, hint in checks if env.get(var)), fallback)


async def check_cli(name: str, cli_path: str | None, credentials: str) -> BackendCheck:
    """The standard `Backend.check()`: binary found and runnable, its version, a hint."""
    try:
        path = resolve_executable(cli_path or name)
    except ProcessError as exc:
        return BackendCheck(available=False, message=str(exc))
    version = await cli_version(path)
    return BackendCheck(
        available=version is not None,
        path=path,
        version=version,
        credentials=credentials,
        message=None if version else f"`{name} --version` failed",
    )
