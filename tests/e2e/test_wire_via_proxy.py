"""tests/e2e/test_wire.py again, each test's server replaced by `threadline proxy` in front of
a server listening on a unix socket (same state directory and environment): the wire rules a
stdio client relies on hold through the proxy and the WebSocket listener."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import tests.support.client as client_support
from tests.e2e.test_wire import *  # noqa: F403 - the tests to run again
from tests.support.client import server_argv
from tests.support.ws_client import listening_server

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
async def via_proxy(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    path = tmp_path / "wire.sock"
    argv = [*server_argv(), "proxy", "--listen", f"unix://{path}"]
    started: list[list[str]] = []

    def proxy_argv() -> list[str]:
        started.append(argv)
        return argv

    async with listening_server(home, f"unix://{path}"):
        monkeypatch.setattr(client_support, "server_argv", proxy_argv)
        yield
    assert started, "the test started no server through the proxy"
