"""`--listen` URLs: `stdio://`, `ws://IP:PORT` (a literal IP, as Codex takes it), `unix://PATH`."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

__all__ = ["ListenAddress", "parse_listen"]


@dataclass(frozen=True)
class ListenAddress:
    """`kind` is stdio, ws or unix; `host`/`port` for ws, `path` for unix."""

    kind: str
    host: str = ""
    port: int = 0
    path: str = ""

    @property
    def loopback(self) -> bool:
        """unix sockets count as local: their file mode guards them."""
        return self.kind != "ws" or ipaddress.ip_address(self.host).is_loopback

    def url(self, port: int | None = None) -> str:
        if self.kind == "unix":
            return f"unix://{self.path}"
        if self.kind == "stdio":
            return "stdio://"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port if port is None else port}"


def parse_listen(url: str, default_unix: str) -> ListenAddress:
    """The address `url` names; ValueError with what is accepted otherwise. A bare `unix://`
    is `default_unix`."""
    if url in ("stdio://", "stdio"):
        return ListenAddress("stdio")
    if url.startswith("unix://"):
        path = url[len("unix://") :] or default_unix
        return ListenAddress("unix", path=os.path.abspath(path))
    if url.startswith("ws://"):
        return _ws(url, url[len("ws://") :])
    raise ValueError(f"--listen {url}: expected stdio://, ws://IP:PORT or unix://PATH")


def _ws(url: str, rest: str) -> ListenAddress:
    host, sep, port_text = rest.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"--listen {url}: expected ws://IP:PORT (port 0 picks a free one)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"--listen {url}: {host!r} is not an IP address (names such as localhost are not "
            "resolved: use 127.0.0.1 or [::1])"
        ) from None
    return ListenAddress("ws", host=str(ip), port=int(port_text))
