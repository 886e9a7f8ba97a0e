"""Deleting an OpenCode session (`thread/delete` with `deleteBackendSession`): OpenCode keeps
sessions in its SQLite database, not in files of their own, so its own command removes one
(`opencode session delete <id>`, 1.18.33), with the environment that names its data dir."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping

import trio

from ...procs.executables import ProcessError
from ..kit.cli_binary import resolve_cli

__all__ = ["delete_session"]

_SAFE_ID = re.compile(r"ses_[A-Za-z0-9]+\Z")
#: How long `opencode session delete` may take (it boots OpenCode: seconds).
DELETE_TIMEOUT = 60.0


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
