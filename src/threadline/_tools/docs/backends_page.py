"""`backends.md`: the backend matrix, from what each backend's code reports (`modes`,
`default_mode`, `capabilities(mode)`) and the registry's specs, never hand-kept claims."""

from __future__ import annotations

from ...backends.acp.agents import KNOWN_AGENTS
from ...backends.base import Backend
from ...backends.instances import create_backends
from ...backends.registry import SPECS
from .markdown import HEADER, cell, yes
from .prose import (
    ACP_AGENTS_INTRO,
    BACKENDS_COLUMNS,
    BACKENDS_INTRO,
    INVOCATION_INTRO,
    VERSIONS_INTRO,
)

__all__ = ["render_backends"]


def render_backends() -> str:
    """The page: one matrix row per backend and mode, then each backend's invocations."""
    backends = list(create_backends().values())
    out = [HEADER, *BACKENDS_INTRO, "", "## Matrix", "", *_matrix(backends), ""]
    out += [*BACKENDS_COLUMNS, "", "## Invocation and role injection", "", *INVOCATION_INTRO, ""]
    for backend in backends:
        out += _invocations(backend)
    out += _acp_agents()
    out += _versions_tested()
    return "\n".join(out).rstrip("\n") + "\n"


def _default_mark(backend: Backend, mode: str) -> str:
    return " (default)" if mode == backend.default_mode else ""


def _matrix(backends: list[Backend]) -> list[str]:
    out = [
        "| backend | mode | approvals | cancel | resume | streamed deltas | reasoning | images |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in backends:
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            out.append(
                f"| `{backend.id}` | `{mode}`{_default_mark(backend, mode)} "
                f"| {'interactive' if caps.approvals else 'policy only'} "
                f"| {'native interrupt' if caps.interrupt else 'kill process group'} "
                f"| {yes(caps.resume)} | {yes(caps.deltas)} | {yes(caps.reasoning)} "
                f"| {yes(caps.images)} |"
            )
    return out


def _invocations(backend: Backend) -> list[str]:
    """How threadline runs the backend's CLI in each mode, and how the role reaches it."""
    out = [f"### `{backend.id}` — {backend.display_name}", ""]
    out += ["| mode | invocation | role injection |", "|---|---|---|"]
    for mode in backend.modes:
        caps = backend.capabilities(mode)
        out.append(
            f"| `{mode}`{_default_mark(backend, mode)} | {cell(caps.invocation) or '—'} "
            f"| {cell(caps.role_injection) or '—'} |"
        )
    return [*out, ""]


def _acp_agents() -> list[str]:
    """The agents known to work through the generic `acp` backend, and how to start each."""
    out = ["## ACP agents known to work", "", *ACP_AGENTS_INTRO, ""]
    out += ["| agent | command | install | tested here | note |", "|---|---|---|---|---|"]
    for agent in KNOWN_AGENTS:
        out.append(
            f"| {agent.name} | `{agent.command}` | {cell(agent.install)} "
            f"| {yes(agent.tested)} | {cell(agent.note) or '—'} |"
        )
    return [*out, ""]


def _versions_tested() -> list[str]:
    """The CLI versions the tests run against, from the specs' pins."""
    out = ["## Versions tested", "", *VERSIONS_INTRO, ""]
    out += ["| backend | npm package | pinned | oldest tested |", "|---|---|---|---|"]
    for spec in SPECS.values():
        if spec.npm_package:
            out.append(
                f"| `{spec.id}` | `{spec.npm_package}` | {spec.pinned_version} "
                f"| {spec.oldest_tested} |"
            )
    return out
