"""Deleting an OpenCode session (`thread/delete` with `deleteBackendSession`): OpenCode keeps
sessions in its SQLite database, not in files of their own, so its own command removes one
(`opencode session delete <id>`, 1.18.33), with the environment that names its data dir; and
listing them, from its SQLite database (`$XDG_DATA_HOME/opencode/opencode.db`, or `OPENCODE_DB`)."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import sqlite3
import subprocess
from collections.abc import Mapping
from typing import Literal

import trio

from ...procs.executables import ProcessError
from ..kit.cli_binary import resolve_cli
from ..kit.native import NativeMessage, NativeSession, newest_first, preview_of

__all__ = ["delete_session", "list_sessions"]

_SAFE_ID = re.compile(r"ses_[A-Za-z0-9]+\Z")
#: How long `opencode session delete` may take (it boots OpenCode: seconds).
DELETE_TIMEOUT = 60.0

log = logging.getLogger("threadline.backend.opencode")


async def delete_session(env: Mapping[str, str], cwd: str, session_id: str) -> str | None:
    """None once the session is gone, else why not (a warning for the client)."""
    if not _SAFE_ID.match(session_id):
        return f"not an OpenCode session id: {session_id!r}; its session is kept"
    try:
        binary = resolve_cli("opencode", env)
    except ProcessError as exc:
        return f"cannot delete the OpenCode session: {exc}"
    argv = [binary, "session", "delete", session_id]
    run_env = {**env, "PWD": cwd, "OPENCODE_DISABLE_AUTOUPDATE": "1"}
    with trio.move_on_after(DELETE_TIMEOUT):
        done = await trio.run_process(
            argv,
            cwd=cwd,
            env=run_env,
            check=False,
            capture_stdout=True,
            capture_stderr=True,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode == 0:
            return None
        why = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        return f"opencode session delete {session_id} failed: {why or done.returncode}"
    return f"opencode session delete {session_id} took over {DELETE_TIMEOUT:.0f} s; stopped"


_SESSIONS = (
    "SELECT id, directory, title, time_created, time_updated, version FROM session"
    " WHERE parent_id IS NULL"
)
_FIRST_PROMPT = (
    "SELECT p.data FROM part p JOIN message m ON p.message_id = m.id WHERE p.session_id = ?"
    " AND json_extract(m.data, '$.role') = 'user' AND json_extract(p.data, '$.type') = 'text'"
    " ORDER BY p.time_created LIMIT 1"
)


_CONVERSATION = (
    "SELECT json_extract(m.data, '$.role'), p.data, p.time_created FROM part p"
    " JOIN message m ON p.message_id = m.id WHERE p.session_id = ?"
    " AND json_extract(p.data, '$.type') = 'text' AND json_extract(p.data, '$.synthetic') IS NOT 1"
    " ORDER BY m.time_created, p.time_created"
)


def _conversation(path: str, session_id: str) -> list[NativeMessage]:
    """The session's text parts, the person's and the agent's, oldest first."""
    found = []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            for role, data, created in db.execute(_CONVERSATION, (session_id,)):
                text = json.loads(data).get("text")
                if role in ("user", "assistant") and isinstance(text, str) and text.strip():
                    who: Literal["user", "agent"] = "user" if role == "user" else "agent"
                    found.append(NativeMessage(who, text, int(created) // 1000))
    except (sqlite3.Error, TypeError, ValueError, AttributeError) as exc:
        log.warning("cannot read OpenCode session %s from %s: %s", session_id, path, exc)
    return found


def _database(env: Mapping[str, str]) -> str:
    if env.get("OPENCODE_DB"):
        return env["OPENCODE_DB"]
    home = env.get("HOME") or os.path.expanduser("~")
    data = env.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    return os.path.join(data, "opencode", "opencode.db")


def _prompt(db: sqlite3.Connection, session_id: str) -> str:
    row = db.execute(_FIRST_PROMPT, (session_id,)).fetchone()
    try:
        text = json.loads(row[0]).get("text") if row else None
    except (ValueError, AttributeError):
        return ""
    # `opencode run` stores its message argument quoted.
    return preview_of(text.strip('"')) if isinstance(text, str) else ""


def list_sessions(env: Mapping[str, str], cwd: str | None) -> list[NativeSession]:
    """The sessions in OpenCode's database (its top-level ones: sub-agents' belong to their
    parent), of `cwd` or all, newest first; [] when there is none or it cannot be read.
    Blocking: run it in a worker thread."""
    path = _database(env)
    if not os.path.isfile(path):
        return []
    found = []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            for sid, directory, title, created, updated, version in db.execute(_SESSIONS):
                if cwd is not None and directory != cwd:
                    continue
                found.append(
                    NativeSession(
                        id=sid,
                        cwd=directory,
                        created_at=int(created) // 1000,
                        updated_at=int(updated) // 1000,
                        preview=_prompt(db, sid) or preview_of(title or ""),
                        cli_version=version or "",
                        messages=functools.partial(_conversation, path, sid),
                    )
                )
    except (sqlite3.Error, TypeError, ValueError) as exc:
        log.warning("cannot read OpenCode's sessions from %s: %s", path, exc)
        return []
    return newest_first(found)
