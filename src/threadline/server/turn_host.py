"""What a turn needs from the thread it runs in: the turn runner (`turns`, `turn_items`) knows
its thread only through this interface, so it never imports the thread (`threads.LoadedThread`
implements it)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

import trio

from ..backends.base import ApprovalDecision, ApprovalRequest, BackendSession
from ..protocol import BackendCapabilities, ToolRequestUserInputQuestion
from ..store import LogEntry

__all__ = ["TurnHost"]


class TurnHost(Protocol):
    @property
    def id(self) -> str:
        """The thread's id."""
        ...

    @property
    def backend_id(self) -> str: ...

    @property
    def capabilities(self) -> BackendCapabilities: ...

    @property
    def session(self) -> BackendSession | None:
        """The open session, if any (a turn interrupts it natively)."""
        ...

    @property
    def nursery(self) -> trio.Nursery:
        """Where the thread's turns and their helper tasks run."""
        ...

    @property
    def turn_timeout(self) -> float | None: ...

    @property
    def interrupt_grace(self) -> float:
        """How long a native interrupt gets before the turn is cancelled hard."""
        ...

    def notify(self, method: str, params: Any) -> Awaitable[None]: ...

    async def persist(self, entries: Sequence[LogEntry], *, sync: bool = False) -> None: ...

    async def ensure_session(self) -> BackendSession:
        """The thread's healthy session, opened (or reopened) when needed."""
        ...

    def mark_session_unhealthy(self, reason: str, *, cut_off: bool = False) -> None:
        """Have the session reopened after this turn; `cut_off`: the turn was cancelled
        without the CLI ending it (`BackendSession.cut_off`)."""
        ...

    async def take_context(self) -> str | None:
        """Injected history (`thread/inject_items`) the next turn delivers, once: taking it
        marks it delivered."""
        ...

    def pending_bootstrap(self) -> str | None:
        """The role bootstrap message the next turn delivers, if it has not been yet."""
        ...

    async def set_backend_session_id(self, session_id: str) -> None: ...

    async def mark_role_bootstrap_applied(self) -> None: ...

    async def request_approval(self, turn_id: str, request: ApprovalRequest) -> ApprovalDecision:
        """Decide by the thread's policy and rules, else ask the client (fail closed)."""
        ...

    async def ask_user(
        self, turn_id: str, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None: ...

    async def turn_started(self) -> None:
        """The turn begins its work: the thread is active."""
        ...

    async def turn_finished(self, turn_id: str) -> None:
        """The turn is over and persisted: the thread is idle again (called before
        `turn/completed` goes out)."""
        ...
