"""B. The model API cannot be used: nothing listens on its port, its host name does not
resolve (as on a machine without network), the CLI has no credentials, or the API refuses
them (HTTP 401) while the CLI retries as it does by default.

The CLIs run with their default retries here (the e2e fixtures turn them off): by themselves
they retry an unreachable API for 25 s (codex) to minutes (claude, gemini, opencode), and
claude retries a 401 for minutes (codex 5 times). What a user must see: the turn fails well
before that (not half a minute of "Reconnecting..."): threadline gives up 8 s after the CLI's
first failed attempt, and `BOUND` adds room for the CLI's start and that first attempt (a DNS
lookup of several seconds) on a loaded 2-core machine. The turn names the URL tried
(`httpConnectionFailed`), or for credentials saying what to run or set (the backend's
`login_fix`, `unauthorized`; without credentials no request reaches the model). Each error
is said once. Timings per backend are printed (`-s`) and shown in the matrix (`-v`).
"""

from __future__ import annotations

import itertools
import socket
import time
from typing import Any

import pytest
import trio

from tests.matrix.harness import ALL_NAMES, Cells, Harness, HttpFail, Rule, TurnResult, run_turn
from threadline.backends.registry import SPECS

#: The bound for a turn whose model API cannot be used (below codex's own 25 s of retries).
BOUND = 20.0
UNREACHABLE = {"httpConnectionFailed": {"httpStatusCode": None}}
CLOSED, DNS, NO_KEY, NO_LOGIN, REFUSED = (
    "API unreachable (closed port)",
    "API unreachable (DNS)",
    "no credentials",
    "not logged in (codex's OpenAI provider)",
    "HTTP 401, the CLI's default retries",
)
CLIS = tuple(name for name in ALL_NAMES if SPECS[name.partition("-")[0]].cli)
#: The app-server asks Codex whether it is logged in (`account/read`); exec cannot.
CELLS = {
    name: [CLOSED, DNS, NO_KEY, REFUSED] + ([NO_LOGIN] if name == "codex" else []) for name in CLIS
}


def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cell_env(h: Harness, cell: str) -> tuple[dict[str, str], str | None]:
    """The server environment of a cell, and the URL its CLI tries (None: no request)."""
    if cell == CLOSED:
        url = f"http://127.0.0.1:{closed_port()}"
        return h.unreachable_env(url), url
    if cell == DNS:
        url = "http://threadline-no-such-host.invalid:8080"  # (.invalid never resolves)
        return h.unreachable_env(url), url
    if cell == NO_LOGIN:
        return h.logged_out_env(), None  # type: ignore[attr-defined]
    if cell == REFUSED:  # (claude retries a 401 for minutes; codex 5 times)
        return h.unreachable_env(h.env.fake.url), None
    return h.no_credentials_env(), None


def said_once(result: TurnResult) -> None:
    """The failure is announced once (the final `error`), and no notice repeats the one
    before it: the terminal shows them all."""
    error = result.turn["error"]
    finals = [
        e["params"]["error"]
        for e in result.events
        if e.get("method") == "error" and not e["params"]["willRetry"]
    ]
    assert finals == [error], finals
    notices = [
        (e["params"].get("error") or {}).get("message") or e["params"].get("message")
        for e in result.events
        if e.get("method") in ("error", "warning")
    ]
    repeats = [a for a, b in itertools.pairwise(notices) if a == b]
    assert not repeats, notices
    assert error.get("additionalDetails") != error["message"], error


def check(h: Harness, cell: str, url: str | None, result: TurnResult, took: float) -> str:
    """The cell's assertions; returns what the user saw."""
    assert result.status == "failed", result.turn
    error: dict[str, Any] = result.turn["error"]
    message = error["message"]
    assert "Traceback" not in message and "internal error" not in message, message
    if url is not None:
        assert error["codexErrorInfo"] == UNREACHABLE, error
        assert url.partition("//")[2] in message, message  # host and port
    else:
        assert error["codexErrorInfo"] == "unauthorized", error
        fix = SPECS[h.backend].login_fix
        assert fix is not None and message.count(fix) == 1, message
    if cell == REFUSED:
        assert "refused the credentials (HTTP 401 from http://127.0.0.1:" in message, message
    said_once(result)
    assert result.text == "", result.text  # the error is not shown as the model's answer
    assert took < BOUND, f"the turn took {took:.1f} s: {message}"
    return f"failed in {took:.1f} s: {message}"


@pytest.mark.parametrize("backend_name", CLIS)
async def test_api_unusable(nursery: trio.Nursery, backend: Harness) -> None:
    h = backend
    cells = Cells(h, "B")
    # (only the 401 cell reaches the model)
    h.script(Rule("hello", HttpFail(401, "invalid key (injected)")))
    for cell in CELLS[h.name]:
        async with cells.cell(cell):
            env, url = cell_env(h, cell)
            async with h.server(nursery, **env) as srv:
                await srv.initialize()
                tid = await h.thread(srv)
                before = h.calls()
                t0 = time.monotonic()
                result = await run_turn(srv, tid, h.prompt("hello"), timeout=120)
                took = time.monotonic() - t0
                cells.outcome = check(h, cell, url, result, took)
                if cell != REFUSED:
                    assert h.calls() == before, "a request reached the model"
    left = await h.wait_no_leftovers(5)
    assert left == [], left
    cells.check()
