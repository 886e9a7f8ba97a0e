"""Whether the model API accepts connections, for a CLI that retries an unreachable API in
silence: `gemini --acp` (0.61.0) sends no update and writes nothing on stderr while it retries
(up to `general.maxAttempts`, default 10, with a backoff from 5 s: minutes), and its setting
can only come from the user's own settings files.

While the CLI waits on the model and has said nothing for `PROBE_AFTER` seconds, threadline
opens a TCP connection to the API's host and port itself (the one the CLI calls), every
`PROBE_EVERY` seconds; once those fail for the `ConnectionWatch` budget, the turn is given up.
An API that accepts the connection is left alone (checked again after `RECHECK` s of the same
silence). Nothing is probed when a proxy is configured: the CLI's path to the API is then not
ours to test.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from urllib.parse import urlsplit

import trio

from .api_errors import ConnectionWatch

__all__ = ["PROBE_AFTER", "PROBE_EVERY", "connect_error", "probe_target", "watch_api"]

PROBE_AFTER = 2.0
PROBE_EVERY = 2.0
PROBE_TIMEOUT = 3.0
RECHECK = 30.0
_PROXY = ("https_proxy", "http_proxy", "all_proxy")


def probe_target(url: str, env: dict[str, str]) -> tuple[str, int] | None:
    """(host, port) of `url`, or None when it cannot be probed (a proxy, no host)."""
    if any(env.get(v) or env.get(v.upper()) for v in _PROXY):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


async def connect_error(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why a TCP connection to host:port fails, or None when it is accepted."""
    try:
        with trio.fail_after(timeout):
            stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        return f"no answer from {host}:{port} within {timeout:.0f} s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
    await stream.aclose()
    return None


async def watch_api(
    target: tuple[str, int], watch: ConnectionWatch, quiet_since: Callable[[], float | None]
) -> str:
    """Return (with the last error) once connections to `target` have failed for the watch's
    budget. `quiet_since()`: the `trio.current_time()` since which the CLI has been waiting on
    the model in silence, or None while it is not (a tool runs, an approval is pending)."""
    silence: float | None = None
    probe_from = -math.inf
    while True:
        await trio.sleep(PROBE_EVERY)
        since = quiet_since()
        if since != silence:  # a new silence (the CLI said something): start over
            silence, probe_from = since, -math.inf
            watch.progress()
        now = trio.current_time()
        if since is None or now - since < PROBE_AFTER or now < probe_from:
            continue
        error = await connect_error(*target)
        if error is None:
            watch.progress()
            probe_from = trio.current_time() + RECHECK
        elif watch.failed():
            return error
