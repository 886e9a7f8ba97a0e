"""What a fresh interactive claude asks before its prompt, answered ahead in its own config.

Measured on claude 2.1.332 (offline, fresh CLAUDE_CONFIG_DIR): in turn it shows
- onboarding, which first checks that api.anthropic.com answers and exits offline ("Unable to
  connect to Anthropic services"): skipped by `hasCompletedOnboarding: true`;
- the folder trust dialog ("Quick safety check: Is this a project you ... trust?"): skipped by
  `projects[<cwd>].hasTrustDialogAccepted: true` (claude looks from the cwd up to its git root);
- "Detected a custom API key in your environment ... Do you want to use this API key?" (default
  answer No): skipped by the key's last 20 characters in `customApiKeyResponses.approved`,
  which is what claude itself records when a person answers Yes (and what its dialog shows);
- a notice that auto mode is the default permission mode (not blocking; threadline passes
  `--permission-mode default` so that claude asks before a tool runs, as stream mode does).
The config is `$CLAUDE_CONFIG_DIR/.claude.json`, else `~/.claude.json`; rewritten atomically,
mode 0600, every other key kept.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any

__all__ = ["config_path", "prepare_config"]

#: How much of the API key claude keeps to remember that its use was approved.
_KEY_SUFFIX = 20


def config_path(env: Mapping[str, str]) -> str:
    directory = env.get("CLAUDE_CONFIG_DIR")
    if directory:
        return os.path.join(directory, ".claude.json")
    return os.path.join(env.get("HOME") or os.path.expanduser("~"), ".claude.json")


def _load(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # (claude rewrites a broken config itself; ours then only adds our keys)
    return data if isinstance(data, dict) else {}


def _apply(data: dict[str, Any], cwd: str, api_key: str | None) -> bool:
    """Add the answers to `data`; whether anything changed."""
    before = json.dumps(data, sort_keys=True)
    data["hasCompletedOnboarding"] = True
    projects = data.get("projects")
    if not isinstance(projects, dict):
        projects = data["projects"] = {}
    for path in dict.fromkeys((cwd, os.path.realpath(cwd))):
        project = projects.get(path)
        if not isinstance(project, dict):
            project = projects[path] = {}
        project["hasTrustDialogAccepted"] = True
    if api_key and api_key.strip():
        responses = data.get("customApiKeyResponses")
        if not isinstance(responses, dict):
            responses = data["customApiKeyResponses"] = {}
        approved = responses.get("approved")
        if not isinstance(approved, list):
            approved = responses["approved"] = []
        suffix = api_key.strip()[-_KEY_SUFFIX:]
        if suffix not in approved:
            approved.append(suffix)
        rejected = responses.get("rejected")
        if isinstance(rejected, list) and suffix in rejected:
            rejected.remove(suffix)
    return json.dumps(data, sort_keys=True) != before


def prepare_config(env: Mapping[str, str], cwd: str) -> None:
    """Mark onboarding done, `cwd` trusted and the environment's API key approved in the
    config of the claude that `env` runs (OSError when it cannot be written)."""
    path = config_path(env)
    data = _load(path)
    if not _apply(data, cwd, env.get("ANTHROPIC_API_KEY")):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.threadline-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
