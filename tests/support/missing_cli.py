"""A backend whose CLI is missing, seen by a client: thread/start is refused with the install
hint, and a thread whose CLI vanished fails each turn readably and stays usable."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from tests.support.client import ServerProcess, notifications
from threadline.backends.registry import SPECS


async def check_missing_cli(
    server: Callable[[], AbstractAsyncContextManager[ServerProcess]],
    backend: str,
    mode: str,
    cwd: Path,
) -> None:
    """`server()` starts a threadline whose CLIs are all there (a new one each call, on the
    same state directory)."""
    spec = SPECS[backend]
    missing = f"/nonexistent/{spec.cli}"
    install = f"npm install -g {spec.npm_package}@{spec.pinned_version}"
    async with server() as srv:
        await srv.initialize()
        error = await srv.error(
            "thread/start",
            {
                "modelProvider": backend,
                "cwd": str(cwd),
                "config": {"mode": mode, "cliPath": missing},
            },
        )
        assert f"not found at {missing}" in error["message"] and install in error["message"], error
        tid = await srv.start_thread(cwd, modelProvider=backend, config={"mode": mode})
    async with server() as srv:  # the CLI is gone when the thread comes back
        await srv.initialize()
        await srv.call("thread/resume", {"threadId": tid, "config": {"cliPath": missing}})
        for _ in range(2):  # the thread stays usable; the failure is the same every time
            done, events = await srv.run_turn(tid, "hello?", timeout=60)
            turn = done["params"]["turn"]
            assert turn["status"] == "failed", turn
            message = turn["error"]["message"]
            assert f"not found at {missing}" in message and install in message, message
            started = [e["params"]["item"]["type"] for e in notifications(events, "item/started")]
            assert started == ["userMessage"], started
        read = await srv.call("thread/read", {"threadId": tid, "includeTurns": True})
        assert [t["status"] for t in read["thread"]["turns"]] == ["failed", "failed"]
