"""A CLI's version, quickly: agent CLIs are node programs whose `--version` costs 0.2-3.5 s
(gemini), so `initialize` and `doctor` read the npm package's own package.json when the
binary comes from one, and otherwise run `--version` once per binary (cached by mtime).

Both forms of the check share one cache: `check_cli_now` (blocking, no trio: used to answer
`initialize` before the engine is loaded) and `check_cli` (async, for `doctor` and the
engine)."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping

from ...procs.executables import CliNotFound, ProcessError, resolve_executable
from ..spec import BackendCheck, BackendSpec

__all__ = [
    "check_cli",
    "check_cli_now",
    "cli_version",
    "cli_version_now",
    "install_hint",
    "older_than_tested",
    "resolve_cli",
]

_VERSION_TIMEOUT = 10.0
_cache: dict[tuple[str, float], str | None] = {}


def install_hint(command: str) -> str:
    """How to install the agent CLI called `command` (a name or a path), or "" for a command
    that is not one of the shipped backends' CLIs."""
    from ..registry import SPECS

    name = os.path.basename(command)
    spec = next((s for s in SPECS.values() if s.cli == name), None)
    if spec is None or spec.install_command is None:
        return ""
    return (
        f". Install {spec.display_name} with `{spec.install_command}`, or point "
        "BACKEND_CLI_PATH (or thread/start config.cliPath) at its binary"
    )


def resolve_cli(command: str, env: Mapping[str, str] | None = None) -> str:
    """`resolve_executable` for an agent CLI: a missing one's error names its install command."""
    try:
        return resolve_executable(command, env)
    except CliNotFound as exc:
        raise CliNotFound(f"{exc}{install_hint(command)}") from None


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


def _first_line(stdout: bytes | None, stderr: bytes | None) -> str | None:
    text = (stdout or stderr or b"").decode("utf-8", "replace").strip()
    return text.splitlines()[0] if text else None


def _known_version(path: str) -> tuple[bool, str | None]:
    """(True, version) when the version is known without running the CLI: cached, or from
    its npm package (or the binary is gone: (True, None)); else (False, None)."""
    try:
        key = (os.path.realpath(path), os.stat(path).st_mtime)
    except OSError:
        return True, None
    if key in _cache:
        return True, _cache[key]
    version = _package_version(path)
    if version is not None:
        _cache[key] = version
        return True, version
    return False, None


def cli_version_now(path: str, timeout: float = _VERSION_TIMEOUT) -> str | None:
    """`cli_version`, blocking: a `--version` run, when needed, blocks the caller."""
    known, version = _known_version(path)
    if known:
        return version
    import subprocess

    try:
        done = subprocess.run(
            [path, "--version"], input=b"", capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    version = _first_line(done.stdout, done.stderr)
    with contextlib.suppress(OSError):
        _cache[(os.path.realpath(path), os.stat(path).st_mtime)] = version
    return version


async def cli_version(path: str, timeout: float = _VERSION_TIMEOUT) -> str | None:
    """The CLI's version string, or None when it cannot be determined. A `--version` run
    happens in a worker thread; a cancelled caller abandons it (it ends by its own timeout)."""
    known, version = _known_version(path)
    if known:
        return version
    import trio

    return await trio.to_thread.run_sync(cli_version_now, path, timeout, abandon_on_cancel=True)


def _resolve(spec: BackendSpec, cli_path: str | None) -> str | BackendCheck:
    command = spec.cli or (cli_path if spec.command_setup is not None else None)
    if command is None and spec.command_setup is not None:
        # Runs whatever command it is given: usable once one is configured.
        return BackendCheck(
            available=True, message=spec.command_setup, credentials=spec.no_credentials
        )
    if command is None:
        return BackendCheck(available=True, version="builtin", credentials=spec.no_credentials)
    try:
        return resolve_cli(cli_path or command)
    except ProcessError as exc:
        return BackendCheck(available=False, message=str(exc))


def _version_tuple(version: str) -> tuple[int, ...] | None:
    """(2, 1, 197) for "2.1.197", "codex-cli 0.169.0" or "2.1.197 (Claude Code)"."""
    match = re.search(r"\d+(?:\.\d+)+", version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else None


def older_than_tested(spec: BackendSpec, version: str) -> str | None:
    """What to do when `version` is older than the oldest one the tests passed on, else None."""
    if spec.oldest_tested is None:
        return None
    have, oldest = _version_tuple(version), _version_tuple(spec.oldest_tested)
    if have is None or oldest is None or have >= oldest:
        return None
    return (
        f"{spec.cli} {version} is older than the oldest version threadline is tested with "
        f"({spec.oldest_tested}); upgrade with `{spec.install_command}`"
    )


def _checked(spec: BackendSpec, path: str, version: str | None) -> BackendCheck:
    old = older_than_tested(spec, version) if version else None
    return BackendCheck(
        # (A configured agent need not answer `--version`: found and executable is enough.)
        available=version is not None or spec.cli is None,
        path=path,
        version=version,
        credentials=spec.credentials_hint(os.environ),
        message=old if version else f"`{os.path.basename(path)} --version` failed",
        outdated=old is not None,
    )


def check_cli_now(spec: BackendSpec, cli_path: str | None) -> BackendCheck:
    """`check_cli`, blocking and without trio."""
    path = _resolve(spec, cli_path)
    if isinstance(path, BackendCheck):
        return path
    return _checked(spec, path, cli_version_now(path))


async def check_cli(spec: BackendSpec, cli_path: str | None) -> BackendCheck:
    """The standard `Backend.check()`: binary found and runnable, its version, a hint."""
    path = _resolve(spec, cli_path)
    if isinstance(path, BackendCheck):
        return path
    return _checked(spec, path, await cli_version(path))
