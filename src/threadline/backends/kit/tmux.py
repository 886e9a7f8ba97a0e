"""Driving an agent CLI's own interactive interface in tmux (tui modes).

One tmux server per threadline server, on its own socket (`tmux -L threadline-<pid>`, no user
config: `-f /dev/null`); one tmux session per thread, named after it. The rules that hold:
- The tmux server runs with the thread's environment minus anything secret-looking (it is a
  daemon others may ask with `show-environment`); a pane's program gets the thread's full
  environment from a 0600 file in a 0700 directory that a tiny shim reads, deletes and then
  `exec`s the CLI with (keeping tmux's TERM): no secret in any argv, none in tmux.
- The server is recorded in the process ledger as a group of its own; each pane's program is
  adopted as a group (procs/adopted.py), so a crashed threadline's leftovers are reaped and a
  closed session leaves nothing behind. The server is killed with its last session.
- Input goes in as a bracketed paste (`load-buffer` + `paste-buffer -p`), then Enter: the CLI
  sees pasted text, never keystrokes it could take as commands.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from ...procs.adopted import adopt_group_process
from ...procs.group import GroupProcess
from ...procs.ledger import current_ledger, proc_stat
from .. import base as b

__all__ = ["TmuxPane", "open_tmux_pane", "socket_name"]

log = logging.getLogger("threadline.tmux")

#: Names whose values stay out of the tmux server's environment (procs/early.py's words).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
#: What the pane's program keeps of tmux's environment: the terminal tmux emulates.
_TERMINAL = ("TERM", "COLORTERM", "TMUX", "TMUX_PANE")
#: The shim a pane runs: read the environment file, delete it, exec the CLI with it.
_SHIM = (
    "import json,os,sys\n"
    "p=sys.argv[1]\n"
    "with open(p) as f: env=json.load(f)\n"
    "os.unlink(p)\n"
    f"env.update((k,os.environ[k]) for k in {_TERMINAL!r} if k in os.environ)\n"
    "os.execvpe(sys.argv[2],sys.argv[2:],env)\n"
)
_WIDTH, _HEIGHT = 200, 50
_TMUX_TIMEOUT = 10.0


def socket_name() -> str:
    """This threadline server's tmux socket (`tmux -L <name>`)."""
    return f"threadline-{os.getpid()}"


def _public_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not any(w in k.upper() for w in _SECRET_WORDS)}


async def _tmux(
    socket: str, *args: str, env: Mapping[str, str] | None = None, stdin: bytes = b""
) -> str:
    """Run one tmux client command; its stdout. BackendError when it fails."""
    binary = shutil.which("tmux", path=(env or os.environ).get("PATH"))
    if binary is None:
        raise b.BackendError("tui mode needs tmux; install it (e.g. `apt-get install tmux`)")
    argv = [binary, "-L", socket, "-f", os.devnull, *args]
    with trio.fail_after(_TMUX_TIMEOUT):
        done = await trio.run_process(
            argv, stdin=stdin, capture_stdout=True, capture_stderr=True, check=False, env=env
        )
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()
        raise b.BackendError(f"tmux {args[0]} failed: {error or done.returncode}")
    return str(done.stdout.decode(errors="replace"))


class _Server:
    """The tmux server of one socket: started by the first session, killed with the last."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.lock = trio.Lock()
        self.sessions = 0
        self.pid: int | None = None

    async def started(self, env: Mapping[str, str]) -> None:
        """Record the server (once it runs) in the process ledger."""
        if self.pid is not None:
            return
        self.pid = int((await _tmux(self.socket, "display-message", "-p", "#{pid}")).strip())
        ledger = current_ledger()
        if ledger is not None:
            ledger.add_group(self.pid)

    async def stop(self) -> None:
        """Kill the server (its last session is gone) and make sure it is gone."""
        with contextlib.suppress(b.BackendError, trio.TooSlowError, OSError):
            await _tmux(self.socket, "kill-server")
        pid, self.pid = self.pid, None
        if pid is None:
            return
        await _kill_leader(pid)
        ledger = current_ledger()
        if ledger is not None:
            ledger.remove_group(pid)


async def _kill_leader(pid: int, grace: float = 2.0) -> None:
    """Wait up to `grace` s for the group `pid` leads to go; then SIGKILL it."""
    st = proc_stat(pid)
    if st is None:
        return
    start = st[2]
    with trio.move_on_after(grace):
        # (polling /proc: the server is not our child)
        while (now := proc_stat(pid)) is not None and now[2] == start and now[0] not in "ZX":  # noqa: ASYNC110
            await trio.sleep(0.02)
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


_SERVERS: dict[str, _Server] = {}


@dataclass
class TmuxPane:
    """A thread's tmux session (one window, one pane) and its program's process group."""

    socket: str
    session: str
    #: The pane's program (the CLI), adopted as a process group.
    proc: GroupProcess

    @property
    def attach(self) -> b.TuiAttach:
        return b.TuiAttach(self.socket, self.session)

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    async def tmux(self, *args: str, stdin: bytes = b"") -> str:
        return await _tmux(self.socket, *args, stdin=stdin)

    async def paste(self, text: str) -> bool:
        """`text` as one bracketed paste (tmux buffer named after the session); False when
        the pane's program has exited (nothing pasted)."""
        buffer = f"tl-{self.session}"
        await self.tmux("load-buffer", "-b", buffer, "-", stdin=text.encode())
        # (tmux 3.3a's server dies of a paste into a dead pane, taking every session with
        # it: the check runs inside the server, with the paste)
        await self.tmux(
            *("if-shell", "-F", "-t", self.session, "#{pane_dead}"),
            f"delete-buffer -b {buffer}",
            f"paste-buffer -p -d -b {buffer} -t {self.session}",
        )
        return await self.flag("pane_dead") != "1"

    async def ended(self) -> str:
        """ "exit status N" / "signal N" once the pane's program has ended, else "" (also when
        tmux has not reaped it: tmux 3.3a now and then leaves a quick program a zombie)."""
        ended = ""
        for _ in range(20):  # (tmux learns the status a moment after the pane has gone dead)
            ended = await self.flag("?pane_dead,#{pane_dead_status}/#{pane_dead_signal},")
            if ended.strip("/") or self.alive:
                break
            await trio.sleep(0.05)
        status, _, signal = ended.partition("/")
        return f"exit status {status}" if status else f"signal {signal}" if signal else ""

    async def keys(self, *keys: str) -> None:
        """tmux key names (`Enter`, `Escape`, ...)."""
        await self.tmux("send-keys", "-t", self.session, *keys)

    async def capture(self, history: bool = False) -> str:
        """What the pane shows now (`history`: and what scrolled off it)."""
        scroll = ("-S", "-") if history else ()
        return await self.tmux("capture-pane", "-p", *scroll, "-t", self.session)

    async def flag(self, name: str) -> str:
        """A tmux format of the pane (`alternate_on`, ...)."""
        return (
            await self.tmux("display-message", "-p", "-t", self.session, f"#{{{name}}}")
        ).strip()


def _env_file(env: Mapping[str, str]) -> tuple[str, str]:
    """(a 0700 directory, a 0600 file in it holding `env`) for the pane's shim."""
    directory = tempfile.mkdtemp(prefix="threadline-tui-")
    path = os.path.join(directory, "env.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(env), f)
    return directory, path


async def _new_session(
    server: _Server, name: str, argv: Sequence[str], cwd: str, env: Mapping[str, str], path: str
) -> int:
    """Start `argv` in a new detached session; the pane program's pid."""
    public = _public_env(env)
    async with server.lock:
        out = await _tmux(
            server.socket,
            "new-session",
            *("-d", "-s", name, "-x", str(_WIDTH), "-y", str(_HEIGHT), "-c", cwd),
            *("-P", "-F", "#{pane_pid}"),
            sys.executable,
            *("-I", "-S", "-c", _SHIM, path, *argv),
            # (a program that ends leaves its last screen: an error's reason)
            *(";", "set-option", "-t", name, "remain-on-exit", "on"),
            env=public,
        )
        server.sessions += 1
        try:
            await server.started(public)
        except BaseException:
            server.sessions -= 1
            raise
    return int(out.strip())


async def _end_session(server: _Server, name: str) -> None:
    with trio.CancelScope(shield=True):
        async with server.lock:
            with contextlib.suppress(b.BackendError, trio.TooSlowError, OSError):
                await _tmux(server.socket, "kill-session", "-t", name)
            server.sessions -= 1
            if server.sessions <= 0:
                await server.stop()  # (the object stays: the next session starts it again)


@asynccontextmanager
async def open_tmux_pane(
    name: str, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]
) -> AsyncIterator[TmuxPane]:
    """`argv` running in tmux session `name` (cwd, env), on this server's socket; leaving the
    block kills the session, everything its program started, and the server with its last
    session."""
    if not os.path.isdir(cwd):
        raise b.BackendError(f"working directory {cwd} does not exist")
    socket = socket_name()
    server = _SERVERS.setdefault(socket, _Server(socket))
    directory, path = _env_file(env)
    try:
        try:
            pid = await _new_session(server, name, argv, cwd, env, path)
        except subprocess.SubprocessError as exc:
            raise b.BackendError(f"cannot start tmux: {exc}") from None
        try:
            async with adopt_group_process(pid, os.path.basename(argv[0])) as proc:
                yield TmuxPane(socket, name, proc)
                with (
                    trio.CancelScope(shield=True),
                    contextlib.suppress(b.BackendError, trio.TooSlowError, OSError),
                ):
                    await _tmux(socket, "kill-session", "-t", name)  # (SIGHUP: claude ends)
        finally:
            await _end_session(server, name)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
