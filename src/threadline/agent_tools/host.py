"""The tool host: one per server process, it serves each thread's client-defined tools to
that thread's CLI as an MCP server named `DYNAMIC_TOOLS_SERVER`.

The CLI starts `bridge.py` as an ordinary stdio MCP server; the bridge connects to the host's
unix socket (in a private 0700 directory, removed when the host stops), presents the thread's
secret token on its first line, then relays bytes both ways. The host runs the official MCP
SDK's server on the connection (`mcp.server.lowlevel.Server`, under trio through anyio): a
`tools/list` answers the thread's tools, a `tools/call` goes to `ThreadTools.call`. A
connection with an unknown token is refused and logged.

The SDK takes about a second to import: it is loaded (`sdk.load_mcp`) on a worker thread when
the first thread with tools registers, while its CLI starts, not at server start.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio

from ..protocol import ToolOutput, ToolOutputImage, ToolOutputText
from .calls import ToolSet
from .sdk import load_mcp
from .servers import DYNAMIC_TOOLS_SERVER, McpStdioServer

__all__ = ["ToolHost", "ToolHosting", "open_tool_host"]

log = logging.getLogger("threadline.tools")

_BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bridge.py")
#: How long a new connection has to present its token.
_TOKEN_WAIT = 10.0
_MAX_LINE = 64 * 1024 * 1024
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+);base64,(.*)$", re.DOTALL)


class _Lines:
    """A socket stream as the SDK's stdio transport wants it: async lines in, `write` out."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    def __aiter__(self) -> _Lines:
        return self

    async def readline(self) -> bytes | None:
        while (end := self._buf.find(b"\n")) < 0:
            if len(self._buf) > _MAX_LINE:
                raise ValueError("an MCP message over 64 MiB")
            data = await self._stream.receive_some(65536)
            if not data:
                return None
            self._buf += data
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line

    async def __anext__(self) -> str:
        line = await self.readline()
        if line is None:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")

    async def write(self, text: str) -> None:
        await self._stream.send_all(text.encode("utf-8"))

    async def flush(self) -> None:
        pass


class ToolHost:
    def __init__(self, socket_path: str, nursery: trio.Nursery) -> None:
        self.socket_path = socket_path
        self._nursery = nursery
        self._threads: dict[str, tuple[str, ToolSet]] = {}  # token → server name, tools

    def register(self, tools: ToolSet, name: str = DYNAMIC_TOOLS_SERVER) -> McpStdioServer:
        """Serve `tools` as the MCP server `name`; the server entry the thread's CLI gets for
        them (the SDK is loaded meanwhile, while the CLI starts)."""
        token = secrets.token_urlsafe(32)
        self._threads[token] = (name, tools)
        self._nursery.start_soon(self._preload)
        return McpStdioServer(
            name=name,
            command=sys.executable,
            args=["-I", "-S", _BRIDGE],
            env={"THREADLINE_TOOLS_SOCKET": self.socket_path, "THREADLINE_TOOLS_TOKEN": token},
        )

    def unregister(self, tools: ToolSet) -> None:
        for token in [t for t, (_, v) in self._threads.items() if v is tools]:
            del self._threads[token]

    async def _preload(self) -> None:
        try:
            await load_mcp()
        except Exception:
            log.exception("cannot load the MCP SDK: client-defined tools will fail")

    async def serve(self, listener: trio.SocketListener) -> None:
        async with listener:
            while True:
                stream = await listener.accept()
                self._nursery.start_soon(self._connection, stream)

    async def _connection(self, stream: trio.SocketStream) -> None:
        async with stream:
            lines = _Lines(stream)
            token = None
            with trio.move_on_after(_TOKEN_WAIT):
                token = await lines.readline()
            served = self._threads.get(token.decode(errors="replace")) if token else None
            if served is None:
                log.warning("refused a tool connection: unknown token")
                return
            name, tools = served
            try:
                await load_mcp()
                await _serve_mcp(lines, name, tools)
            except Exception:
                log.exception("the MCP connection of thread %s failed", tools.thread_id)


async def _serve_mcp(lines: _Lines, name: str, tools: ToolSet) -> None:
    """Run the SDK's MCP server on one connection until the bridge closes it."""
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        listed = [
            types.Tool(name=t.mcp_name, description=t.description, input_schema=t.input_schema)
            for t in tools.tools.values()
        ]
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        outcome = await tools.call(params.name, params.arguments or {})
        content = [_content(types, item) for item in outcome.content]
        return types.CallToolResult(content=content, is_error=not outcome.success)

    server: Server[Any] = Server(name, on_list_tools=list_tools, on_call_tool=call_tool)
    stream = cast(Any, lines)  # (the transport reads lines and calls write/flush: duck-typed)
    async with stdio_server(stdin=stream, stdout=stream) as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _content(types: Any, item: ToolOutput) -> Any:
    """A client's output item → MCP content (a `data:` URL becomes an image or audio block)."""
    if isinstance(item, ToolOutputText):
        return types.TextContent(text=item.text)
    url = item.image_url if isinstance(item, ToolOutputImage) else item.audio_url
    found = _DATA_URL.match(url)
    if found is None:
        return types.TextContent(text=url)
    mime, data = found.group(1), found.group(2)
    if isinstance(item, ToolOutputImage):
        return types.ImageContent(data=data, mime_type=mime)
    return types.AudioContent(data=data, mime_type=mime)


#: A unix socket's path must fit in `sun_path` (108 bytes with its NUL on Linux).
_MAX_SOCKET_PATH = 104
_SOCKET_NAME = "tools.sock"


def _socket_dir() -> str:
    """A fresh private directory for the socket: in the temp dir, or (when that path is too
    long for a socket) in $XDG_RUNTIME_DIR or /tmp."""
    for parent in (tempfile.gettempdir(), os.environ.get("XDG_RUNTIME_DIR"), "/tmp"):
        probe = os.path.join(parent or "", "threadline-tools-12345678", _SOCKET_NAME)
        if parent and os.path.isdir(parent) and len(probe.encode()) <= _MAX_SOCKET_PATH:
            return tempfile.mkdtemp(prefix="threadline-tools-", dir=parent)
    raise OSError("no directory with a path short enough for a unix socket")


@asynccontextmanager
async def open_tool_host() -> AsyncIterator[ToolHost]:
    """A tool host listening on a fresh private socket; stopped (socket removed) on exit."""
    directory = _socket_dir()
    path = os.path.join(directory, _SOCKET_NAME)
    try:
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        await sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(64)
        async with trio.open_nursery() as nursery:
            host = ToolHost(path, nursery)
            nursery.start_soon(host.serve, trio.SocketListener(sock))
            yield host
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class ToolHosting:
    """The server's tool host, started in `nursery` when a thread first needs it."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._host: ToolHost | None = None
        self._lock = trio.Lock()

    async def host(self) -> ToolHost:
        async with self._lock:
            if self._host is None:
                self._host = await self._nursery.start(self._run)
            return self._host

    async def _run(self, *, task_status: trio.TaskStatus[ToolHost]) -> None:
        async with open_tool_host() as host:
            task_status.started(host)
            await trio.sleep_forever()
