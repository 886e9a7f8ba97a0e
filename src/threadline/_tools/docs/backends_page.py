"""`backends.md`: the backend matrix, from what each backend's code reports (`modes`,
`default_mode`, `capabilities(mode)`) and the registry's specs, never hand-kept claims."""

from __future__ import annotations

from ...backends.acp.agents import KNOWN_AGENTS
from ...backends.base import Backend
from ...backends.instances import create_backends
from ...backends.registry import SPECS
from ...backends.spec import OVERRIDE_FIELDS
from .markdown import HEADER, cell, table, yes
from .prose import (
    ACP_AGENTS_INTRO,
    BACKENDS_COLUMNS,
    BACKENDS_INTRO,
    CONTROL_COLUMNS,
    CONTROL_INTRO,
    INVOCATION_INTRO,
    VERSIONS_INTRO,
)

__all__ = ["render_backends"]


def render_backends() -> str:
    """The page: one matrix row per backend and mode, then each backend's invocations."""
    backends = list(create_backends().values())
    out = [HEADER, *BACKENDS_INTRO, "", "## Matrix", "", *_matrix(backends), ""]
    out += [*BACKENDS_COLUMNS, "", "## Control surface", "", *CONTROL_INTRO, ""]
    out += [*_control(backends), "", *CONTROL_COLUMNS, ""]
    out += ["## Invocation and role injection", "", *INVOCATION_INTRO, ""]
    for backend in backends:
        out += _invocations(backend)
    out += _acp_agents()
    out += _versions_tested()
    return "\n".join(out).rstrip("\n") + "\n"


def _default_mark(backend: Backend, mode: str) -> str:
    return " (default)" if mode == backend.default_mode else ""


def _matrix(backends: list[Backend]) -> list[str]:
    header = ["backend", "mode", "approvals", "cancel", "resume", "streamed deltas"]
    rows = []
    for backend in backends:
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            rows.append(
                [
                    f"`{backend.id}`",
                    f"`{mode}`{_default_mark(backend, mode)}",
                    "interactive" if caps.approvals else "policy only",
                    "native interrupt" if caps.interrupt else "kill process group",
                    *(yes(flag) for flag in (caps.resume, caps.deltas, caps.reasoning)),
                    _images(caps.images, caps.image_urls),
                ]
            )
    return table([*header, "reasoning", "images"], rows)


def _images(images: bool, urls: bool) -> str:
    if not images:
        return "no"
    return "yes" if urls else "files and data: URLs"


def _control(backends: list[Backend]) -> list[str]:
    """Per mode: how each `turn/start` override is applied, and which control requests work."""
    header = ["backend", "mode", *(f"`{f}`" for f in OVERRIDE_FIELDS), "`outputSchema`"]
    header += ["steer", "fork", "compact", "injectItems"]
    rows = []
    for backend in backends:
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            how = [caps.overrides.get(field, "unsupported") for field in OVERRIDE_FIELDS]
            rows.append(
                [
                    f"`{backend.id}`",
                    f"`{mode}`{_default_mark(backend, mode)}",
                    *("warning" if h == "unsupported" else h for h in how),
                    "yes" if caps.output_schema else "warning",
                    *(yes(flag) for flag in (caps.steer, caps.fork, caps.compact)),
                    caps.inject_items,
                ]
            )
    return table(header, rows)


def _invocations(backend: Backend) -> list[str]:
    """How threadline runs the backend's CLI in each mode, and how the role reaches it."""
    rows = []
    for mode in backend.modes:
        caps = backend.capabilities(mode)
        rows.append(
            [
                f"`{mode}`{_default_mark(backend, mode)}",
                cell(caps.invocation) or "—",
                cell(caps.role_injection) or "—",
            ]
        )
    heading = [f"### `{backend.id}` — {backend.display_name}", ""]
    return [*heading, *table(["mode", "invocation", "role injection"], rows), ""]


def _acp_agents() -> list[str]:
    """The agents known to work through the generic `acp` backend, and how to start each."""
    rows = [
        [
            agent.name,
            f"`{agent.command}`",
            cell(agent.install),
            yes(agent.tested),
            cell(agent.note) or "—",
        ]
        for agent in KNOWN_AGENTS
    ]
    header = ["agent", "command", "install", "tested here", "note"]
    return ["## ACP agents known to work", "", *ACP_AGENTS_INTRO, "", *table(header, rows), ""]


def _versions_tested() -> list[str]:
    """The CLI versions the tests run against, from the specs' pins."""
    rows = [
        [
            f"`{spec.id}`",
            f"`{spec.npm_package}`",
            spec.pinned_version or "",
            spec.oldest_tested or "",
        ]
        for spec in SPECS.values()
        if spec.npm_package
    ]
    header = ["backend", "npm package", "pinned", "oldest tested"]
    return ["## Versions tested", "", *VERSIONS_INTRO, "", *table(header, rows)]
