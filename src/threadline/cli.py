"""The `threadline` command: serve JSON-RPC on stdio (default), `schema`, `doctor`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from functools import partial
from pathlib import Path

import trio

from . import __version__

__all__ = ["main"]

_DESCRIPTION = """\
threadline speaks newline-delimited JSON-RPC (the Codex app-server v2 core) on stdin/stdout
and drives coding-agent CLIs: claude, codex, gemini, opencode (and the offline `mock`).
With no command it serves on stdio until stdin closes or it gets SIGTERM.

environment:
  AGENT_BACKEND        default backend for thread/start (claude|codex|gemini|opencode|mock)
  BACKEND_CLI_PATH     use this CLI binary instead of the PATH lookup
  BACKEND_MODEL        default model for new threads
  BACKEND_MAX_TURNS    agent turn limit per request (default 25)
  ALLOWED_TOOLS        comma-separated tools the CLI may use without asking
  BACKEND_TURN_TIMEOUT seconds before a turn fails with "Query timed out"
  THREADLINE_APPROVAL_TIMEOUT  seconds before an unanswered approval is declined
  THREADLINE_HOME      state directory (default: the platform's user data dir)
  THREADLINE_LOG_LEVEL, THREADLINE_LOG_FILE   logging (stderr by default)
  THREADLINE_MAX_REQUEST_BYTES  longest accepted request line in bytes (default 16777216);
                       a longer line is answered with a -32600 error and skipped
"""

ENV_MAX_REQUEST = "THREADLINE_MAX_REQUEST_BYTES"


def _max_request_bytes(default: int) -> int:
    """The request line cap from THREADLINE_MAX_REQUEST_BYTES (ValueError if malformed)."""
    raw = os.environ.get(ENV_MAX_REQUEST, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_MAX_REQUEST}={raw!r} is not an integer (bytes)") from None
    if value <= 0:
        raise ValueError(f"{ENV_MAX_REQUEST}={raw!r} must be > 0 (bytes)")
    return value


def _setup_logging() -> None:
    raw_level = os.environ.get("THREADLINE_LOG_LEVEL", "WARNING").strip().upper()
    # Only real level names (or numbers): getattr(logging, name) also found non-levels such as
    # BASIC_FORMAT, and setLevel() then crashed at start-up.
    level = logging.getLevelNamesMapping().get(raw_level)
    if level is None and raw_level.isdigit():
        level = int(raw_level)
    handler: logging.Handler
    log_file = os.environ.get("THREADLINE_LOG_FILE")
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING if level is None else level)
    if level is None:
        logging.getLogger("threadline").warning(
            "THREADLINE_LOG_LEVEL=%r is not a logging level; using WARNING", raw_level
        )


def _serve() -> int:
    from .backends.registry import create_backends
    from .rpc.connection import DEFAULT_MAX_REQUEST
    from .server.app import Server, serve_stdio
    from .server.config import ConfigError, ServerConfig
    from .store import ThreadStore

    try:
        config = ServerConfig.from_env()
        max_request = _max_request_bytes(DEFAULT_MAX_REQUEST)
    except (ConfigError, ValueError) as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2
    server = Server(config, ThreadStore.from_env(), create_backends(), max_request=max_request)
    trio.run(serve_stdio, server)
    return 0


def _schema(out: Path) -> int:
    from .schema import write_schemas

    for path in write_schemas(out):
        print(path)
    return 0


def _docs(out: Path, schemas: Path) -> int:
    from .docgen import write_docs

    for path in write_docs(out, schemas):
        print(path)
    return 0


def _doctor() -> int:
    from .backends.registry import create_backends
    from .server.app import backend_infos
    from .server.config import ConfigError, ServerConfig

    try:
        config = ServerConfig.from_env()
    except ConfigError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2
    infos = trio.run(
        partial(backend_infos, cli_path_for=config.default_backend),
        create_backends(),
        config.cli_path,
    )
    for info in infos:
        caps = info.capabilities[info.default_mode]
        flags = ",".join(k for k in ("approvals", "interrupt", "resume") if getattr(caps, k))
        mark = "ok " if info.available else "-- "
        print(
            f"{mark}{info.id:9} path={info.path or '-'} version={info.version or '-'} "
            f"modes={'/'.join(info.modes)} capabilities={flags or 'none'}"
            + (f" credentials: {info.credentials}" if info.credentials else "")
            + (f"  ({info.message})" if info.message else "")
        )
    selected = next(i for i in infos if i.id == config.default_backend)
    if not selected.available:
        print(
            f"threadline: AGENT_BACKEND={config.default_backend} is not usable here",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="threadline",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"threadline {__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="serve JSON-RPC on stdin/stdout (the default)")
    schema = sub.add_parser("schema", help="write the protocol's JSON Schemas")
    schema.add_argument("--out", type=Path, default=Path("schemas"), help="output directory")
    sub.add_parser("doctor", help="report which agent CLIs are usable here")
    docs = sub.add_parser("docs", help="write the generated docs pages (protocol, backends)")
    docs.add_argument("--out", type=Path, default=Path("docs"), help="output directory")
    docs.add_argument("--schemas", type=Path, default=Path("schemas"), help="schema directory")
    args = parser.parse_args(argv)
    _setup_logging()
    if args.command == "schema":
        return _schema(args.out)
    if args.command == "doctor":
        return _doctor()
    if args.command == "docs":
        return _docs(args.out, args.schemas)
    return _serve()
