"""A thread's overrides (model, approval policy, effort) applied to its live ACP session:
`session/set_model` or the `model` config option, `session/set_mode`, and the
`thought_level` config option (`session/set_config_option`)."""

from __future__ import annotations

from typing import Any

from ...base import ApprovalPolicy, SessionSettings
from .host import AcpError, AcpHost
from .offer import SessionOffer

__all__ = ["APPLIED_LIVE", "SessionControl"]

#: The override fields an ACP session applies itself (the others need a new session).
APPLIED_LIVE = frozenset({"model", "approvalPolicy", "effort"})


def _why(exc: AcpError) -> str:
    detail = exc.data.get("details") if isinstance(exc.data, dict) else None
    return f"{exc.message}: {detail}" if isinstance(detail, str) and detail else exc.message


class SessionControl:
    """Part of `AcpSession`: what the agent offers the session (`offer`) and the overrides
    applied to it. What cannot be applied and needs no new session is said in `notes` (the
    next turn shows them as warnings)."""

    host: AcpHost
    settings: SessionSettings
    backend_id: str
    session_id: str | None
    offer: SessionOffer
    notes: list[str]

    #: Whether a new approval policy can reach the live session (OpenCode's permissions are
    #: its process's environment: a new policy needs a new agent).
    live_approval: bool = True
    #: Whether the thread's model is set on the session (else the agent's command chooses it).
    applies_model: bool = True
    #: Whether a model the agent does not list can come with a new session (its command line
    #: names the model, as qwen's `--model`).
    model_by_restart: bool = False

    def approval_mode(self, policy: ApprovalPolicy) -> str | None:
        """Backend hook: the agent's session mode for an approval policy, or None (the
        policy needs no mode: the approval router applies it)."""
        return None

    async def apply_overrides(self, fields: frozenset[str], *, opening: bool) -> frozenset[str]:
        """Apply `fields` (`OVERRIDE_FIELDS`) to the session; those a new session must bring
        (the engine then reopens it). `opening`: the session was just opened (nothing to
        reopen: what cannot be applied is noted)."""
        left = set(fields - APPLIED_LIVE)
        if "model" in fields and self.applies_model and not await self._apply_model(opening):
            left.add("model")
        if "approvalPolicy" in fields and not await self._apply_approval(opening):
            left.add("approvalPolicy")
        if "effort" in fields:
            await self._apply_effort(opening)
        return frozenset(left)

    async def _set(self, method: str, params: dict[str, Any]) -> Any:
        return await self.host.request(method, {"sessionId": self.session_id, **params}, 30)

    def _default_model(self) -> str | None:
        """The model a session on this agent starts with (what `model: null` asks for)."""
        defaults = self.host.defaults
        return defaults.current_model if defaults is not None else None

    async def _apply_model(self, opening: bool) -> bool:
        wanted = self.settings.model
        if not wanted or wanted == "default":
            target = self._default_model()
            if target is None:
                return opening  # the agent's own default: a new session has it
        else:
            target = self.offer.find_model(wanted)
            if target is None and self.model_by_restart:
                return opening  # (an agent started for this model has it)
            if target is None and not self.offer.models:
                self.notes.append(
                    f"{self.backend_id}: the agent lists no models to switch to; model"
                    f" {wanted!r} is not applied (its own command-line flag can choose one)"
                )
                return True
            target = target or wanted
        if target == self.offer.current_model:
            return True
        try:
            option = self.offer.option("model")
            if option is not None and not self.offer.has_models_api:
                params = {"configId": option.id, "value": target}
                self.offer.read(await self._set("session/set_config_option", params))
            else:
                await self._set("session/set_model", {"modelId": target})
            self.offer.current_model = target
        except AcpError as exc:
            if self.model_by_restart and not opening:
                return False
            self.notes.append(
                f"{self.backend_id} did not switch to model {wanted or target!r} (it keeps"
                f" {self.offer.current_model or 'its model'}): {_why(exc)}"
            )
        return True

    async def _apply_approval(self, opening: bool) -> bool:
        if not opening and not self.live_approval:
            return False
        mode = self.approval_mode(self.settings.approval_policy)
        if mode is None or mode == self.offer.current_mode:
            return True
        try:
            await self._set("session/set_mode", {"modeId": mode})
        except AcpError as exc:
            if not opening:
                return False
            self.notes.append(f"{self.backend_id} did not switch to mode {mode}: {_why(exc)}")
            return True
        self.offer.current_mode = mode
        return True

    async def _apply_effort(self, opening: bool) -> None:
        effort = self.settings.effort
        option = self.offer.option("thought_level")
        values = [value for value, _ in option.values] if option is not None else []
        target = effort if effort else ("default" if "default" in values else None)
        if option is None or target is None or target == option.current:
            if option is None and effort and not opening:
                self.notes.append(
                    f"{self.backend_id}: the session's model offers no reasoning effort levels;"
                    f" effort {effort!r} is not applied"
                )
            return
        if target not in values:
            self.notes.append(
                f"{self.backend_id}: the model offers the efforts {', '.join(values)};"
                f" {target!r} is not one of them and is not applied"
            )
            return
        try:
            params = {"configId": option.id, "value": target}
            self.offer.read(await self._set("session/set_config_option", params))
        except AcpError as exc:
            self.notes.append(f"{self.backend_id} did not set effort {target!r}: {_why(exc)}")
