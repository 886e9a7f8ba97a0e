"""How an interactive gemini reports to threadline (tui mode): its hooks and its settings.

Gemini CLI 0.61.0 has command hooks only (no HTTP hooks). Each hook runs a tiny Python
program (`_SHIM`, no site packages: ~50 ms) that POSTs the hook's JSON input to threadline's
endpoint on 127.0.0.1 (kit/hook_http.py) and prints the answer. The endpoint's URL and token
are in a 0600 file of a 0700 directory of the session's, next to the program: no secret in
any argv or environment. When threadline cannot be reached the program answers
`BeforeTool` with a deny (fail closed) and the others with `{}`.

gemini takes no settings on its command line, and a system settings file
(`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) is skipped unless it and every directory above it are
root's and not writable by others (measured: "Skipping system settings file ... Parent
directory '/tmp' is insecure"). So gemini runs with a home of its own (`GEMINI_CLI_HOME`, a
0700 directory of the session's) whose `.gemini/` links every entry of the real
`~/.gemini/` (sessions, credentials, the project map, ...) but `settings.json`: that one is
the user's settings plus
- the hooks: `SessionStart` (gemini is up), `BeforeAgent` (`prompt`, `session_id`,
  `transcript_path`: a prompt was submitted), `BeforeTool` (`tool_name`, `tool_input`, with no
  matcher: every tool call waits for threadline's decision; gemini runs with
  `--approval-mode yolo`, as no hook can *allow* a call that gemini would ask about, only deny
  it), `AfterTool` (`tool_response`), `AfterAgent` (`prompt_response`: the turn completed);
- `general.sessionRetention.enabled: false`: else a session resumed in a later minute than
  it began is deleted by gemini's next start (a header-only duplicate file makes its cleanup
  take the session as unresumable).
A tui pane is interactive, but gemini takes `CI=true` or `GITHUB_ACTIONS=true` as "headless"
and exits once its empty stdin is read: such a variable is passed as "1" (still set for the
commands gemini runs, which test for presence).
Sessions are written through the link to the real `~/.gemini/tmp`, so the other modes (and
a person's gemini) see them. A file gemini creates at the top of `~/.gemini/` while it runs
(the project map on a first run) stays in the session's directory and goes with it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .. import base as b
from .invocation import _env, _model_flags

__all__ = ["gemini_tui_argv", "gemini_tui_env", "hook_directory", "write_hooks"]

log = logging.getLogger("threadline.backend.gemini")

_HOME_VARIABLE = "GEMINI_CLI_HOME"
_EVENTS = ("SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent")
#: ms gemini waits for a hook: `BeforeTool` waits for the client's decision.
_GATE_TIMEOUT = 7 * 24 * 3600 * 1000
_TIMEOUT = 60_000
_SHIM = """\
import http.client, json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "endpoint.json")) as f:
    e = json.load(f)
body = sys.stdin.buffer.read()
event = sys.argv[1]
try:
    c = http.client.HTTPConnection("127.0.0.1", e["port"], timeout=None)
    c.request("POST", "/hook/" + event, body, {
        "Authorization": "Bearer " + e["token"], "Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    if r.status != 200:
        raise OSError(r.status)
except Exception:
    deny = b'{"decision":"deny","reason":"threadline did not decide"}'
    out = deny if event == "BeforeTool" else b"{}"
sys.stdout.buffer.write(out)
"""


@contextmanager
def hook_directory() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="threadline-gemini-")
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("gemini's system settings %s are unreadable (%s): left out", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def _gemini_dir(env: Mapping[str, str]) -> str:
    home = env.get(_HOME_VARIABLE) or env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini")


def settings_with_hooks(directory: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The user's settings plus threadline's hooks and no session retention."""
    data = _load(os.path.join(_gemini_dir(env), "settings.json"))
    general = data.get("general")
    if not isinstance(general, dict):
        general = data["general"] = {}
    general["sessionRetention"] = {"enabled": False}
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        hooks = data["hooks"] = {}
    shim = os.path.join(directory, "hook.py")
    for event in _EVENTS:
        command = f"{sys.executable} -I -S {shim} {event}"
        timeout = _GATE_TIMEOUT if event == "BeforeTool" else _TIMEOUT
        hook = {"type": "command", "command": command, "timeout": timeout}
        entries = hooks.get(event)
        hooks[event] = [*(entries if isinstance(entries, list) else []), {"hooks": [hook]}]
    return data


def _shadow(directory: str, env: Mapping[str, str]) -> None:
    """`<directory>/home/.gemini`: the real one's entries linked, `settings.json` written."""
    real = _gemini_dir(env)
    os.makedirs(os.path.join(real, "tmp"), exist_ok=True)  # (sessions: written through)
    shadow = os.path.join(directory, "home", ".gemini")
    os.makedirs(shadow, mode=0o700)
    for name in os.listdir(real):
        if name != "settings.json":
            os.symlink(os.path.join(real, name), os.path.join(shadow, name))
    settings = json.dumps(settings_with_hooks(directory, env))
    _private(os.path.join(shadow, "settings.json"), settings)


def write_hooks(directory: str, port: int, token: str, env: Mapping[str, str]) -> None:
    _private(os.path.join(directory, "endpoint.json"), json.dumps({"port": port, "token": token}))
    _private(os.path.join(directory, "hook.py"), _SHIM)
    _shadow(directory, env)


def gemini_tui_argv(binary: str, settings: b.SessionSettings) -> list[str]:
    argv = [binary, "--approval-mode", "yolo", *_model_flags(settings)]
    if settings.backend_session_id:
        return [*argv, "--resume", settings.backend_session_id]
    return [*argv, "--session-id", str(uuid.uuid4())]


#: gemini 0.61.0 runs headless (reads stdin once, then exits) when one of these is "true".
_HEADLESS_MARKERS = ("CI", "GITHUB_ACTIONS")


def gemini_tui_env(settings: b.SessionSettings, directory: str) -> dict[str, str]:
    env = _env(settings)
    env.setdefault("GEMINI_CLI_TRUST_WORKSPACE", "true")
    for name in _HEADLESS_MARKERS:
        if env.get(name) == "true":
            env[name] = "1"  # (still set for the commands gemini runs; not gemini's "true")
    env[_HOME_VARIABLE] = os.path.join(directory, "home")
    return env
