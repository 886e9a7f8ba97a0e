"""Where CLIs keep a session's own files, for `thread/delete` with `deleteBackendSession`.

Only files that name the session id are touched, and only under the CLI's own state
directory (the thread's environment decides it, as for the CLI itself)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import trio

__all__ = ["claude_session_files", "codex_rollouts", "remove_files"]

_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def claude_session_files(env: Mapping[str, str], cwd: str, session_id: str) -> list[str]:
    """Claude Code's transcript of `session_id`: `<config>/projects/<cwd key>/<id>.jsonl`
    (the key is the cwd with every non-alphanumeric character as `-`)."""
    if not _SAFE_ID.match(session_id):
        return []
    config = env.get("CLAUDE_CONFIG_DIR") or os.path.join(_home(env), ".claude")
    key = re.sub(r"[^A-Za-z0-9]", "-", cwd)
    path = os.path.join(config, "projects", key, f"{session_id}.jsonl")
    return [path] if os.path.isfile(path) else []


def codex_rollouts(env: Mapping[str, str], thread_id: str) -> list[str]:
    """Codex's rollout files of `thread_id`: `$CODEX_HOME/{sessions,archived_sessions}/**/
    rollout-<time>-<id>.jsonl`."""
    if not _SAFE_ID.match(thread_id):
        return []
    root = env.get("CODEX_HOME") or os.path.join(_home(env), ".codex")
    found = []
    for top in ("sessions", "archived_sessions"):
        for folder, _dirs, files in os.walk(os.path.join(root, top)):
            found += [
                os.path.join(folder, name)
                for name in files
                if name.startswith("rollout-") and name.endswith(f"-{thread_id}.jsonl")
            ]
    return found


async def remove_files(paths: list[str]) -> list[str]:
    """Remove `paths`; the ones that could not be removed, with why."""
    problems = []
    for path in paths:
        try:
            await trio.Path(path).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
    return problems
