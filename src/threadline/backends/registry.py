"""The one list of backends this build ships.

A backend is a package `backends/<id>/`: `spec.py` defines `SPEC` (what it is: no trio, so
`initialize`, config validation and `doctor` read it before the engine is imported) and
`backend.py` defines `create()` (the `Backend` the engine drives: `instances.create_backends`).
Adding one is writing that package and adding its id to `PACKAGES`."""

from __future__ import annotations

from importlib import import_module

from .spec import BackendSpec

__all__ = ["BACKEND_IDS", "PACKAGES", "SPECS"]

#: Every shipped backend, in the order `initialize` and `doctor` list them.
PACKAGES = ("claude", "codex", "gemini", "opencode", "qwen", "acp", "mock")


def _spec(package: str) -> BackendSpec:
    spec = import_module(f"{__package__}.{package}.spec").SPEC
    assert isinstance(spec, BackendSpec) and spec.id == package, package
    return spec


SPECS: dict[str, BackendSpec] = {package: _spec(package) for package in PACKAGES}
#: Every backend id a thread (or AGENT_BACKEND) may name.
BACKEND_IDS: tuple[str, ...] = PACKAGES
