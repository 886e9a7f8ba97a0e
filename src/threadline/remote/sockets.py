"""Opening the listening sockets: TCP for `ws://`, a unix socket (mode 0600) for `unix://`.

A unix socket path that exists is replaced only when it is a socket nobody answers on (a
server that died); a live server's socket, or any other file, is an error."""

from __future__ import annotations

import contextlib
import errno
import os
import socket as stdsocket
import stat
from collections.abc import Callable

import trio

from .address import ListenAddress

__all__ = ["ListenError", "open_listeners"]


class ListenError(Exception):
    """The address cannot be listened on (message says why)."""


async def open_listeners(
    address: ListenAddress,
) -> tuple[list[trio.SocketListener], Callable[[], None]]:
    """The listeners, and a cleanup to run when serving ends (removes the unix socket)."""
    if address.kind == "ws":
        try:
            listeners = await trio.open_tcp_listeners(address.port, host=address.host)
        except OSError as exc:
            raise ListenError(f"cannot listen on {address.url()}: {exc.strerror}") from None
        return listeners, lambda: None
    path = address.path
    _clear_stale(path)
    sock = trio.socket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is created 0600: only this user may connect
    try:
        await sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on unix://{path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    sock.listen(128)
    inode = os.stat(path).st_ino

    def cleanup() -> None:
        # Only our own socket: another server may have replaced it since.
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == inode:
                os.unlink(path)

    return [trio.SocketListener(sock)], cleanup


def _clear_stale(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"cannot listen on unix://{path}: it exists and is not a socket")
    probe = stdsocket.socket(stdsocket.AF_UNIX, stdsocket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise ListenError(f"cannot listen on unix://{path}: {exc.strerror}") from None
        os.unlink(path)  # a socket nobody serves: a server that died left it
        return
    finally:
        probe.close()
    raise ListenError(f"cannot listen on unix://{path}: another server is listening there")
