"""`turn/start`'s overrides (model, effort, summary, approvalPolicy, sandboxPolicy, cwd): they
change the thread's settings for this turn and later ones, as in Codex. Each goes the way the
mode declares (`BackendCapabilities.overrides`): `native`/`restart` fields are left for the
session to apply (`LoadedThread.pending_changes`), `unsupported` ones are not applied and a
warning names them. A model name of another provider is never passed to the CLI."""

from __future__ import annotations

import os
from typing import Any

import msgspec

from ..backends.base import Backend, SessionSettings
from ..protocol import (
    DangerFullAccessSandbox,
    ReadOnlySandbox,
    SandboxPolicy,
    TurnStartParams,
    WorkspaceWriteSandbox,
)
from ..rpc.errors import INVALID_PARAMS, RpcError
from .threads import LoadedThread

__all__ = ["EFFORTS", "SUMMARIES", "apply_overrides", "foreign_model_warning", "sandbox_mode"]

EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
SUMMARIES = ("auto", "concise", "detailed", "none")


def sandbox_mode(policy: SandboxPolicy) -> str:
    """The sandbox mode (`thread/start.sandbox`) a Codex sandbox policy amounts to."""
    if isinstance(policy, ReadOnlySandbox):
        return "read-only"
    if isinstance(policy, WorkspaceWriteSandbox):
        return "workspace-write"
    if isinstance(policy, DangerFullAccessSandbox):
        return "danger-full-access"
    return "danger-full-access"  # externalSandbox: the process is sandboxed from outside


def foreign_model_warning(backend: Backend, model: str, keeps: str | None) -> str:
    return (
        f"model {model!r} is not a {backend.id} model (it names another provider's); it is "
        f"not passed to the {backend.id} CLI, which uses "
        + (f"the thread's model {keeps!r}" if keeps else "its default model")
    )


def _choice(value: str, allowed: tuple[str, ...], field: str) -> str:
    if value not in allowed:
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params for turn/start: {field} {value!r} is not one of " + ", ".join(allowed),
        )
    return value


def _cwd(value: str) -> str:
    if not os.path.isabs(value) or not os.path.isdir(value):
        raise RpcError(
            INVALID_PARAMS,
            f"Invalid params for turn/start: cwd is not an absolute directory: {value!r}",
        )
    return os.path.normpath(value)


def _requested(p: TurnStartParams, s: SessionSettings, policy: str | None) -> dict[str, Any]:
    """The override fields `p` sets to a value different from the thread's."""
    wanted: dict[str, Any] = {}
    if p.model is not None and p.model != s.model:
        wanted["model"] = p.model
    if p.effort is not None and _choice(p.effort, EFFORTS, "effort") != s.effort:
        wanted["effort"] = p.effort
    if p.summary is not None and _choice(p.summary, SUMMARIES, "summary") != s.summary:
        wanted["summary"] = p.summary
    if policy is not None and policy != s.approval_policy:
        wanted["approvalPolicy"] = policy
    if p.sandbox_policy is not None and p.sandbox_policy != s.sandbox_policy:
        wanted["sandboxPolicy"] = p.sandbox_policy
    if p.cwd is not None and _cwd(p.cwd) != s.cwd:
        wanted["cwd"] = _cwd(p.cwd)
    return wanted


def _set(thread: LoadedThread, field: str, value: Any) -> None:
    s = thread.settings
    if field == "model":
        s.model = thread.record.model = value
    elif field == "effort":
        s.effort = value
    elif field == "summary":
        s.summary = value
    elif field == "approvalPolicy":
        thread.set_approval_policy(value)
    elif field == "sandboxPolicy":
        s.sandbox_policy, s.sandbox = value, sandbox_mode(value)
    elif field == "cwd":
        s.cwd = thread.record.cwd = value


def apply_overrides(thread: LoadedThread, p: TurnStartParams, policy: str | None) -> list[str]:
    """Apply `p`'s overrides to the thread; the warnings to send (fields left unapplied)."""
    backend, caps = thread.backend, thread.capabilities
    warnings = []
    wanted = _requested(p, thread.settings, policy)
    model = wanted.get("model")
    if model is not None and backend.foreign_model(model):
        warnings.append(foreign_model_warning(backend, model, thread.settings.model))
        del wanted["model"]
    for field, value in wanted.items():
        how = caps.overrides.get(field, "unsupported")
        if how == "unsupported":
            shown = msgspec.json.encode(value).decode() if not isinstance(value, str) else value
            warnings.append(
                f"turn/start.{field} ({shown[:80]}) cannot be applied on the {backend.id} backend"
                f" ({thread.settings.mode} mode); it is ignored"
            )
            continue
        _set(thread, field, value)
        thread.pending_changes.add(field)
    return warnings
