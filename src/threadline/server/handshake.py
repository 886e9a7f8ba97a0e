"""The `initialize` handshake: its response, and answering it before the engine is loaded.

A client's first wait is spawn → `initialize` response. Importing the engine (trio,
jsonrpcserver with jsonschema, every backend) takes longer than a native `codex app-server`
needs to answer (benchmark P1 in benchmarks/). So `answer_first_initialize` runs before any of
that is imported: it reads the first line straight from fd 0 and, if it is a well-formed
`initialize` request, answers it from light modules alone (the protocol types, the backend
catalog, the state dir). Anything else (another method first, bad JSON, a batch, params that
do not validate, a line that is too long) is handed over untouched to the full server, which
answers it as it always has. Both paths build the response with `initialize_response`.

Nothing here may import trio, the store, the backends' implementations or jsonrpcserver."""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from .. import __version__
from ..backends.registry import SPECS
from ..backends.spec import BackendCheck
from ..profiles import ProfileError, load_profiles
from ..protocol.base import RequestId
from ..protocol.methods import (
    BackendCapabilities,
    BackendInfo,
    InitializeParams,
    InitializeResponse,
    ProfileInfo,
    ServerInfo,
)

__all__ = [
    "Handshake",
    "answer_first_initialize",
    "backend_info",
    "catalog_backend_infos",
    "initialize_response",
    "opt_out_methods",
    "profile_infos",
]

log = logging.getLogger("threadline.handshake")

#: The first line is read up to this size; a longer one (never an initialize request) is left
#: to the server, which applies the real request-size cap.
_FIRST_LINE_MAX = 1024 * 1024
_CHUNK = 64 * 1024


def profile_infos(environ: Mapping[str, str]) -> dict[str, list[ProfileInfo]]:
    """The operator's provider profiles by backend, each with whether it resolves now; none
    when the file is unreadable (logged: `thread/start` with one says why)."""
    try:
        profiles = load_profiles(environ)
    except ProfileError as exc:
        log.warning("%s", exc)
        return {}
    found: dict[str, list[ProfileInfo]] = {}
    for profile in profiles.values():
        problems = profile.problems(environ)
        found.setdefault(profile.backend, []).append(
            ProfileInfo(
                name=profile.name,
                model=profile.model,
                mode=profile.mode,
                env=sorted(profile.env),
                usable=not problems,
                problems=problems,
            )
        )
    return found


def backend_info(
    id: str,
    modes: Sequence[str],
    default_mode: str,
    capabilities: Mapping[str, BackendCapabilities],
    check: BackendCheck | None,
    profiles: Sequence[ProfileInfo] = (),
) -> BackendInfo:
    """One entry of `initialize`'s `backends`; `check` None means the check timed out."""
    if check is None:
        check = BackendCheck(available=False, message="check timed out")
    return BackendInfo(
        profiles=list(profiles),
        id=id,
        available=check.available,
        modes=list(modes),
        default_mode=default_mode,
        capabilities=dict(capabilities),
        version=check.version,
        path=check.path,
        message=check.message,
        credentials=check.credentials,
        outdated=check.outdated,
    )


def catalog_backend_infos(cli_path: str | None, cli_path_for: str | None) -> list[BackendInfo]:
    """Every shipped backend's info, checked now (blocking), from the catalog alone."""
    from ..backends.kit.cli_binary import check_cli_now

    profiles = profile_infos(os.environ)
    return [
        backend_info(
            spec.id,
            spec.modes,
            spec.default_mode,
            spec.capabilities,
            # BACKEND_CLI_PATH names the default backend's binary only.
            check_cli_now(spec, cli_path if spec.id == cli_path_for else None),
            profiles.get(spec.id, ()),
        )
        for spec in SPECS.values()
    ]


def initialize_response(
    params: InitializeParams, root: Path, backends: list[BackendInfo]
) -> InitializeResponse:
    system = platform.system()
    return InitializeResponse(
        user_agent=(
            f"{params.client_info.name}/{__version__} ({system} {platform.release()}; "
            f"{platform.machine()}) threadline/{__version__}"
        ),
        codex_home=str(root),
        platform_family="windows" if os.name == "nt" else "unix",
        platform_os=_platform_os(system),
        server_info=ServerInfo(name="threadline", version=__version__),
        backends=backends,
    )


def _platform_os(system: str) -> Literal["linux", "macos", "windows"]:
    """`platform.system()` as Codex names the OS; anything not macOS or Windows is linux."""
    if system == "Darwin":
        return "macos"
    return "windows" if system == "Windows" else "linux"


def opt_out_methods(params: InitializeParams) -> frozenset[str]:
    """The notification methods the client asked never to receive."""
    caps = params.capabilities
    return frozenset(caps.opt_out_notification_methods or ()) if caps else frozenset()


@dataclass
class Handshake:
    """What happened before the server started: `params` is set when `initialize` was
    already answered; `pending` holds the bytes read from stdin that the server must still
    process, in order, before reading on; `signals` are the SIGTERM/SIGINT/SIGHUP received
    while the engine was not yet there to handle them (the server stops at once)."""

    params: InitializeParams | None = None
    pending: bytes = b""
    signals: list[int] = field(default_factory=list)
    _reading: bool = False

    def install_signal_handlers(self) -> None:
        """Record SIGTERM, SIGINT and SIGHUP until the engine takes them over: their default
        actions would kill the server (or raise KeyboardInterrupt inside an import) instead of
        the clean shutdown a client is promised. While the first line is awaited they also end
        the wait (`answer_first_initialize` returns with `signals` set)."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)
        if self._reading:
            raise _Signalled


class _Signalled(Exception):
    pass


def _read_first_line(fd: int) -> tuple[bytes, int]:
    """(everything read, index of the first newline or -1). Stops at EOF or past the cap."""
    data = bytearray()
    while True:
        newline = data.find(b"\n")
        if newline >= 0 or len(data) > _FIRST_LINE_MAX:
            return bytes(data), newline
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return bytes(data), -1
        data += chunk


def _initialize_request(line: bytes) -> tuple[RequestId, InitializeParams] | None:
    """The id and params if `line` is an `initialize` request the server would accept as is,
    else None (the server then handles the line itself, errors included)."""
    try:
        message: Any = msgspec.json.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    rid = message.get("id")
    if not (isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))):
        return None
    if message.get("jsonrpc", "2.0") != "2.0" or "result" in message or "error" in message:
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    try:
        return rid, msgspec.convert(params, InitializeParams, str_keys=True)
    except msgspec.ValidationError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def answer_first_initialize(
    root: Path,
    cli_path: str | None,
    cli_path_for: str | None,
    in_fd: int = 0,
    out_fd: int = 1,
    install_signal_handlers: bool = True,
) -> Handshake:
    """Read the first request from `in_fd`; answer it on `out_fd` if it is `initialize`.

    Blocks until a whole first line (or EOF, or a signal: then `signals` is set and nothing
    was answered) has arrived. `cli_path` is BACKEND_CLI_PATH, which applies to the backend
    `cli_path_for` only."""
    handshake = Handshake()
    if install_signal_handlers:
        handshake.install_signal_handlers()
    handshake._reading = True
    try:
        data, newline = _read_first_line(in_fd)
    except _Signalled:
        return handshake
    finally:
        handshake._reading = False
    if newline < 0:
        handshake.pending = data
        return handshake
    request = _initialize_request(data[:newline])
    if request is None:
        handshake.pending = data
        return handshake
    rid, params = request
    result = initialize_response(params, root, catalog_backend_infos(cli_path, cli_path_for))
    line = msgspec.json.encode({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n"
    # If the client is already gone, the server reads EOF next and stops.
    with contextlib.suppress(OSError):
        _write_all(out_fd, line)
    handshake.params, handshake.pending = params, data[newline + 1 :]
    return handshake
