"""The thread's MCP servers (`SessionSettings.mcp_servers`) as claude takes and reports them.

Facts (claude 2.1.197, measured against tests/fakes/mcp_server.py):
- `--mcp-config '{"mcpServers": {...}}'` adds servers to the user's own (no
  `--strict-mcp-config`); stdio `{type: "stdio", command, args, env}`, HTTP `{type: "http",
  url, headers}`; `${VAR}` in an env value or a header is expanded from the CLI's environment;
- a server's tools are named `mcp__<server>__<tool>`; each call asks `can_use_tool` first
  (print mode without a prompt tool: denied unless allowed by a rule such as `mcp__<server>`);
- `system/init` lists every server with its `status` (`connected`, `failed`, ...), at the
  start of every turn; the reason of a failure is only in the `mcp_status` control response
  (`mcpServers[].error`, e.g. "Connection closed", "ENOENT: ...", "ECONNREFUSED: ...");
- a tool's result reaches stream-json as the `tool_result` content (a string: the JSON of the
  MCP `structuredContent` when there is one, else the text) and `tool_use_result`
  (`structuredContent`); a failed call is an `is_error` tool_result; a server that exits
  mid-call gives "Connection closed".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ...agent_tools.servers import McpHttpServer, McpServer, McpStdioServer
from ..kit.mcp import DYNAMIC_TOOLS_SERVER, is_dynamic

__all__ = [
    "failed_servers",
    "failure_message",
    "mcp_config",
    "server_errors",
    "server_rules",
    "split_tool",
]

_PREFIX = "mcp__"
#: The variables that carry the servers' env values and headers to the CLI: values never go
#: into argv (visible to every user in /proc, and logged at debug level).
_VAR = "THREADLINE_MCP_{}"


def _cwd_wrapped(server: McpStdioServer) -> tuple[str, list[str]]:
    """The command and args, run from the server's `cwd` when it has one (claude's config
    has no cwd: `sh -c 'cd "$0" && exec "$@"' <cwd> <command> <args...>`)."""
    if not server.cwd:
        return server.command, list(server.args)
    return "sh", ["-c", 'cd "$0" && exec "$@"', server.cwd, server.command, *server.args]


def mcp_config(servers: Sequence[McpServer]) -> tuple[str | None, dict[str, str]]:
    """The `--mcp-config` JSON (None without servers) and the environment variables its
    `${...}` references name."""
    if not servers:
        return None, {}
    variables: dict[str, str] = {}

    def ref(value: str) -> str:
        name = _VAR.format(len(variables))
        variables[name] = value
        return "${" + name + "}"

    entries: dict[str, Any] = {}
    for s in servers:
        if isinstance(s, McpStdioServer):
            command, args = _cwd_wrapped(s)
            env = {k: ref(v) for k, v in s.env.items()}
            entries[s.name] = {"type": "stdio", "command": command, "args": args, "env": env}
        elif isinstance(s, McpHttpServer):
            headers = {k: ref(v) for k, v in s.headers.items()}
            entries[s.name] = {"type": "http", "url": s.url, "headers": headers}
    return json.dumps({"mcpServers": entries}), variables


def server_rules(servers: Iterable[McpServer], *, all_servers: bool) -> list[str]:
    """`--allowedTools` rules: the dynamic tools' server always (its calls never ask: the
    client answers them), every server when `all_servers` (approval policy `never`)."""
    return [f"{_PREFIX}{s.name}" for s in servers if all_servers or is_dynamic(s.name)]


def split_tool(name: str, servers: Iterable[str] = ()) -> tuple[str, str] | None:
    """`mcp__<server>__<tool>` → (server, tool); a known server name wins over the first
    `__` (names may hold `__`). None for a tool that is not an MCP tool."""
    if not name.startswith(_PREFIX):
        return None
    rest = name[len(_PREFIX) :]
    for server in sorted({*servers, DYNAMIC_TOOLS_SERVER}, key=len, reverse=True):
        if rest.startswith(server + "__"):
            return server, rest[len(server) + 2 :]
    server, sep, tool = rest.partition("__")
    return (server, tool) if sep else (server, rest)


def failed_servers(init: dict[str, Any]) -> list[str]:
    """The servers a `system/init` message reports as failed to start."""
    listed = init.get("mcp_servers")
    if not isinstance(listed, list):
        return []
    return [
        str(s["name"])
        for s in listed
        if isinstance(s, dict) and s.get("status") == "failed" and isinstance(s.get("name"), str)
    ]


def server_errors(response: Any) -> dict[str, str]:
    """Each failed server's reason, from an `mcp_status` control response's payload."""
    listed = response.get("mcpServers") if isinstance(response, dict) else None
    if not isinstance(listed, list):
        return {}
    return {
        str(s["name"]): str(s.get("error") or "")
        for s in listed
        if isinstance(s, dict) and isinstance(s.get("name"), str)
    }


def failure_message(name: str, reason: str | None) -> str:
    """The warning for a server that failed to start."""
    why = f": {reason}" if reason else ""
    return f"MCP server {name!r} failed to start{why}; the thread goes on without its tools"
