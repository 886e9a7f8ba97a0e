"""What every fake model server here shares: a threaded HTTP server bound to 127.0.0.1 on a
random port, its lifecycle (start / close / context manager / a maximum lifetime, so nothing can
outlive a test run), connection tracking (close cuts open streams and stalls short), the
recording of requests and handler errors, and the HTTP of an answer (a JSON body, or a chunked
SSE stream paced by `Pace`). Each fake adds its API's routes, wire encoding and accessors; the
scripted rules that choose an answer are tests/fakes/_script.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import socketserver
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

__all__ = [
    "REDACTED",
    "Abort",
    "FakeHTTPServer",
    "FakeHandler",
    "FakeServer",
    "Pace",
    "RecordedBase",
    "pieces",
    "request_id",
    "secret_digest",
]

REDACTED = "<redacted>"


def secret_digest(value: str) -> str:
    """How a fake remembers a secret it was sent (`FakeServer.secrets_seen`)."""
    return hashlib.sha256(value.encode()).hexdigest()


class Abort(Exception):
    """Stop writing this response and drop the connection."""


def request_id() -> str:
    return f"req_fake{uuid.uuid4().hex[:20]}"


def pieces(text: str, size: int) -> Iterator[str]:
    """`text` in chunks of `size` characters (what one streamed delta carries)."""
    return (text[i : i + size] for i in range(0, len(text), size))


@dataclass(frozen=True)
class RecordedBase:
    """One request as a fake saw it (secret header values redacted)."""

    method: str
    path: str  # with query string
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    rule: str | None = None  # label of the rule that answered (model calls only)
    step: int | None = None  # step index k within that rule

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    def body_list(self, key: str) -> list[dict[str, Any]]:
        """The objects listed under `key` in the JSON body ([] if none)."""
        if not isinstance(self.body, dict):
            return []
        return [m for m in self.body.get(key) or () if isinstance(m, dict)]

    def locate(self) -> tuple[str, int]:
        """(the latest human text, model calls since it): what picks the rule and its step."""
        raise NotImplementedError

    @property
    def human_text(self) -> str:
        """Text of the latest human user message: what rules are matched against."""
        return self.locate()[0]


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
    """Reads every request whole (one per connection), redacts its secret headers and hands it
    to `answer`; `Abort` there drops the connection."""

    server: FakeHTTPServer
    protocol_version = "HTTP/1.1"  # chunked SSE, so a dropped stream is a visible error
    timeout = 120  # safety net for idle/preconnected sockets
    #: header names whose values are recorded as REDACTED
    secret_headers: ClassVar[frozenset[str]] = frozenset()
    #: the header carrying a fresh request id in every answer (None: none)
    request_id_header: ClassVar[str | None] = "x-request-id"
    json_type: ClassVar[str] = "application/json"
    #: the API's error, `http_error(status, message).body` its JSON body
    http_error: ClassVar[type]

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

    def do_POST(self) -> None:
        self.close_connection = True  # one request per connection: no keep-alive races
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None  # e.g. a compressed body: recorded as None
        headers = {
            k.lower(): (REDACTED if k.lower() in self.secret_headers else v)
            for k, v in self.headers.items()
        }
        for k, v in self.headers.items():
            if k.lower() in self.secret_headers:
                self.server.fake.secrets_seen.add(secret_digest(v.removeprefix("Bearer ")))
        try:
            self.answer(headers, body)
        except Abort:
            self._drop()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_POST

    def answer(self, headers: dict[str, str], body: Any) -> None:
        """Route and answer the request (`self.command`, `self.path`)."""
        raise NotImplementedError

    def _refused(self, request: RecordedBase, body: Any, routed: bool) -> bool:
        """Record and refuse a request no route takes (404) or whose body is no JSON object
        (400), in the API's error shape; False for a request to answer."""
        if routed and isinstance(body, dict):
            return False
        self.server.fake._record(request)
        if not routed:
            message = f"fake: no route for {self.command} {request.path}"
            self._send_json(404, self.http_error(404, message).body)
        else:
            self._send_json(400, self.http_error(400, "fake: body must be a JSON object").body)
        return True

    # -- I/O

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _send_json(self, status: int, payload: Any, extra: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", self.json_type)
        self.send_header("content-length", str(len(data)))
        if self.request_id_header is not None:
            self.send_header(self.request_id_header, request_id())
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _start_stream(self, content_type: str = "text/event-stream; charset=utf-8") -> None:
        """The head of a 200 answer whose body is chunks (`_write_chunk`, `_end_stream`)."""
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("cache-control", "no-cache")
        if self.request_id_header is not None:
            self.send_header(self.request_id_header, request_id())
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def _pause(self, ms: int) -> bool:
        """Sleep `ms`; False if the fake is shutting down meanwhile."""
        return not self.server.fake._stopping.wait(ms / 1000) if ms > 0 else True

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


class Pace:
    """How a streamed answer's deltas go out: `delay_ms` between them; after the first, the
    connection dropped (`close_midstream`) or a stall of `stall_ms` (a shutdown or, where the
    handler can tell, a client hang-up cuts it short and drops the connection)."""

    def __init__(
        self, handler: FakeHandler, delay_ms: int, close_midstream: bool, stall_ms: int
    ) -> None:
        self.h = handler
        self.delay_ms, self.close_midstream, self.stall_ms = delay_ms, close_midstream, stall_ms
        self.sent = 0

    def send(self, write: Callable[..., None], *args: Any, last: bool = False) -> None:
        """Write one delta with `write(*args)`; the cut or stall after the first never follows
        the answer's `last` delta."""
        if self.sent and not self.h._pause(self.delay_ms):
            raise Abort
        write(*args)
        self.sent += 1
        if self.sent == 1 and not last:
            if self.close_midstream:
                raise Abort
            if self.stall_ms and not self.h._pause(self.stall_ms):
                raise Abort


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
        #: SHA-256 digests of the secret header values seen (the values are never kept).
        self.secrets_seen: set[str] = set()

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
