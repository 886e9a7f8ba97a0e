"""A pytest marker per backend, from the registry: `pytest -m gemini` runs the tests that
drive gemini (tests/conftest.py registers the markers and applies them at collection).

A test drives backend `<id>` when it uses that CLI's fixture (`<id>`, `<id>_bin`,
`<id>_env`), when a parameter names the backend (`"gemini"`, or a mode of it such as the fault
matrix's `"gemini-headless"`), or when its module imports that backend's code
(`threadline.backends.<id>...`, unit tests of its mapping or session)."""

from __future__ import annotations

import functools
from types import ModuleType

import pytest

from threadline.backends.registry import BACKEND_IDS, SPECS

__all__ = ["backends_driven", "mark_backends", "register_markers"]


def register_markers(config: pytest.Config) -> None:
    for spec in SPECS.values():
        config.addinivalue_line(
            "markers", f"{spec.id}: drives the {spec.display_name} backend (tests/conftest.py)"
        )


def _backend_named(value: object) -> str | None:
    """The backend a parameter value names ("gemini", "gemini-headless"), if any."""
    if not isinstance(value, str):
        return None
    base = value.partition("-")[0]
    return base if base in BACKEND_IDS else None


@functools.cache
def _imported_backends(module: ModuleType) -> frozenset[str]:
    """Backends whose code the test module imports (modules, or names from them)."""
    found = set()
    for value in vars(module).values():
        name = (
            value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
        )
        parts = name.split(".") if isinstance(name, str) else []
        if parts[:2] == ["threadline", "backends"] and len(parts) > 2:
            base = parts[2].partition("_")[0]
            if base in BACKEND_IDS:
                found.add(base)
    return frozenset(found)


def backends_driven(item: pytest.Item) -> set[str]:
    found = {
        name.removesuffix("_env").removesuffix("_bin") for name in getattr(item, "fixturenames", ())
    } & set(BACKEND_IDS)
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        found |= {b for v in callspec.params.values() if (b := _backend_named(v))}
    module = getattr(item, "module", None)
    if module is not None:
        found |= _imported_backends(module)
    return found


def mark_backends(items: list[pytest.Item]) -> None:
    for item in items:
        for backend in sorted(backends_driven(item)):
            item.add_marker(getattr(pytest.mark, backend))
