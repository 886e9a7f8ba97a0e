"""The thread's MCP servers (`SessionSettings.mcp_servers`) as Codex's `mcp_servers.<name>`.

- Values never go on the command line. A value of threadline's own environment (an `env_vars`
  reference) is named in `env_vars` (the CLI has that environment). Other values (literal env
  values, HTTP headers): `codex app-server` gets them in the `thread/start` config (over its
  stdin; `inline`); `codex exec` in variables of its environment named in `env_vars` /
  `env_http_headers` (Codex resolves both; the agent's shell may see them there).
- Approvals (Codex 0.169.0 asks through `mcpServer/elicitation/request` with
  `_meta.codex_approval_kind = "mcp_tool_call"`): the server "threadline" (the client's own
  tools) and every server under approval policy `never` run without asking (`approve`; Codex's
  default would refuse them under `never`); any other server asks for every call (`prompt`:
  Codex's default `auto` lets a tool annotated read-only run unasked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ... import protocol as p
from ...agent_tools.servers import McpHttpServer, McpStdioServer
from .. import base as b
from ..kit.mcp import is_dynamic

__all__ = ["APPROVAL_KIND", "McpConfig", "mcp_config", "start_failures", "with_error"]

#: `_meta.codex_approval_kind` of the elicitation by which Codex asks before an MCP tool call.
APPROVAL_KIND = "mcp_tool_call"


@dataclass(frozen=True)
class McpConfig:
    """`mcp_servers` entries (without values) and the environment holding their values."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def flags(self) -> list[str]:
        """`-c mcp_servers.<name>.<key>=<TOML value>` overrides (for `codex exec`)."""
        flags: list[str] = []
        for name, entry in self.servers.items():
            for key, value in entry.items():
                flags += ["-c", f"mcp_servers.{name}.{key}={_toml(value)}"]
        return flags


def _approval_mode(settings: b.SessionSettings, server: str) -> str:
    return "approve" if is_dynamic(server) or settings.approval_policy == "never" else "prompt"


#: Codex's own limit on a call of the thread's client-defined tools (threadline's is shorter).
_DYNAMIC_CALL_LIMIT = 24 * 3600
#: What Codex writes on stderr when a server marked `required` does not start.
_REQUIRED_FAILED = "required MCP servers failed to initialize: "


def start_failures(config: McpConfig, stderr: str) -> dict[str, str]:
    """The thread's servers that did not start (a `required` one stops `codex exec` before its
    thread opens), with Codex's reason, from the CLI's stderr."""
    _, found, rest = stderr.partition(_REQUIRED_FAILED)
    if not found:
        return {}
    reason = rest.splitlines()[0].strip() if rest else ""
    return {name: reason for name in config.servers if f"{name}: " in reason}


def mcp_config(
    settings: b.SessionSettings,
    *,
    inline: bool = False,
    required: bool = False,
    leave_out: frozenset[str] = frozenset(),
) -> McpConfig:
    """The thread's servers for Codex (see the module docstring), but `leave_out`; `required`
    makes Codex wait for them to start (and stop if one does not)."""
    config = McpConfig()
    for i, server in enumerate(settings.mcp_servers):
        if server.name in leave_out:
            continue
        mode = _approval_mode(settings, server.name)
        entry: dict[str, Any] = {"default_tools_approval_mode": mode}
        if required:
            entry["required"] = True
        if is_dynamic(server.name):
            # Codex must wait for threadline's own server (its first start loads the MCP SDK)
            # and leave a call's time limit to threadline (`config.toolCallTimeoutMs`).
            entry.update(
                required=True, startup_timeout_sec=60, tool_timeout_sec=_DYNAMIC_CALL_LIMIT
            )
        if isinstance(server, McpStdioServer):
            entry.update(command=server.command, args=list(server.args))
            _stdio_env(entry, server.env, settings.env, config.env if not inline else None)
            if server.cwd:
                entry["cwd"] = server.cwd
        elif isinstance(server, McpHttpServer):
            entry["url"] = server.url
            if inline and server.headers:
                entry["http_headers"] = dict(server.headers)
            elif server.headers:
                names = {h: f"THREADLINE_MCP_{i}_HEADER_{j}" for j, h in enumerate(server.headers)}
                entry["env_http_headers"] = names
                config.env.update({names[h]: v for h, v in server.headers.items()})
        config.servers[server.name] = entry
    return config


def with_error(item: p.McpToolCallItem) -> p.McpToolCallItem:
    """A failed call as Codex reports a tool's error (status failed, the error text as the
    result's content, no `error`) gets that text as its `error.message` too."""
    if item.status != "failed" or item.error is not None:
        return item
    content = item.result.content if item.result is not None else []
    texts = [c.get("text") for c in content if isinstance(c, dict)]
    message = "\n".join(t for t in texts if isinstance(t, str)) or "the MCP tool call failed"
    return msgspec.structs.replace(item, error=p.McpToolCallError(message=message))


def _stdio_env(
    entry: dict[str, Any],
    values: dict[str, str],
    inherited: dict[str, str],
    cli_env: dict[str, str] | None,
) -> None:
    """A stdio server's `env` (literal values, unless `cli_env` takes them) and `env_vars`.
    (Two servers giving one variable different values in `cli_env`: the later one wins.)"""
    literal = {k: v for k, v in values.items() if inherited.get(k) != v}
    named = sorted(k for k in values if k not in literal or cli_env is not None)
    if cli_env is not None:
        cli_env.update(literal)
    elif literal:
        entry["env"] = literal
    if named:
        entry["env_vars"] = named


def _toml(value: Any) -> str:
    """`value` (str, bool, number, list, dict) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)  # a JSON string or number is a TOML one
