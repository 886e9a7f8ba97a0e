"""A backend whose threads are sessions of a shared ACP agent (`AcpPool`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import trio

from ... import base as b
from ...spec import BackendSpec
from .host import AcpHost
from .pool import AcpPool
from .session import AcpSession

__all__ = ["PooledAcpBackend", "open_acp_session"]


@asynccontextmanager
async def open_acp_session(
    pool: AcpPool,
    settings: b.SessionSettings,
    argv: Sequence[str],
    env: dict[str, str],
    new_session: Callable[[AcpHost, b.SessionSettings], AcpSession],
    key_extra: str = "",
) -> AsyncIterator[AcpSession]:
    """The thread's session (`new_session`, opened) on the pool's agent for `argv` in the
    thread's cwd (`key_extra`: as `AcpPool.host`)."""
    async with (
        pool.host(
            argv,
            settings.cwd,
            env,
            key_extra=key_extra,
            session_id=settings.backend_session_id,
        ) as host,
        new_session(host, settings).opened() as session,
    ):
        yield session


class PooledAcpBackend(b.Backend):
    """A backend with one `AcpPool`, run in the server's nursery once attached."""

    def __init__(self, spec: BackendSpec, pool: AcpPool) -> None:
        super().__init__(spec)
        self._pool = pool

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)
