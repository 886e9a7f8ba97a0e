"""The generic ACP backend: any agent that speaks the Agent Client Protocol over stdio.

The thread names the agent's command (`config.command`, with `config.env` over threadline's
environment), or the operator does (AGENT_BACKEND=acp, BACKEND_CLI_PATH, BACKEND_CLI_ARGS).
Threads running the same command in the same cwd and environment share one agent process
(the kit's `AcpPool`). Everything else is the kit's ACP client as is: an agent that needs
quirks of its own gets a backend of its own (`gemini`, `opencode`)."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from ...protocol import Model
from .. import base as b
from ..kit.acp import AcpAgent, AcpHost, AcpPool, AcpSession, open_acp_session
from ..kit.acp.backend import offered_models
from ..kit.acp.offer import SessionOffer
from .command import agent_command, agent_env, env_key
from .session import GenericAcpSession
from .spec import SPEC

__all__ = ["AcpBackend", "create"]


class AcpBackend(b.Backend):
    honours_cli_args = True
    # The client names the agent's command too: its environment is the client's as well.
    config_env_is_own = True

    def __init__(self) -> None:
        super().__init__(SPEC)
        self._nursery: trio.Nursery | None = None
        self._pools: dict[str, AcpPool] = {}  # by command, named after it in messages
        self._offered: SessionOffer | None = None

    def attach(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        for pool in self._pools.values():
            pool.attach(nursery)

    def _pool(self, command: list[str]) -> AcpPool:
        name = shlex.join(command)
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = AcpPool(name)
            if self._nursery is not None:
                pool.attach(self._nursery)
        return pool

    def cli_command(self, settings: b.SessionSettings) -> str:
        env_key(settings)  # (a malformed config.env is refused as early as the command)
        return agent_command(settings)[0]

    def unsupported_options(self, settings: b.SessionSettings) -> list[str]:
        ignored = super().unsupported_options(settings)
        if settings.model and settings.model != "default":
            ignored.append("model (BACKEND_MODEL): put the agent's own model flag in its command")
        return ignored

    async def list_models(self) -> list[Model]:
        """The models the last agent that ran listed, else the spec's ("the agent's own")."""
        offers = [pool.defaults for pool in self._pools.values() if pool.defaults]
        self._offered = offers[-1] if offers else self._offered
        if self._offered is None or not self._offered.models:
            return self.models()
        return offered_models(self.spec, self._offered)

    @asynccontextmanager
    async def session(self, settings: b.SessionSettings) -> AsyncIterator[b.BackendSession]:
        try:
            command, env = agent_command(settings), agent_env(settings)
        except b.ConfigInvalid as exc:
            raise b.BackendError(str(exc), codex_error_info="other") from None
        agent = AcpAgent([self.binary(settings), *command[1:]], env, env_key(settings))

        def new_session(host: AcpHost, settings: b.SessionSettings) -> AcpSession:
            return GenericAcpSession(host, settings, command)

        async with open_acp_session(self._pool(command), settings, agent, new_session) as session:
            yield session


def create() -> AcpBackend:
    return AcpBackend()
