"""The `threadline` command: serve JSON-RPC on stdio (default), `schema`, `doctor`."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import __version__
from .backends.registry import BACKEND_IDS, SPECS

if TYPE_CHECKING:
    from .server.config import ServerConfig

__all__ = ["main"]

_DESCRIPTION = """\
threadline speaks newline-delimited JSON-RPC (the Codex app-server v2 core) on stdin/stdout
and drives coding-agent CLIs: {clis}, any other agent that speaks ACP
(`acp`), and the offline `mock`.
With no command it serves on stdio until stdin closes or it gets SIGTERM.

environment:
  AGENT_BACKEND        default backend for thread/start ({ids})
  BACKEND_CLI_PATH     use this CLI binary instead of the PATH lookup (acp: the agent)
  BACKEND_CLI_ARGS     the acp backend's agent arguments (split as a shell would)
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


def _setup_logging() -> None:
    import logging

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


def _add_listen_options(parser: Any) -> None:
    """Codex's `app-server` transport options."""
    parser.add_argument(
        "--listen",
        default="stdio://",
        metavar="URL",
        help="stdio:// (default), ws://IP:PORT (port 0: pick one; the bound URL is printed on "
        "stderr) or unix://PATH (see docs/remote.md)",
    )
    parser.add_argument(
        "--ws-auth", choices=["capability-token", "signed-bearer-token"], help="WebSocket auth"
    )
    parser.add_argument("--ws-token-file", metavar="PATH", help="capability-token file")
    parser.add_argument("--ws-token-sha256", metavar="HEX", help="the token's SHA-256 digest")
    parser.add_argument("--ws-shared-secret-file", metavar="PATH", help="HS256 JWT secret file")
    parser.add_argument("--ws-issuer", metavar="ISSUER", help="expected JWT issuer")
    parser.add_argument("--ws-audience", metavar="AUDIENCE", help="expected JWT audience")
    parser.add_argument(
        "--ws-max-clock-skew-seconds", type=int, metavar="SECONDS", help="JWT leeway (30)"
    )
    parser.add_argument(
        "--exit-when-idle",
        type=float,
        metavar="SECONDS",
        help="listeners: exit after SECONDS with no connection and no running turn",
    )


def _listen_setup(args: Any) -> tuple[Any, Any] | int:
    """(address, auth) from the options, or the exit status after saying what is wrong."""
    from .home import default_root
    from .remote.address import parse_listen
    from .remote.auth import AuthOptions, load_auth

    try:
        address = parse_listen(args.listen, str(default_root() / "app-server.sock"))
        auth = load_auth(
            AuthOptions(
                mode=args.ws_auth,
                token_file=args.ws_token_file,
                token_sha256=args.ws_token_sha256,
                shared_secret_file=args.ws_shared_secret_file,
                issuer=args.ws_issuer,
                audience=args.ws_audience,
                max_clock_skew=args.ws_max_clock_skew_seconds,
            )
        )
    except ValueError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2
    if not address.loopback and auth.mode is None:
        print(
            f"threadline: --listen {args.listen} binds a non-loopback address without "
            "authentication; add --ws-auth (see docs/remote.md) or bind 127.0.0.1 and use SSH",
            file=sys.stderr,
        )
        return 1
    if args.exit_when_idle is not None and not args.exit_when_idle > 0:
        print("threadline: --exit-when-idle needs a positive number of seconds", file=sys.stderr)
        return 2
    return address, auth


def _server_config() -> ServerConfig | None:
    """The server's configuration from the environment; None (said on stderr) when it is
    unusable: a bad setting, or a default backend whose CLI cannot run."""
    from .server.config import ConfigError, ServerConfig

    try:
        config = ServerConfig.from_env()
    except ConfigError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return None
    if config.backend_set:
        problem = _unusable_backend(config.default_backend, config.cli_path)
        if problem:
            print(f"threadline: {problem}", file=sys.stderr)
            return None
    return config


def _serve_listener(address: Any, auth: Any, exit_when_idle: float | None = None) -> int:
    """Serve on a WebSocket or unix-socket listener (several clients; see remote/serve.py)."""
    from .home import default_root

    config = _server_config()
    if config is None:
        return 2
    root = default_root()
    _setup_logging()
    if _has_ledgers(root / "run"):
        _reap_stale(root / "run")

    import trio

    from .backends.instances import create_backends
    from .procs.ledger import ProcessLedger, set_ledger
    from .remote.serve import ListenerServer
    from .remote.sockets import ListenError
    from .store import ThreadStore

    set_ledger(ProcessLedger(root / "run"))
    server = ListenerServer(
        config, ThreadStore(root), create_backends(), address, auth, exit_when_idle=exit_when_idle
    )
    try:
        trio.run(server.run)
    except ListenError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 1
    return 0


def _proxy(listen: str) -> int:
    from .home import default_root
    from .remote.address import parse_listen
    from .remote.proxy import proxy_main

    try:
        address = parse_listen(listen, str(default_root() / "app-server.sock"))
    except ValueError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2
    if address.kind == "stdio":
        print("threadline: proxy needs a unix:// or ws:// server to connect to", file=sys.stderr)
        return 2
    return proxy_main(address, os.environ.get("THREADLINE_WS_TOKEN") or None)


def _serve(ignored_options: tuple[str, ...] = ()) -> int:
    # Only light modules until `initialize` is answered (see server/handshake.py): a client
    # waits for that answer first, and the engine's imports cost more than the answer itself.
    from .home import default_root

    config = _server_config()
    if config is None:
        return 2
    root = default_root()
    run_dir = root / "run"
    # CLIs left running by a server that was SIGKILLed are killed before we answer anyone.
    # Usually there is no ledger to read, and nothing is imported for it.
    reaped = _has_ledgers(run_dir)
    if reaped:
        _setup_logging()
        _reap_stale(run_dir)
    from .procs import early

    # The CLI this server will most likely need starts now, while the engine loads.
    early.begin(root, run_dir)
    try:
        return _serve_engine(config, root, reaped, ignored_options)
    finally:
        early.discard()


def _serve_engine(
    config: ServerConfig, root: Path, reaped: bool, ignored_options: tuple[str, ...]
) -> int:
    from .server.handshake import answer_first_initialize

    handshake = answer_first_initialize(root, config.cli_path, config.default_backend)
    if handshake.signals and handshake.params is None and not handshake.pending:
        return 0  # signalled before the first request: nothing was started yet
    if not reaped:
        _setup_logging()
    if ignored_options:
        import logging

        logging.getLogger("threadline").warning(
            "ignoring codex options: %s", " ".join(ignored_options)
        )

    import trio

    from .backends.instances import create_backends
    from .procs import early
    from .procs.ledger import ProcessLedger, set_ledger
    from .server.app import Server, serve_stdio
    from .store import ThreadStore

    store = ThreadStore(root)
    set_ledger(early.ledger() or ProcessLedger(root / "run"))
    server = Server(
        config, store, create_backends(), max_request=config.max_request, handshake=handshake
    )
    trio.run(serve_stdio, server)
    early.discard()
    _exit_now(0)


def _exit_now(status: int) -> NoReturn:
    """Leave at once, once serving is over: the turns are on disk, every process group is
    gone and the protocol stream is closed. The interpreter's own teardown (freeing every
    loaded module's objects) would keep the process alive for another 0.1-0.4 s of CPU, which
    a client that waits for its child to exit (an editor closing a window) pays each time; it
    has nothing left to do but flush the logs."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if sys.getprofile() is not None:
        raise SystemExit(status)  # under a profiler (`python -m cProfile -o`): let it write
    os._exit(status)


def _unusable_backend(backend: str, cli_path: str | None) -> str | None:
    """Why the operator's chosen backend cannot run here (its CLI is missing or not
    executable), or None. Only the binary is checked: that costs no CLI start."""
    from .backends.kit.cli_binary import resolve_cli
    from .backends.registry import SPECS
    from .procs.executables import ProcessError

    command = cli_path or SPECS[backend].cli
    if command is None:
        return None
    try:
        resolve_cli(command)
    except ProcessError as exc:
        tried = cli_path or f"{command} on PATH={os.environ.get('PATH', '')}"
        return f"AGENT_BACKEND={backend} cannot be used (tried {tried}): {exc}"
    return None


def _has_ledgers(run_dir: Path) -> bool:
    try:
        return any(name.endswith(".json") for name in os.listdir(run_dir))
    except OSError:
        return False


def _reap_stale(run_dir: Path) -> None:
    from .procs.ledger import ProcessLedger

    ProcessLedger(run_dir).reap_stale()


def _schema(out: Path) -> int:
    from ._tools.schema import write_schemas

    for path in write_schemas(out):
        print(path)
    return 0


def _docs(out: Path, schemas: Path) -> int:
    from ._tools.docs import write_docs

    for path in write_docs(out, schemas):
        print(path)
    return 0


def _doctor() -> int:
    from functools import partial

    import trio

    from .backends.instances import create_backends
    from .invocation import command_name
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
        print(_doctor_line(info))
        if info.message:
            print(f"      {info.message}")
        for profile in info.profiles:
            print(f"      {_profile_line(profile)}")
    _doctor_profiles_file()
    _doctor_tmux([i.id for i in infos if "tui" in i.modes])
    # A backend that runs a configured command (acp) is usable once one is configured.
    usable = [i for i in infos if i.available and (i.path or not SPECS[i.id].command_setup)]
    selected = next(i for i in infos if i.id == config.default_backend)
    if config.backend_set and not selected.available:
        print(
            f"threadline: AGENT_BACKEND={config.default_backend} is not usable here: "
            f"{selected.message}",
            file=sys.stderr,
        )
        return 1
    if not usable:
        return 1
    ready = [i.id for i in usable if not (i.credentials or "").startswith("none")]
    agent = next((i for i in ready if i != "mock"), "mock")
    prompt = '"/text Hello from threadline!"' if agent == "mock" else '"Say hello"'
    print(
        f"\n{len(usable)} of {len(infos)} backends usable here "
        f"({', '.join(i.id for i in usable)}). "
        f"Try one: {command_name()} run --backend {agent} {prompt}"
    )
    return 0


def _profile_line(profile: Any) -> str:
    """A provider profile: usable or why not (names, never values)."""
    where = " ".join(f"{k}={v}" for k, v in (("model", profile.model), ("mode", profile.mode)) if v)
    head = f"profile {profile.name}" + (f" ({where})" if where else "")
    sets = f" sets {', '.join(profile.env)}" if profile.env else ""
    if profile.usable:
        return f"{head}: ok{sets}"
    return f"{head}: unusable: " + "; ".join(profile.problems)


def _doctor_profiles_file() -> None:
    from .profiles import ProfileError, load_profiles, profiles_path

    try:
        profiles = load_profiles(os.environ)
    except ProfileError as exc:
        print(f"\nprofiles: {exc}")
        return
    if profiles:
        print(f"\nprofiles: {len(profiles)} in {profiles_path(os.environ)}")


def _doctor_tmux(tui_backends: list[str]) -> None:
    """Whether the tui modes can run here (they need tmux)."""
    import shutil
    import subprocess

    if not tui_backends:
        return
    binary = shutil.which("tmux")
    if binary is None:
        print(
            f"\ntmux: not found: the tui mode ({', '.join(tui_backends)}) needs it; "
            "install it (e.g. `apt-get install tmux`)"
        )
        return
    try:
        done = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=10)
        version = done.stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        version = "?"
    print(f"\ntmux: {binary} ({version}): the tui mode can run ({', '.join(tui_backends)})")


def _doctor_line(info: Any) -> str:
    """One backend: usable or not, where, which version, its modes and credentials."""
    modes = []
    for mode in info.modes:
        caps = info.capabilities[mode]
        flags = ",".join(k for k in ("approvals", "interrupt", "resume") if getattr(caps, k))
        star = "*" if mode == info.default_mode else ""
        modes.append(f"{mode}{star}[{flags or 'none'}]")
    mark = "-- " if not info.available else "!! " if info.outdated else "ok "
    return (
        f"{mark}{info.id:9} path={info.path or '-'} version={info.version or '-'} "
        f"modes={' '.join(modes)}"
        + (f" credentials: {info.credentials}" if info.credentials else "")
    )


def _run(args: Any) -> int:
    from .terminal import RunOptions, run_main
    from .terminal.run import image_args, mcp_servers

    try:
        mcp_servers(args.mcp)
        images = image_args(args.image)
    except ValueError as exc:
        print(f"threadline: {exc}", file=sys.stderr)
        return 2

    return run_main(
        RunOptions(
            prompt=args.prompt,
            backend=args.backend,
            model=args.model,
            cwd=os.path.abspath(args.cwd) if args.cwd else os.getcwd(),
            resume=args.resume,
            json=args.json,
            approval_policy=args.approval_policy,
            mode=args.mode,
            mcp=args.mcp,
            images=images,
        )
    )


def _add_run_parser(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a turn in the terminal (interactive without a prompt)",
        description="Start threadline, open a thread and run the prompt, rendering the turn "
        "live and asking for approvals. Without a prompt, read prompts line by line (/help "
        "lists the commands between them: /model, /effort, /fork, /compact, /name). Ctrl-C "
        "cancels the running turn; a second Ctrl-C quits. Exit status: 0 completed, "
        "1 failed, 2 usage, 130 interrupted.",
    )
    run.add_argument("prompt", nargs="?", help="the prompt (omit for an interactive session)")
    run.add_argument("--backend", "-b", help="|".join(BACKEND_IDS))
    run.add_argument("--model", "-m", help="the model (default: the backend's)")
    run.add_argument("--cwd", "-C", help="the thread's working directory (default: here)")
    run.add_argument("--mode", help="the backend mode (e.g. stream|print for claude)")
    run.add_argument(
        "--approval-policy",
        choices=["untrusted", "on-request", "never"],
        help="when to ask (never: the agent runs tools without asking)",
    )
    run.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="give the agent an MCP server: NAME=COMMAND [ARGS…] (stdio) or NAME=URL (HTTP); "
        "repeatable",
    )
    run.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="PATH",
        help="attach an image file (or an http(s) URL) to the first prompt; repeatable",
    )
    run.add_argument("--resume", metavar="THREAD_ID", help="continue this thread")
    run.add_argument("--json", action="store_true", help="print raw notifications as JSON lines")


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if not args_list or args_list == ["serve"]:
        # How clients spawn us: straight to serving, argparse and logging imported later
        # (after the `initialize` answer, see _serve).
        return _serve()
    import argparse

    from .invocation import command_name

    parser = argparse.ArgumentParser(
        prog=command_name(),
        description=_DESCRIPTION.format(
            clis=", ".join(s.id for s in SPECS.values() if s.cli), ids="|".join(BACKEND_IDS)
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"threadline {__version__}")
    _add_listen_options(parser)
    sub = parser.add_subparsers(dest="command")
    _add_listen_options(sub.add_parser("serve", help="serve JSON-RPC (stdio by default)"))
    app_server = sub.add_parser(
        "app-server",
        help="`serve`, under `codex app-server`'s command line",
        description="Serve on stdio like `serve`, accepting `codex app-server`'s arguments so "
        "Codex clients can run threadline as their codex binary. Codex feature flags and "
        "config overrides are not threadline's: they are ignored (with a log warning).",
    )
    _add_listen_options(app_server)
    app_server.add_argument("-c", "--config", action="append", default=[], metavar="KEY=VALUE")
    app_server.add_argument("--enable", action="append", default=[], metavar="FEATURE")
    app_server.add_argument("--disable", action="append", default=[], metavar="FEATURE")
    proxy = sub.add_parser(
        "proxy",
        help="bridge stdio to a running listener server (e.g. `ssh host threadline proxy`)",
        description="Connect to a threadline server listening on a unix socket (default: the "
        "one `--listen unix://` creates in THREADLINE_HOME) or ws://IP:PORT, and bridge this "
        "process's stdin/stdout to it, one JSON-RPC message per line. THREADLINE_WS_TOKEN, if "
        "set, is sent as the bearer token.",
    )
    proxy.add_argument("--listen", default="unix://", metavar="URL", help="the server's URL")
    schema = sub.add_parser("schema", help="write the protocol's JSON Schemas")
    schema.add_argument("--out", type=Path, default=Path("schemas"), help="output directory")
    sub.add_parser("doctor", help="report which agent CLIs are usable here")
    docs = sub.add_parser("docs", help="write the generated docs pages (protocol, backends)")
    docs.add_argument("--out", type=Path, default=Path("docs"), help="output directory")
    docs.add_argument("--schemas", type=Path, default=Path("schemas"), help="schema directory")
    _add_run_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command in (None, "serve", "app-server"):
        setup = _listen_setup(args)
        if isinstance(setup, int):
            return setup
        if setup[0].kind != "stdio":
            return _serve_listener(*setup, exit_when_idle=args.exit_when_idle)
    if args.command in (None, "serve"):
        return _serve()
    if args.command == "app-server":
        ignored = [f"-c {c}" for c in args.config] + [f"--enable {f}" for f in args.enable]
        ignored += [f"--disable {f}" for f in args.disable]
        return _serve(tuple(ignored))
    _setup_logging()
    if args.command == "proxy":
        return _proxy(args.listen)
    if args.command == "schema":
        return _schema(args.out)
    if args.command == "doctor":
        return _doctor()
    if args.command == "docs":
        return _docs(args.out, args.schemas)
    return _serve()
