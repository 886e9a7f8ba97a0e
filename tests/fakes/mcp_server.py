"""A stdio MCP server for the tests, built with the official MCP SDK: the per-thread server a
client gives its agent (`config.mcp_servers`). Run it as `python -m tests.fakes.mcp_server`
(or the file's path) from the repository root.

Tools: `echo(text)` answers "echo: <text>"; `fail(text)` fails (an MCP tool error); `crash`
exits the server mid-call; `slow(seconds)` sleeps first; `env(name)` answers the value of an
environment variable of the server, `env_sha256(name)` its SHA-256 (to prove a secret passed by
reference reached it without showing it). Each
call is appended as a JSON line to `$MCP_TEST_LOG` when it is set. With `MCP_TEST_EXIT_AT_START`
set, the server exits at once with that message on stderr (a server that fails to start).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("testsrv")


def _log(tool: str, **arguments: object) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    _log("echo", text=text)
    return f"echo: {text}"


@app.tool()
def fail(text: str) -> str:
    """Always fails."""
    _log("fail", text=text)
    raise ValueError(f"fail was asked to fail: {text}")


@app.tool()
def crash(text: str) -> str:
    """Exits the server in the middle of the call."""
    _log("crash", text=text)
    os._exit(3)


@app.tool()
def slow(seconds: float) -> str:
    """Sleeps, then answers."""
    _log("slow", seconds=seconds)
    time.sleep(seconds)
    return f"slept {seconds}"


@app.tool()
def env_sha256(name: str) -> str:
    """The SHA-256 of one of the server's environment variables (proves a secret arrived
    without putting it in any transcript)."""
    _log("env_sha256", name=name)
    return "sha256:" + hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


@app.tool()
def env(name: str) -> str:
    """The value of one of the server's environment variables."""
    _log("env", name=name)
    return os.environ.get(name, "<unset>")


if __name__ == "__main__":
    message = os.environ.get("MCP_TEST_EXIT_AT_START")
    if message:
        print(message, file=sys.stderr)
        sys.exit(2)
    app.run("stdio")
