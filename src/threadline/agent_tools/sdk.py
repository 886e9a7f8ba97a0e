"""Loading the official MCP SDK: about a second of imports, done once, on a worker thread, so
the server never stalls on it and never imports it at all when no thread uses MCP. Everything
in threadline that uses the SDK awaits `load_mcp()` first: two threads importing the package at
once break its circular imports."""

from __future__ import annotations

import importlib
import threading

import trio

__all__ = ["load_mcp"]

_lock = threading.Lock()
_MODULES = ("mcp", "mcp.server.lowlevel", "mcp.server.stdio", "mcp.client.stdio")


def _import_all() -> None:
    with _lock:
        for name in _MODULES:
            importlib.import_module(name)


async def load_mcp() -> None:
    await trio.to_thread.run_sync(_import_all)
