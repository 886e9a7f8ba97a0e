"""The thread's MCP servers on OpenCode (measured on opencode 1.18.33).

- OpenCode names an MCP tool `<server>_<tool>`, both sanitized (`[^A-Za-z0-9_-]` → `_`).
- It asks for an MCP tool call with the tool's name as the permission key (pattern `*`), and
  its default permission is `"*": "allow"`: unless the config says otherwise, MCP tools run
  unasked. `permission` below makes every tool not known to be read-only ask (`opencode run`,
  which cannot ask, rejects such a call and stops the turn, as for `bash`), and lets the
  thread's client-defined tools (`DYNAMIC_TOOLS_SERVER`) run: threadline's tool host asks the
  client for those itself. OpenCode evaluates its permission rules in order, the last match
  wins, so the catch-all comes first.
- `opencode acp` takes the servers from `session/new` (the kit sends them); `opencode run`
  from its config: `mcp_config` (`OPENCODE_CONFIG_CONTENT`'s `mcp`).
- A server that does not start is logged (WARN) as `message="server unavailable" key=<name>
  type=local status=failed`; OpenCode carries on without its tools.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ...agent_tools.servers import McpHttpServer, McpServer, McpStdioServer
from ..kit.mcp import DYNAMIC_TOOLS_SERVER, acp_servers

__all__ = [
    "READ_ONLY",
    "mcp_config",
    "permission_rules",
    "servers_key",
    "split_tool",
    "unavailable_server",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_UNAVAILABLE = re.compile(r'message="server unavailable" key=(\S+)(.*)$')

#: OpenCode's own tools that only read or plan, allowed after the catch-all `ask` (`read`
#: keeps OpenCode's default: `.env` files ask).
READ_ONLY: dict[str, Any] = {
    "read": {"*": "allow", "*.env": "ask", "*.env.*": "ask", "*.env.example": "allow"},
    "glob": "allow",
    "grep": "allow",
    "list": "allow",
    "lsp": "allow",
    "skill": "allow",
    "task": "allow",
    "todowrite": "allow",
    "todoread": "allow",
    "question": "allow",
}


def sanitized(name: str) -> str:
    return _UNSAFE.sub("_", name)


def split_tool(name: str, servers: list[McpServer]) -> tuple[str, str] | None:
    """(server, tool) of OpenCode's name for a tool of one of `servers`, else None (the
    longest server name wins: `a_b_c` is tool `c` of server `a_b` if there is one)."""
    best: tuple[str, str] | None = None
    for server in servers:
        prefix = sanitized(server.name) + "_"
        fits = name.startswith(prefix) and len(name) > len(prefix)
        if fits and (best is None or len(server.name) > len(best[0])):
            best = (server.name, name[len(prefix) :])
    return best


def permission_rules(servers: list[McpServer], user: dict[str, Any]) -> dict[str, Any]:
    """OpenCode's `permission` for a thread whose tools must ask: ask for everything, allow
    the read-only tools, keep the user's own rules (never their catch-all), and let the thread's
    client-defined tools run (while any other thread server's tools still ask)."""
    rules: dict[str, Any] = {"*": "ask", **READ_ONLY}
    rules.update({k: v for k, v in user.items() if k != "*"})
    ours: dict[str, str] = {}
    if any(s.name == DYNAMIC_TOOLS_SERVER for s in servers):
        ours[f"{sanitized(DYNAMIC_TOOLS_SERVER)}_*"] = "allow"
    for server in servers:
        if server.name != DYNAMIC_TOOLS_SERVER:
            ours[f"{sanitized(server.name)}_*"] = "ask"
    for key, action in ours.items():
        rules.pop(key, None)  # (last, whatever the user's rules said)
        rules[key] = action
    return rules


def mcp_config(servers: list[McpServer]) -> dict[str, Any]:
    """OpenCode's config `mcp` entries for `servers` (local: argv and environment; remote:
    url and headers)."""
    out: dict[str, Any] = {}
    for server in servers:
        if isinstance(server, McpStdioServer):
            entry: dict[str, Any] = {
                "type": "local",
                "command": [server.command, *server.args],
                "environment": dict(server.env),
            }
        elif isinstance(server, McpHttpServer):
            entry = {"type": "remote", "url": server.url, "headers": dict(server.headers)}
        else:  # pragma: no cover - McpServer is a closed union
            continue
        out[server.name] = entry
    return out


def servers_key(servers: list[McpServer]) -> str:
    """What tells one set of servers from another (a digest: their values stay secret)."""
    if not servers:
        return ""
    text = json.dumps(acp_servers(servers), sort_keys=True)
    return "\0mcp:" + hashlib.sha256(text.encode()).hexdigest()


def unavailable_server(line: str) -> tuple[str, str] | None:
    """(server, OpenCode's words) when a log line says an MCP server did not start."""
    found = _UNAVAILABLE.search(line)
    if found is None:
        return None
    detail = " ".join(found.group(2).split())
    return found.group(1), "server unavailable" + (f" ({detail})" if detail else "")
