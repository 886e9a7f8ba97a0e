"""A backend whose threads are sessions of a shared ACP agent (`AcpPool`)."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from ....protocol import Model, ReasoningEffortOption
from ... import base as b
from ...spec import BackendSpec
from .host import AcpHost
from .offer import SessionOffer
from .pool import AcpPool
from .session import AcpSession

__all__ = ["AcpAgent", "PooledAcpBackend", "offered_models", "open_acp_session"]


def offered_models(spec: BackendSpec, offer: SessionOffer) -> list[Model]:
    """`model/list` from what an agent offered a new session: its models (the one it
    started with is the default) and the efforts of its `thought_level` option, if any."""
    models = list(offer.models)
    current = offer.current_model
    if current and all(model_id != current for model_id, _, _ in models):
        models.insert(0, (current, current, "the model the agent runs by default"))
    effort = offer.option("thought_level")
    efforts = [(value, name) for value, name in effort.values] if effort else list(spec.efforts)
    default_effort = (effort.current if effort else None) or spec.default_effort
    return [
        Model(
            id=f"{spec.id}/{model_id}",
            model=model_id,
            display_name=name,
            description=description or name,
            hidden=False,
            is_default=model_id == current,
            default_reasoning_effort=default_effort,
            supported_reasoning_efforts=[
                ReasoningEffortOption(reasoning_effort=e, description=d) for e, d in efforts
            ],
        )
        for model_id, name, description in models
    ]


@dataclass(frozen=True)
class AcpAgent:
    """How a thread's agent process runs: its command line and environment, and `key_extra`,
    what else keeps two threads off one agent (as `AcpPool.host`)."""

    argv: Sequence[str]
    env: dict[str, str]
    key_extra: str = ""


def own_env_key(own: dict[str, str]) -> str:
    """What tells threads with other variables of their own apart (a digest: no value)."""
    if not own:
        return ""
    digest = hashlib.sha256(json.dumps(sorted(own.items())).encode()).hexdigest()
    return "\0env:" + digest


@asynccontextmanager
async def open_acp_session(
    pool: AcpPool,
    settings: b.SessionSettings,
    agent: AcpAgent,
    new_session: Callable[[AcpHost, b.SessionSettings], AcpSession],
) -> AsyncIterator[AcpSession]:
    """The thread's session (`new_session`, opened) on the pool's `agent` in the thread's cwd."""
    async with (
        pool.host(
            agent.argv,
            settings.cwd,
            agent.env,
            key_extra=agent.key_extra + own_env_key(settings.own_env),
            session_id=settings.backend_session_id,
        ) as host,
        new_session(host, settings).opened() as session,
    ):
        try:
            yield session
        finally:
            # The idle policy waited already: an agent whose last thread it released goes.
            host.linger = not session.released


class PooledAcpBackend(b.Backend):
    """A backend with one `AcpPool`, run in the server's nursery once attached. A thread's
    session runs on the pool's `agent()` as `new_session()` makes it; the `per_turn_mode`, if
    the CLI has one, runs the CLI once per turn instead (`per_turn_session()`)."""

    #: The mode that runs the CLI once per turn instead of as a pooled agent, if any.
    per_turn_mode: str | None = None

    def __init__(self, spec: BackendSpec, pool: AcpPool) -> None:
        super().__init__(spec)
        self._pool = pool
        self._offered: SessionOffer | None = None  # the last agent's models, once one ran

    async def list_models(self) -> list[Model]:
        """The models a running agent listed (the last one's, once none runs), else the
        spec's."""
        self._offered = self._pool.defaults or self._offered
        if self._offered is None or not self._offered.models:
            return self.models()
        return offered_models(self.spec, self._offered)

    def attach(self, nursery: trio.Nursery) -> None:
        self._pool.attach(nursery)

    @abc.abstractmethod
    def agent(self, settings: b.SessionSettings, binary: str) -> AcpAgent:
        """The agent process the thread's session runs on."""

    @abc.abstractmethod
    def new_session(self, host: AcpHost, settings: b.SessionSettings) -> AcpSession:
        """The thread's session on `host`, not yet opened."""

    def per_turn_session(self, settings: b.SessionSettings, binary: str) -> b.BackendSession:
        raise NotImplementedError(f"{self.id} has no per-turn mode")

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        binary = self.binary(settings)
        if settings.mode == self.per_turn_mode:
            yield self.per_turn_session(settings, binary)
            return
        agent = self.agent(settings, binary)
        async with open_acp_session(self._pool, settings, agent, self.new_session) as session:
            yield session
