"""The approval router: every tool approval a backend asks for goes through here.

Order of decision: the thread's policy (`never` auto-approves), the thread's rules (allow/deny
by kind, tool and command pattern, decided in-process), earlier `acceptForSession` answers, and
only then the client, through a server→client request. Fail closed: an error response, a
malformed answer, a timeout, or a client that went away all decide `decline`.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

import msgspec
import trio

from ..backends.base import ApprovalDecision, ApprovalPolicy, ApprovalRequest
from ..protocol import (
    ApprovalAutoDecidedNotification,
    CommandExecutionRequestApprovalParams,
    FileChangeRequestApprovalParams,
    ThreadActiveFlag,
    ToolRequestApprovalParams,
    ToolRequestUserInputParams,
    ToolRequestUserInputQuestion,
    ToolRequestUserInputResponse,
)
from ..rpc.peer import Peer, PeerResponse
from .asking import ask_client

__all__ = ["ApprovalRouter", "ApprovalRule", "parse_decision", "parse_rules"]

log = logging.getLogger("threadline.approvals")

_DECISIONS = frozenset({"accept", "acceptForSession", "decline", "cancel"})
_METHOD = {
    "command": "item/commandExecution/requestApproval",
    "fileChange": "item/fileChange/requestApproval",
    "tool": "item/tool/requestApproval",
}


class ApprovalRule(msgspec.Struct, kw_only=True, rename="camel"):
    """One in-process rule, from `thread/start.config.approvalRules`. Globs (fnmatch) on the
    tool name and the command line; every given field must match; first match wins."""

    decision: Literal["accept", "decline"]
    kind: Literal["command", "fileChange", "tool"] | None = None
    tool: str | None = None
    command: str | None = None

    def matches(self, request: ApprovalRequest) -> bool:
        if self.kind is not None and self.kind != request.kind:
            return False
        if self.tool is not None and not fnmatch.fnmatchcase(request.tool or "", self.tool):
            return False
        return self.command is None or (
            request.command is not None and fnmatch.fnmatchcase(request.command, self.command)
        )

    def describe(self) -> str:
        parts = [
            f"{k}={v}"
            for k, v in (("kind", self.kind), ("tool", self.tool), ("command", self.command))
            if v is not None
        ]
        return f"{self.decision} " + (" ".join(parts) or "*")


def parse_rules(raw: Any) -> list[ApprovalRule]:
    """Validate `config.approvalRules`; raises ValueError with a readable message."""
    if raw is None:
        return []
    try:
        return msgspec.convert(raw, list[ApprovalRule])
    except msgspec.ValidationError as exc:
        raise ValueError(f"config.approvalRules: {exc}") from None


def _is_decision(value: object) -> TypeGuard[ApprovalDecision]:
    return isinstance(value, str) and value in _DECISIONS


def parse_decision(response: PeerResponse) -> ApprovalDecision:
    """The client's answer → a decision; anything unexpected is `decline`."""
    if response.error is not None or not response.result:
        return "decline"
    try:
        payload = msgspec.json.decode(response.result)
    except msgspec.DecodeError:
        return "decline"
    decision = payload.get("decision") if isinstance(payload, dict) else None
    if _is_decision(decision):
        return decision
    if isinstance(decision, dict) and len(decision) == 1:
        # Codex's amendment forms approve the command (we do not persist the amendment).
        (key,) = decision
        if key in ("acceptWithExecpolicyAmendment", "applyNetworkPolicyAmendment"):
            return "accept"
    return "decline"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Pending:
    item_id: str
    flag: ThreadActiveFlag


class ApprovalRouter:
    """Per-thread router (the thread's policy comes with each decision). `set_flags` is
    called with the thread's active flags whenever the set of pending requests changes (the
    engine turns it into `thread/status/changed`)."""

    def __init__(
        self,
        peer: Peer,
        thread_id: str,
        *,
        rules: Sequence[ApprovalRule] = (),
        timeout: float | None = None,
        set_flags: Callable[[list[ThreadActiveFlag]], Awaitable[None]],
    ) -> None:
        self._peer = peer
        self.thread_id = thread_id
        self.rules = list(rules)
        self.timeout = timeout
        self._set_flags = set_flags
        self._pending: dict[int, _Pending] = {}
        self._session_allowed: set[tuple[str, str]] = set()

    def awaiting(self, item_id: str) -> bool:
        """True while an approval for `item_id` is pending (the tool has not run)."""
        return any(p.item_id == item_id for p in self._pending.values())

    def _flags(self) -> list[ThreadActiveFlag]:
        return sorted({p.flag for p in self._pending.values()})

    @staticmethod
    def _session_key(request: ApprovalRequest) -> tuple[str, str]:
        return (request.kind, request.command or request.tool or "")

    async def _auto(
        self,
        turn_id: str,
        request: ApprovalRequest,
        decision: ApprovalDecision,
        reason: Literal["policy", "rule", "timeout", "noClient"],
        rule: str | None = None,
    ) -> ApprovalDecision:
        await self._peer.notify(
            "item/approval/autoDecided",
            ApprovalAutoDecidedNotification(
                thread_id=self.thread_id,
                turn_id=turn_id,
                item_id=request.item_id,
                method=_METHOD[request.kind],
                decision=decision,
                reason=reason,
                rule=rule,
            ),
        )
        return decision

    async def decide(
        self,
        turn_id: str,
        request: ApprovalRequest,
        *,
        policy: ApprovalPolicy,
        started_at_ms: int | None = None,
    ) -> ApprovalDecision:
        """Decide by the thread's `policy`, its rules, earlier `acceptForSession` answers, else
        by asking the client."""
        if policy == "never":
            return await self._auto(turn_id, request, "accept", "policy")
        for rule in self.rules:
            if rule.matches(request):
                return await self._auto(turn_id, request, rule.decision, "rule", rule.describe())
        if self._session_key(request) in self._session_allowed:
            return await self._auto(turn_id, request, "accept", "rule", "acceptForSession")

        started = started_at_ms if started_at_ms is not None else _now_ms()
        # Every approval request names its thread, turn and item, and when it started.
        about: dict[str, Any] = {
            "thread_id": self.thread_id,
            "turn_id": turn_id,
            "item_id": request.item_id,
            "started_at_ms": started,
            "reason": request.reason,
        }
        params: Any
        if request.kind == "command":
            params = CommandExecutionRequestApprovalParams(
                **about,
                command=request.command,
                cwd=request.cwd,
                command_actions=request.command_actions,
            )
        elif request.kind == "fileChange":
            params = FileChangeRequestApprovalParams(**about, grant_root=request.grant_root)
        else:
            params = ToolRequestApprovalParams(
                **about, tool=request.tool or "unknown", arguments=request.arguments
            )
        response, timed_out = await self._ask(
            _METHOD[request.kind], params, request.item_id, "waitingOnApproval"
        )
        if timed_out:
            return await self._auto(turn_id, request, "decline", "timeout")
        if response is None:
            return await self._auto(turn_id, request, "decline", "noClient")
        decision = parse_decision(response)
        if decision == "acceptForSession":
            self._session_allowed.add(self._session_key(request))
        return decision

    async def ask_user(
        self, turn_id: str, item_id: str, questions: Sequence[ToolRequestUserInputQuestion]
    ) -> dict[str, list[str]] | None:
        params = ToolRequestUserInputParams(
            thread_id=self.thread_id,
            turn_id=turn_id,
            item_id=item_id,
            is_blocking=True,
            questions=list(questions),
        )
        response, _timed_out = await self._ask(
            "item/tool/requestUserInput", params, item_id, "waitingOnUserInput"
        )
        if response is None or response.error is not None or not response.result:
            return None
        try:
            parsed = msgspec.json.decode(response.result, type=ToolRequestUserInputResponse)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        return {qid: answer.answers for qid, answer in parsed.answers.items()}

    async def _ask(
        self, method: str, params: Any, item_id: str, flag: ThreadActiveFlag
    ) -> tuple[PeerResponse | None, bool]:
        """Send the request; return (response or None if the client is gone, timed_out).
        The active flags say what is pending meanwhile."""
        rid = self._peer.allocate_id()
        self._pending[rid] = _Pending(item_id, flag)
        await self._set_flags(self._flags())
        try:
            asked = await ask_client(
                self._peer, method, params, thread_id=self.thread_id, rid=rid, timeout=self.timeout
            )
            return asked.response, asked.timed_out
        finally:
            del self._pending[rid]
            with trio.CancelScope(shield=True):
                await self._set_flags(self._flags())
