"""What the tui mode tests (tests/e2e/test_*_tui.py) ask of tmux and of /proc: the person's
view of a thread's pane, the tmux servers left, an approval answer that records its request."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any

from tests.support.cli_env import cmdline
from tests.support.client import Message

__all__ = ["answer", "environ", "screen", "tmux", "tmux_servers"]


def tmux(socket: str, *args: str) -> str:
    """A tmux command on threadline's socket, as a person would type it; its output (its
    error when it fails)."""
    done = subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False
    )
    return done.stdout or done.stderr


def screen(socket: str, session: str) -> str:
    """What the pane shows (wrapped lines joined)."""
    return tmux(socket, "capture-pane", "-p", "-J", "-t", session)


def tmux_servers(socket: str) -> list[int]:
    """Live tmux server processes on `socket`."""
    return [
        pid
        for pid in (int(n) for n in os.listdir("/proc") if n.isdigit())
        if (argv := cmdline(pid)) and "tmux" in os.path.basename(argv[0]) and socket in argv
    ]


def environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def answer(decision: str, seen: list[Message]) -> Callable[[Message], Any]:
    """An approval handler answering `decision`, recording each request in `seen`."""

    def on_request(message: Message) -> Any:
        seen.append(message)
        return {"decision": decision}

    return on_request
