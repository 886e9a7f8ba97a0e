"""How opencode is run: environment and permissions."""

from __future__ import annotations

import json
import logging
from typing import Any

from .. import base as b
from .mcp import mcp_config, permission_rules

log = logging.getLogger("threadline.backend.opencode")

_ASK = {"bash": "ask", "edit": "ask", "webfetch": "ask", "websearch": "ask"}


_ALLOW = {
    "bash": "allow",
    "edit": "allow",
    "webfetch": "allow",
    "external_directory": "allow",
    "doom_loop": "allow",
}


def _user_permission(env: dict[str, str]) -> dict[str, Any]:
    raw = env.get("OPENCODE_PERMISSION")
    if raw:
        try:
            parsed = json.loads(raw)
            if isinstance(parsed, dict):
                return parsed
        except json.JSONDecodeError:
            pass
        log.warning("ignoring an invalid OPENCODE_PERMISSION")
    return {}


def _config_content(env: dict[str, str]) -> dict[str, Any]:
    if env.get("OPENCODE_CONFIG_CONTENT"):
        try:
            loaded = json.loads(env["OPENCODE_CONFIG_CONTENT"])
            return loaded if isinstance(loaded, dict) else {}
        except json.JSONDecodeError:
            return {}
    return {}


def _env(
    settings: b.SessionSettings, *, with_mcp: bool = False, with_model: bool = True
) -> dict[str, str]:
    """opencode's environment for the thread. The permissions follow the approval policy:
    unless it is `never`, every tool that is not read-only asks (`mcp.permission_rules`).
    `with_mcp` (`opencode run`, which has no other way to take them): the thread's MCP
    servers in OPENCODE_CONFIG_CONTENT's `mcp`, beside the user's own. `with_model`: the
    thread's model as the config's `model` (`opencode acp` sets it per session instead: a
    loaded session keeps the model of its last message over the config's)."""
    env = dict(settings.env)
    env["PWD"] = settings.cwd  # OpenCode resolves its directory from $PWD first
    env.setdefault("OPENCODE_DISABLE_AUTOUPDATE", "1")
    permission = _user_permission(env)
    if settings.approval_policy == "never":
        permission.update(_ALLOW)
    else:
        permission = permission_rules(settings.mcp_servers, {**permission, **_ASK})
    # (No sort: OpenCode's rules are ordered, the last match wins.)
    env["OPENCODE_PERMISSION"] = json.dumps(permission)
    servers = mcp_config(settings.mcp_servers) if with_mcp else {}
    model = settings.model if with_model and settings.model != "default" else None
    if model or servers:
        content = _config_content(env)
        if model:
            content["model"] = model
        if servers:
            mcp = content.get("mcp")
            content["mcp"] = {**(mcp if isinstance(mcp, dict) else {}), **servers}
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(content)
    return env
