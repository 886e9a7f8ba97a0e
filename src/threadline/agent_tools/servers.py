"""Per-thread MCP servers: Codex's `config.mcp_servers` (and threadline's ACP-shaped
`config.mcpServers` list), validated, resolved against the environment for the CLI, and
reduced to what may be stored with the thread.

Secrets stay out of state: literal `env` values and `http_headers` of a server reach the CLI
but are never stored (pass them again on `thread/resume` after a restart); references
(`env_vars`, `bearer_token_env_var`, `env_http_headers`) are stored and resolved from
threadline's environment each time a CLI starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = [
    "DYNAMIC_TOOLS_SERVER",
    "McpConfigError",
    "McpHttpServer",
    "McpServer",
    "McpStdioServer",
    "ServerConfig",
    "parse_servers",
    "resolve",
    "stored_servers",
]

#: The name of the MCP server through which a CLI reaches the thread's client-defined tools.
DYNAMIC_TOOLS_SERVER = "threadline"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class McpConfigError(ValueError):
    """`config.mcp_servers` is malformed (the message names the server and the field)."""


class McpStdioServer(msgspec.Struct, frozen=True, kw_only=True):
    """A server the CLI starts as a child and talks to over stdio (values resolved)."""

    name: str
    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None


class McpHttpServer(msgspec.Struct, frozen=True, kw_only=True):
    """A server the CLI reaches over streamable HTTP (headers resolved)."""

    name: str
    url: str
    headers: dict[str, str] = {}


McpServer = McpStdioServer | McpHttpServer


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One entry of Codex's `config.mcp_servers` (its field names: snake_case)."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    env_vars: list[str] = []
    cwd: str | None = None
    url: str | None = None
    http_headers: dict[str, str] = {}
    env_http_headers: dict[str, str] = {}
    bearer_token_env_var: str | None = None
    enabled: bool = True
    #: In a stored entry: the names of the literal values that were not stored.
    unstored_env: list[str] = []
    unstored_headers: list[str] = []

    def stored(self) -> dict[str, Any]:
        """This entry without its literal secrets (see the module docstring)."""
        raw = msgspec.to_builtins(self)
        if raw.pop("env", None):
            raw["unstored_env"] = sorted(self.env)
        if raw.pop("http_headers", None):
            raw["unstored_headers"] = sorted(self.http_headers)
        return dict(raw)

    def missing(self) -> list[str]:
        """The literal values this (stored) entry lacks: given at thread/start, not stored."""
        return [k for k in self.unstored_env if k not in self.env] + [
            h for h in self.unstored_headers if h not in self.http_headers
        ]


def _from_acp(entry: Any) -> tuple[str, dict[str, Any]]:
    """An ACP `McpServer` (`{name, command, args, env: [{name, value}]}` or `{type: "http" |
    "sse", name, url, headers: [{name, value}]}`) → (name, Codex-shaped entry)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise McpConfigError("config.mcpServers: each entry must be an object with a `name`")
    pairs = {"env": entry.get("env") or [], "headers": entry.get("headers") or []}
    for key, value in pairs.items():
        if not isinstance(value, list) or not all(
            isinstance(v, dict) and isinstance(v.get("name"), str) for v in value
        ):
            raise McpConfigError(f"config.mcpServers[{entry['name']}].{key}: [{{name, value}}]")
    env = {v["name"]: str(v.get("value", "")) for v in pairs["env"]}
    headers = {v["name"]: str(v.get("value", "")) for v in pairs["headers"]}
    if "url" in entry:
        return entry["name"], {"url": entry["url"], "http_headers": headers}
    raw = {k: entry[k] for k in ("command", "args") if k in entry}
    return entry["name"], {**raw, "env": env}


def parse_servers(config: Mapping[str, Any]) -> dict[str, ServerConfig]:
    """The thread's servers by name, from `config.mcp_servers` (Codex) and `config.mcpServers`
    (ACP list); raises McpConfigError. Disabled servers are left out."""
    raw: dict[str, Any] = {}
    listed = config.get("mcpServers")
    if listed is not None:
        if not isinstance(listed, list):
            raise McpConfigError("config.mcpServers must be a list of ACP McpServer objects")
        raw.update(_from_acp(entry) for entry in listed)
    named = config.get("mcp_servers")
    if named is not None:
        if not isinstance(named, dict):
            raise McpConfigError("config.mcp_servers must be an object: {name: server}")
        raw.update(named)
    servers: dict[str, ServerConfig] = {}
    for name, entry in raw.items():
        where = f"config.mcp_servers.{name}"
        if not _NAME.match(name):
            raise McpConfigError(f"{where}: a name is 1-64 letters, digits, '_' or '-'")
        if name == DYNAMIC_TOOLS_SERVER:
            raise McpConfigError(f"{where}: the name is reserved for the thread's dynamicTools")
        try:
            server = msgspec.convert(entry, ServerConfig)
        except msgspec.ValidationError as exc:
            raise McpConfigError(f"{where}: {exc}") from None
        if (server.command is None) == (server.url is None):
            raise McpConfigError(f"{where}: give either `command` (stdio) or `url` (HTTP)")
        if server.enabled:
            servers[name] = server
    return servers


def stored_servers(servers: Mapping[str, ServerConfig]) -> dict[str, Any]:
    """What the thread record keeps of its servers (no literal secrets)."""
    return {name: server.stored() for name, server in servers.items()}


def _lookup(env: Mapping[str, str], var: str, where: str) -> str:
    value = env.get(var)
    if value is None:
        raise McpConfigError(f"{where}: the environment variable {var} is not set")
    return value


def resolve(
    servers: Mapping[str, ServerConfig], env: Mapping[str, str]
) -> tuple[list[McpServer], list[str]]:
    """The servers as the CLI gets them (references resolved from `env`), and a warning for
    each one left out because a reference does not resolve."""
    out: list[McpServer] = []
    warnings: list[str] = []
    for name, s in servers.items():
        where = f"MCP server {name!r}"
        if s.missing():
            warnings.append(
                f"{where} runs without {', '.join(s.missing())}: literal env and header values "
                "are not stored with the thread; pass config.mcp_servers again on thread/resume "
                "(or name them by reference: env_vars, bearer_token_env_var, env_http_headers)"
            )
        try:
            if s.command is not None:
                values = {var: _lookup(env, var, where) for var in s.env_vars}
                out.append(
                    McpStdioServer(
                        name=name,
                        command=s.command,
                        args=s.args,
                        env={**values, **s.env},
                        cwd=s.cwd,
                    )
                )
                continue
            headers = dict(s.http_headers)
            headers.update({h: _lookup(env, var, where) for h, var in s.env_http_headers.items()})
            if s.bearer_token_env_var:
                token = _lookup(env, s.bearer_token_env_var, where)
                headers["Authorization"] = f"Bearer {token}"
            assert s.url is not None
            out.append(McpHttpServer(name=name, url=s.url, headers=headers))
        except McpConfigError as exc:
            warnings.append(f"{exc}: the server is left out")
    return out, warnings
