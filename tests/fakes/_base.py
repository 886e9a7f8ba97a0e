"""What every fake model server here shares: a threaded HTTP server bound to 127.0.0.1 on a
random port, its lifecycle (start / close / context manager / a maximum lifetime, so nothing can
outlive a test run), connection tracking (close cuts open streams and stalls short), and the
recording of requests and handler errors. Each fake adds its API's routes, script and
accessors."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

__all__ = ["FakeHTTPServer", "FakeHandler", "FakeServer"]


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeServer, handler: type[BaseHTTPRequestHandler]) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup (getfqdn); skip it, it can hang.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError) or self.fake._stopping.is_set():
            return  # the client went away (e.g. an interrupted CLI): expected
        self.fake._record_error(traceback.format_exc())


class FakeHandler(BaseHTTPRequestHandler):
    server: FakeHTTPServer
    protocol_version = "HTTP/1.1"  # chunked SSE, so a dropped stream is a visible error
    timeout = 120  # safety net for idle/preconnected sockets

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, threading.current_thread(), add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, threading.current_thread(), add=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean; every request is recorded instead

    def _pause(self, ms: int) -> bool:
        """Sleep `ms`; False if the fake is shutting down meanwhile."""
        return not self.server.fake._stopping.wait(ms / 1000) if ms > 0 else True

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class FakeServer:
    """Lifecycle and recording; `url` is the root of the fake API."""

    def __init__(
        self, handler: type[FakeHandler], script: Any, max_lifetime: float, label: str
    ) -> None:
        self._handler = handler
        self._label = label
        self._lock = threading.Condition()
        self._script = script
        self._requests: list[Any] = []
        self._errors: list[str] = []
        self._conns: dict[socket.socket, threading.Thread] = {}
        self._stopping = threading.Event()  # set first: cuts stalls and delays short
        self._closed = threading.Event()  # set last: the port is closed
        self._max_lifetime = max_lifetime
        self._server: FakeHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # -- lifecycle

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError(f"{self._label} already started")
        self._server = FakeHTTPServer(self, self._handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{self._label}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._timer = threading.Timer(self._max_lifetime, self.close)
        self._timer.daemon = True
        self._timer.start()
        return self

    def close(self) -> None:
        """Stop serving, cut stalls short, drop open connections, join handler threads.
        Idempotent and callable from any thread; returns once the port is closed."""
        with self._lock:
            first = not self._stopping.is_set()
            self._stopping.set()
            server = self._server
        if server is None:
            self._closed.set()
            return
        if not first:
            self._closed.wait(10)  # another thread (e.g. the lifetime timer) is closing
            return
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = dict(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5
        for thread in [*conns.values(), self._thread]:
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        self._closed.set()

    def __enter__(self) -> Self:
        return self if self._server is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{self._label} not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- inspection

    @property
    def errors(self) -> list[str]:
        """Tracebacks of unexpected handler failures (a test should expect none)."""
        with self._lock:
            return list(self._errors)

    # -- called by handler threads

    def _current_script(self) -> Any:
        with self._lock:
            return self._script

    def _record(self, request: Any) -> None:
        with self._lock:
            self._requests.append(request)
            self._lock.notify_all()

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _track(self, conn: socket.socket, thread: threading.Thread, *, add: bool) -> None:
        with self._lock:
            if add:
                self._conns[conn] = thread
            else:
                self._conns.pop(conn, None)
