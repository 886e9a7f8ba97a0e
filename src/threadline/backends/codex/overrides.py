"""A thread's settings as Codex takes them: `turn/start` overrides for the app-server (Codex
keeps them for later turns), flags for each `codex exec` spawn."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ... import protocol as p
from .. import base as b

__all__ = ["exec_setting_flags", "own_model", "sandbox_policy", "turn_overrides"]

#: A sandbox mode (`thread/start.sandbox`, `codex exec -s`) as Codex's `SandboxPolicy`.
_MODE_POLICY: dict[str, dict[str, Any]] = {
    "read-only": {"type": "readOnly"},
    "workspace-write": {"type": "workspaceWrite"},
    "danger-full-access": {"type": "dangerFullAccess"},
}
#: A `SandboxPolicy` type as a sandbox mode. An external sandbox is one Codex does not
#: sandbox inside of (as Codex itself runs it).
_POLICY_MODE = {
    "readOnly": "read-only",
    "workspaceWrite": "workspace-write",
    "dangerFullAccess": "danger-full-access",
    "externalSandbox": "danger-full-access",
}


def sandbox_policy(settings: b.SessionSettings) -> dict[str, Any] | None:
    """The thread's sandbox as Codex's `SandboxPolicy` (the full policy when a `turn/start`
    gave one, else its mode's), or None for Codex's default."""
    if settings.sandbox_policy is not None:
        policy: dict[str, Any] = msgspec.to_builtins(settings.sandbox_policy)
        return policy
    return _MODE_POLICY.get(settings.sandbox or "")


def own_model(settings: b.SessionSettings) -> str | None:
    """The thread's model for Codex; None for Codex's default (none set, or `default`)."""
    return settings.model if settings.model and settings.model != "default" else None


def turn_overrides(
    settings: b.SessionSettings, fields: set[str], default_model: str | None
) -> dict[str, Any]:
    """`turn/start` params for the override fields in `fields`, from `settings`. A model
    reset to the default is sent as the model Codex opened the thread with (`default_model`):
    Codex keeps the last model it was given otherwise."""
    params: dict[str, Any] = {}
    if "model" in fields and (own_model(settings) or default_model):
        params["model"] = own_model(settings) or default_model
    if "effort" in fields and settings.effort:
        params["effort"] = settings.effort
    if "summary" in fields and settings.summary:
        params["summary"] = settings.summary
    if "approvalPolicy" in fields:
        params["approvalPolicy"] = settings.approval_policy
    if "sandboxPolicy" in fields and (policy := sandbox_policy(settings)) is not None:
        params["sandboxPolicy"] = policy
    if "cwd" in fields:
        params["cwd"] = settings.cwd
    return params


def _workspace_flags(policy: p.SandboxPolicy | None) -> list[str]:
    """`-c sandbox_workspace_write.…` for a workspace-write policy's details."""
    if not isinstance(policy, p.WorkspaceWriteSandbox):
        return []
    values = {
        "writable_roots": policy.writable_roots,
        "network_access": policy.network_access,
        "exclude_tmpdir_env_var": policy.exclude_tmpdir_env_var,
        "exclude_slash_tmp": policy.exclude_slash_tmp,
    }
    return [
        flag
        for key, value in values.items()
        if value is not None
        for flag in ("-c", f"sandbox_workspace_write.{key}={json.dumps(value)}")
    ]


def exec_setting_flags(settings: b.SessionSettings) -> list[str]:
    """`codex exec` flags for the thread's model, reasoning and sandbox. The thread's sandbox
    when it has one; else read-only, or none at all under approval policy `never` (exec
    cannot ask anyway)."""
    flags: list[str] = []
    if model := own_model(settings):
        flags += ["--model", model]
    if settings.effort:
        flags += ["-c", f"model_reasoning_effort={json.dumps(settings.effort)}"]
    if settings.summary:
        flags += ["-c", f"model_reasoning_summary={json.dumps(settings.summary)}"]
    policy = sandbox_policy(settings)
    if policy is None and settings.approval_policy == "never":
        return [*flags, "--dangerously-bypass-approvals-and-sandbox"]
    mode = _POLICY_MODE.get(str((policy or {}).get("type")), "read-only")
    return [*flags, "-s", mode, *_workspace_flags(settings.sandbox_policy)]
