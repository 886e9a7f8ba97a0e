"""Model-API failures that every backend reports alike: credentials the API refused (HTTP 401),
no credentials at all, and an API the CLI cannot reach.

Each message says what to do: the backend's fix from the catalog (`BackendSpec.login_fix`) for
credentials; the URL tried and the setting behind it for an unreachable API. The CLI's own
text goes in `additionalDetails`.

An unreachable API is retried by the CLIs for 25 s (codex) to minutes (claude, gemini,
opencode). `ConnectionWatch` decides when to stop: once the connection failures the CLI
reports have gone on for `CONNECT_BUDGET` seconds (counting its next attempt), with no answer
from the model in between; when the CLI's next attempt comes late (a slow DNS lookup, a long
backoff), `expired()` says so at the budget. A 429/5xx retry is never cut short by it: only
failures to connect count.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import trio

from ...protocol import TurnError
from ..spec import BackendSpec

__all__ = [
    "CONNECT_BUDGET",
    "UNREACHABLE_INFO",
    "ConnectionWatch",
    "is_connection_failure",
    "no_credentials",
    "refused",
    "refused_or_unreachable",
    "unreachable",
]

#: Seconds of connection failures (and nothing else) after which a turn is failed.
CONNECT_BUDGET = 8.0
#: What `codex app-server` reports for an API it cannot connect to.
UNREACHABLE_INFO: dict[str, Any] = {"httpConnectionFailed": {"httpStatusCode": None}}

#: The CLIs' words for "no connection" (claude, codex, gemini, opencode; DNS and refused).
_NO_CONNECTION = re.compile(
    r"unable to connect|cannot connect to api|connection ?refused|connection failed"
    r"|error sending request|fetch failed|failed to lookup address|name does not resolve"
    r"|getaddrinfo|enotfound|eai_again|econnrefused|network is unreachable|no route to host",
    re.IGNORECASE,
)


def is_connection_failure(text: str) -> bool:
    """Whether a CLI's error text says the API could not be connected to at all."""
    return bool(_NO_CONNECTION.search(text))


def _detail(text: str | None) -> str | None:
    return (text or "").strip() or None


def refused(spec: BackendSpec, url: str | None, detail: str | None, status: int = 401) -> TurnError:
    """The model API answered 401: the credentials the CLI sent are not valid."""
    where = f" from {url}" if url else ""
    return TurnError(
        message=f"{spec.display_name} refused the credentials (HTTP {status}{where}): "
        f"{spec.login_fix}",
        codex_error_info="unauthorized",
        additional_details=_detail(detail),
    )


def no_credentials(spec: BackendSpec, detail: str | None) -> TurnError:
    """The CLI has no credentials at all (it refused before sending a request)."""
    return TurnError(
        message=f"{spec.display_name} has no credentials for its model API: {spec.login_fix}",
        codex_error_info="unauthorized",
        additional_details=_detail(detail),
    )


def unreachable(
    spec: BackendSpec, url: str, check: str, detail: str | None, *, after: float | None = None
) -> TurnError:
    """The CLI could not connect to the model API at `url` (`check`: the setting behind it;
    `after`: the seconds of retries threadline stopped, if it did)."""
    why = f" (still failing after {after:.0f} s of retries)" if after is not None else ""
    return TurnError(
        message=f"{spec.display_name} cannot reach its model API at {url}{why}: check the "
        f"network connection and proxy settings, and {check}",
        codex_error_info=UNREACHABLE_INFO,
        additional_details=_detail(detail),
    )


def refused_or_unreachable(
    spec: BackendSpec,
    status: int | None,
    detail: str,
    url: str | None,
    check: str,
    *,
    after: float | None = None,
    no_connection: Callable[[str], bool] = is_connection_failure,
) -> TurnError | None:
    """The error that says what to do when the API refused the credentials (401) or could not
    be connected to (no status, and `no_connection` reads the CLI's words so), else None."""
    if status == 401:
        return refused(spec, url, detail)
    if status is None and no_connection(detail):
        return unreachable(spec, url or "its provider's base URL", check, detail, after=after)
    return None


class ConnectionWatch:
    """One turn's view of the CLI's failed attempts to reach the model API.

    `failed(next_delay)` for each connection failure the CLI reports (`next_delay`: when it
    tries again, if it says; else the gap since its previous failure is taken for it) returns
    True once the failures have gone on for the budget, counting that next attempt; any answer
    of the model (`progress()`) ends the series. `refused()` for each HTTP 401 the CLI retries
    returns True at the second (the first retry may follow a token refresh)."""

    def __init__(
        self, budget: float = CONNECT_BUDGET, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget
        self.clock = clock
        self.first_failure: float | None = None
        self.last_failure: float | None = None
        self.refusals = 0
        self._failing = trio.Event()  # set while a series of failures goes on

    def progress(self) -> None:
        if self.first_failure is None and not self.refusals:
            return  # (called for every streamed event: nothing to reset most of the time)
        self.first_failure = self.last_failure = None
        self.refusals = 0
        if self._failing.is_set():
            self._failing = trio.Event()

    def failed(self, next_delay: float | None = None) -> bool:
        now = self.clock()
        if next_delay is None:
            next_delay = 0.0 if self.last_failure is None else now - self.last_failure
        if self.first_failure is None:
            self.first_failure = now
            self._failing.set()
        self.last_failure = now
        return now - self.first_failure + next_delay > self.budget

    def refused(self) -> bool:
        self.refusals += 1
        return self.refusals >= 2

    async def expired(self) -> None:
        """Returns once a series of failures has lasted the budget with no progress."""
        while True:
            await self._failing.wait()
            first = self.first_failure
            if first is None:
                continue  # (progress since: `_failing` is a fresh event)
            left = self.budget - (self.clock() - first)
            if left <= 0:
                return
            await trio.sleep(left)

    def elapsed(self) -> float:
        """Seconds since the first failure of the series."""
        return 0.0 if self.first_failure is None else self.clock() - self.first_failure
