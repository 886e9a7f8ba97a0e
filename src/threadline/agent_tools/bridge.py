"""The stdio MCP server a CLI starts for a thread's client-defined tools: a byte relay between
the CLI (stdin/stdout) and threadline's tool host (a unix socket), which speaks MCP.

Standard library only, run as `python -I -S bridge.py` (fast to start). Its first line to the
host is the thread's token. It exits when either side closes: the CLI ended (stdin EOF) or
threadline went away (socket EOF), so it never outlives the CLI that started it.
"""

import contextlib
import os
import socket
import sys
import threading


def _upstream(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)


def main() -> int:
    path = os.environ.get("THREADLINE_TOOLS_SOCKET", "")
    token = os.environ.get("THREADLINE_TOOLS_TOKEN", "")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        sock.sendall(token.encode() + b"\n")
    except OSError as exc:
        sys.stderr.write(f"threadline tool bridge: cannot reach threadline at {path}: {exc}\n")
        return 1
    threading.Thread(target=_upstream, args=(sock,), daemon=True).start()
    with contextlib.suppress(OSError):
        while data := sock.recv(65536):
            _write_all(data)
    return 0


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


if __name__ == "__main__":
    sys.exit(main())
