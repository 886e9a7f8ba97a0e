"""The thread's MCP servers on Gemini: how the CLI names their tools, how a tool call is told
to be one, and the settings file that hands them to headless `gemini -p`.

Facts (gemini 0.61.0, measured against the fake and read in its bundle, `mcp-tool.ts`):

- A tool is offered to the model as ``mcp_<server>_<tool>`` (`generateValidName`: characters
  outside ``[A-Za-z0-9_.:-]`` become ``_``; no second ``mcp_`` when the name has one).
- Over ACP the call's `kind` is ``other``, its `title` is ``<tool> (<server> MCP Server)``
  (unless the arguments have a string ``command``: then the title is that), its content the
  arguments as JSON text (``[Payload omitted…]`` past 500 characters), and its `toolCallId`
  starts with the qualified name unless the model gave the call an id.
- ACP's `session/new` takes the servers; headless reads them from the settings only, merged
  by server name over every settings scope (`mcpServers` is shallow-merged), with ``$VAR`` /
  ``${VAR}`` replaced from the CLI's environment. A system settings file is skipped unless
  it and every directory above it is owned by root and not writable by others; the user's
  ~/.gemini moves with ``GEMINI_CLI_HOME`` (the shell's HOME stays).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ...agent_tools.servers import McpHttpServer, McpServer, McpStdioServer
from ..kit.acp import McpCall
from ..kit.mcp import is_dynamic

__all__ = ["DEBUG_LOG", "StartFailures", "acp_mcp_call", "headless_settings", "split_tool_name"]

#: The CLI's debug log file: the only place it names an MCP server that failed to start
#: (it shows "[MCP error] …" to nobody until the user ran an MCP command; ACP: not at all).
DEBUG_LOG = "GEMINI_DEBUG_LOG_FILE"
_START_FAILED = re.compile(
    r"\[MCP error\] Error (?:during discovery for|connecting to) MCP server "
    r"'(?P<name>[^']+)': (?P<reason>.*)"
)

_MCP_PREFIX = "mcp_"
#: ACP title of an MCP tool's call: its display name.
_TITLE = re.compile(r"^(?P<tool>.+) \((?P<server>[^()]+) MCP Server\)$", re.DOTALL)


def valid_name(name: str) -> str:
    """Gemini's `generateValidName` (without its cut of names past 63 characters)."""
    out = name if name.startswith(_MCP_PREFIX) else _MCP_PREFIX + name
    out = re.sub(r"[^a-zA-Z0-9_\-.:]", "_", out)
    return "_" + out if re.match(r"^[^a-zA-Z_]", out) else out


def split_tool_name(qualified: str, servers: list[str]) -> tuple[str, str] | None:
    """(server, tool) of a Gemini MCP tool name: by the thread's own servers (the longest
    name first: server names may hold ``_``), else as Gemini parses it (the server up to the
    first ``_``). None when it is no MCP tool's name."""
    for server in sorted(servers, key=len, reverse=True):
        prefix = valid_name(server + "_")
        if qualified.startswith(prefix) and len(qualified) > len(prefix):
            return server, qualified[len(prefix) :]
    if not qualified.startswith(_MCP_PREFIX):
        return None
    found = re.match(r"^([^_]+)_(.+)$", qualified[len(_MCP_PREFIX) :])
    return (found.group(1), found.group(2)) if found else None


def _arguments(call: dict[str, Any]) -> Any:
    raw = call.get("rawInput")
    if isinstance(raw, dict):
        return raw
    for block in call.get("content") or []:
        inner = block.get("content") if isinstance(block, dict) else None
        if isinstance(inner, dict) and inner.get("type") == "text":
            try:
                value = json.loads(str(inner.get("text", "")))
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def acp_mcp_call(call: dict[str, Any], servers: list[str]) -> McpCall | None:
    """The MCP server and tool of an ACP tool call of `gemini --acp`, or None."""
    if call.get("kind") not in (None, "other"):
        return None
    title = _TITLE.match(str(call.get("title") or ""))
    if title is not None:
        return McpCall(title.group("server"), title.group("tool"), _arguments(call))
    # (A call whose title is its `command` argument: the id carries the qualified name.)
    qualified = str(call.get("toolCallId") or "").partition("__")[0]
    named = split_tool_name(qualified, servers) if servers else None
    if named is None or named[0] not in servers:
        return None
    return McpCall(named[0], named[1], _arguments(call))


def _settings_entry(server: McpServer, refs: dict[str, str]) -> dict[str, Any]:
    """One `mcpServers` entry; each value as a ``${VAR}`` reference to the CLI's env (`refs`
    gets VAR → value), so no value is written to disk."""

    def ref(value: str) -> str:
        var = f"THREADLINE_MCP_{len(refs)}"
        refs[var] = value
        return "${" + var + "}"

    entry: dict[str, Any]
    if isinstance(server, McpStdioServer):
        entry = {"command": server.command, "args": list(server.args)}
        if server.env:
            entry["env"] = {k: ref(v) for k, v in server.env.items()}
        if server.cwd:
            entry["cwd"] = server.cwd
    else:
        assert isinstance(server, McpHttpServer)
        entry = {"httpUrl": server.url}
        if server.headers:
            entry["headers"] = {k: ref(v) for k, v in server.headers.items()}
    if is_dynamic(server.name):
        entry["trust"] = True  # threadline's own tools run unasked: the client answers them
    return entry


def _gemini_dir(env: dict[str, str]) -> str:
    """The CLI's own ~/.gemini (`GEMINI_CLI_HOME` moves it)."""
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini")


def _user_settings(gemini_dir: str) -> dict[str, Any]:
    """The user's settings.json ({} when there is none); ValueError when it is unreadable."""
    path = os.path.join(gemini_dir, "settings.json")
    try:
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} is not a JSON object")
    return loaded


def _mirror(gemini_dir: str, into: str) -> None:
    """`into` stands for `gemini_dir`: a link to each of its entries (the sessions in `tmp`
    and `history` among them: made first, so they land in the real dir)."""
    for sub in ("tmp", "history"):
        os.makedirs(os.path.join(gemini_dir, sub), exist_ok=True)
    os.makedirs(into)
    for name in os.listdir(gemini_dir):
        if name != "settings.json":
            os.symlink(os.path.join(gemini_dir, name), os.path.join(into, name))


@contextmanager
def headless_settings(
    servers: list[McpServer], env: dict[str, str]
) -> Iterator[tuple[dict[str, str], str | None]]:
    """The variables that give headless gemini the thread's servers (it reads them from its
    settings only, and skips a system settings file not owned by root): `GEMINI_CLI_HOME` names
    a private temporary home whose .gemini links to every entry of the user's own but
    settings.json, a copy of the user's with the thread's servers added (the user's own stay),
    their values as references to variables also returned. Removed on exit. With a warning
    instead when the user's settings cannot be read (the CLI then runs without the servers)."""
    if not servers:
        yield {}, None
        return
    gemini_dir = _gemini_dir(env)
    try:
        settings = _user_settings(gemini_dir)
    except ValueError as exc:
        names = ", ".join(s.name for s in servers)
        yield {}, f"gemini -p runs without the thread's MCP servers ({names}): {exc}"
        return
    refs: dict[str, str] = {}
    ours = {s.name: _settings_entry(s, refs) for s in servers}
    mine = settings.get("mcpServers") if isinstance(settings.get("mcpServers"), dict) else {}
    assert isinstance(mine, dict)
    settings["mcpServers"] = {**mine, **ours}
    with tempfile.TemporaryDirectory(prefix="threadline-gemini-") as home:
        _mirror(gemini_dir, os.path.join(home, ".gemini"))
        path = private_file(os.path.join(home, ".gemini", "settings.json"))
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(settings, fh)
        log = private_file(os.path.join(home, "debug.log"))
        yield {**refs, "GEMINI_CLI_HOME": home, DEBUG_LOG: env.get(DEBUG_LOG) or log}, None


def private_file(path: str) -> str:
    """Create `path`, empty, readable by its owner only."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    return path


class StartFailures:
    """The thread's servers that failed to start, read from the CLI's debug log (`DEBUG_LOG`)
    from where it stood at creation; each named once."""

    def __init__(self, log: str | None, servers: list[str]) -> None:
        self.log = log
        self.servers = set(servers)
        self.named: set[str] = set()
        self.offset = 0
        if log is not None and servers:
            with suppress(OSError):
                self.offset = os.path.getsize(log)

    def warnings(self) -> list[str]:
        """One text per server newly found failed: its name and the CLI's reason."""
        if self.log is None or not self.servers:
            return []
        try:
            with open(self.log, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        out = []
        for line in complete.decode("utf-8", "replace").splitlines():
            found = _START_FAILED.search(line)
            if found is None or found["name"] not in self.servers - self.named:
                continue
            self.named.add(found["name"])
            reason = found["reason"].split(" _McpError")[0].strip()[:300]
            out.append(f"MCP server '{found['name']}' failed to start: {reason}")
        return out
