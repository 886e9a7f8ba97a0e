"""How opencode is run: environment and permissions."""

from __future__ import annotations

import json
import logging
from typing import Any

from .. import base as b

log = logging.getLogger("threadline.backend.opencode")

_ASK = {"bash": "ask", "edit": "ask", "webfetch": "ask"}


_ALLOW = {
    "bash": "allow",
    "edit": "allow",
    "webfetch": "allow",
    "external_directory": "allow",
    "doom_loop": "allow",
}


def _env(settings: b.SessionSettings) -> dict[str, str]:
    env = dict(settings.env)
    env["PWD"] = settings.cwd  # OpenCode resolves its directory from $PWD first
    env.setdefault("OPENCODE_DISABLE_AUTOUPDATE", "1")
    permission: dict[str, Any] = {}
    raw = env.get("OPENCODE_PERMISSION")
    if raw:
        try:
            parsed = json.loads(raw)
            if isinstance(parsed, dict):
                permission.update(parsed)
        except json.JSONDecodeError:
            log.warning("ignoring an invalid OPENCODE_PERMISSION")
    permission.update(_ALLOW if settings.approval_policy == "never" else _ASK)
    env["OPENCODE_PERMISSION"] = json.dumps(permission, sort_keys=True)
    if settings.model and settings.model != "default":
        content: dict[str, Any] = {}
        if env.get("OPENCODE_CONFIG_CONTENT"):
            try:
                loaded = json.loads(env["OPENCODE_CONFIG_CONTENT"])
                content = loaded if isinstance(loaded, dict) else {}
            except json.JSONDecodeError:
                content = {}
        content["model"] = settings.model
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(content)
    return env
