"""Claude Code backend.

Stream mode (default): one long-lived `claude` per thread speaking stream-json both ways, with
approvals over the control channel (`--permission-prompt-tool stdio`): each `turn/start` writes
one user message; `can_use_tool` control requests become our approval requests; interrupt is
the `interrupt` control request, and the same process serves the next turn.

tui mode (`config.mode: "tui"`): the interactive claude in a tmux session (tui.py).

Print mode (`config.mode: "print"`): `claude -p` per turn (the user message on stdin),
`--resume` for later turns, approvals by policy only, cancel kills the process group.

Facts (claude 2.1.197, reference/claude-code.md; rechecked on 2.1.332): the CLI exits 1 after
an interrupted or failed last turn, so turn status comes from `result` lines, never from exit
codes; `--dangerously-skip-permissions` is refused as root. 2.1.197 resumed a session only from
its original cwd; 2.1.332 resumes it from any (a new cwd is a restart, see spec.py).
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

from ... import protocol as p
from .. import base as b
from ..kit.native import NativeSession
from ..kit.spawn import running
from .native import claude_sessions
from .print import ClaudePrintSession
from .spec import SPEC
from .stream import ClaudeStreamSession
from .tui import open_claude_tui

__all__ = ["ClaudeBackend"]

log = logging.getLogger("threadline.backend.claude")

_SESSION_ID = re.compile(r"[0-9A-Fa-f-]{36}\Z")


class ClaudeBackend(b.Backend):
    honours_max_turns = True
    honours_allowed_tools = True

    def __init__(self) -> None:
        super().__init__(SPEC)
        #: Session ids recorded for a thread whose transcript the CLI never wrote (it was
        #: killed first): `--resume` of them fails, so they restart under the same id.
        self._unsaved: set[str] = set()
        #: The stream sessions open now (`list_models` asks their claude's model list).
        self._live: list[ClaudeStreamSession] = []

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == "print":
            yield ClaudePrintSession(settings, binary, self._unsaved)
            return
        if settings.mode == "tui":
            async with open_claude_tui(settings, binary, self._unsaved) as tui:
                yield tui
            return
        session = ClaudeStreamSession(settings, binary, self._unsaved)
        async with running(session.run_process, session.close):
            self._live.append(session)
            try:
                yield session
            finally:
                self._live.remove(session)

    async def list_models(self) -> list[p.Model]:
        """The models a running claude listed in its `initialize` answer (its aliases, what
        each stands for now, their efforts); the spec's aliases while none runs (starting
        one only to ask would cost a second)."""
        for session in self._live:
            if session.models:
                return list(session.models)
        return self.models()

    def session_files(self, env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
        """Claude Code's transcript of the session, `<config>/projects/<key>/<id>.jsonl`, in
        whichever project directory claude filed it: the key is the session's first cwd (or
        its git root), not necessarily the thread's cwd now."""
        if not _SESSION_ID.match(session_id):
            return []
        home = env.get("HOME") or os.path.expanduser("~")
        config = env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
        pattern = os.path.join(glob.escape(config), "projects", "*", f"{session_id}.jsonl")
        return sorted(glob.glob(pattern))

    def native_sessions(self, env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
        return claude_sessions(env, cwd)


def create() -> ClaudeBackend:
    return ClaudeBackend()
