"""A trio loop on a background thread, for servers that outlive one hypothesis example.

Hypothesis runs each example as a plain function call, and trio objects (a process, a socket)
belong to one `trio.run`; so the server and its connections live in a loop on a thread, opened by
an async context manager, and each example calls in with `run` (`trio.from_thread.run`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Generic, TypeVar

import trio
import trio.from_thread
import trio.lowlevel

T = TypeVar("T")
V = TypeVar("V")


class LoopThread(Generic[V]):
    """`start()` enters `opener()` in a new loop and returns its value; `close()` leaves it
    (and raises what the loop raised)."""

    def __init__(self, name: str, opener: Callable[[], AbstractAsyncContextManager[V]]) -> None:
        self.name = name
        self._opener = opener
        self._value: V | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with self._opener() as value:
            self._value = value
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def start(self) -> V:
        self._thread = threading.Thread(target=self._thread_main, name=self.name, daemon=True)
        self._thread.start()
        if not self._ready.wait(120) or self._error is not None or self._value is None:
            raise AssertionError(f"{self.name}: the server did not start: {self._error!r}")
        return self._value

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def close(self) -> None:
        if self._thread is None:
            return
        if self._token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(120)
        thread, self._thread = self._thread, None
        if thread.is_alive():
            raise AssertionError(f"{self.name}: the server's loop did not finish")
        if self._error is not None:
            raise self._error
