"""A pytest marker per backend, from the registry: `pytest -m gemini` runs the tests that
drive gemini (tests/conftest.py registers the markers and applies them at collection).

A test drives backend `<id>` when it uses that CLI's fixture (`<id>`, `<id>_bin`,
`<id>_env`); when a parameter names the backend (its `BackendSpec`, `"gemini"`, or a mode of it
such as the fault matrix's `"gemini-headless"`; a parameter `mode` names a mode, and "acp" is a
mode of several backends as well as the generic backend's id); when its module is named after
it (`test_<id>.py`, `test_<id>_*.py`); or when its module imports that backend's code
(`threadline.backends.<id>...`: unit tests of its mapping or session)."""

from __future__ import annotations

import functools
from types import ModuleType

import pytest

from threadline.backends.registry import BACKEND_IDS, SPECS
from threadline.backends.spec import BackendSpec

__all__ = ["backends_driven", "mark_backends", "register_markers"]


def register_markers(config: pytest.Config) -> None:
    for spec in SPECS.values():
        config.addinivalue_line(
            "markers", f"{spec.id}: drives the {spec.display_name} backend (tests/conftest.py)"
        )


def _backend_named(name: str, value: object) -> str | None:
    """The backend the parameter `name` = `value` names (a spec, "gemini", "gemini-headless")."""
    if isinstance(value, BackendSpec):
        return value.id
    if not isinstance(value, str) or name == "mode":
        return None
    base, _, mode = value.partition("-")
    return base if base in SPECS and (not mode or mode in SPECS[base].modes) else None


def _named_after(module: ModuleType) -> str | None:
    """The backend a test module is named after (test_gemini.py, test_acp_generic.py)."""
    stem = module.__name__.rpartition(".")[2]
    base = stem.removeprefix("test_").partition("_")[0]
    return base if stem.startswith("test_") and base in BACKEND_IDS else None


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
        found |= {b for n, v in callspec.params.items() if (b := _backend_named(n, v))}
    module = getattr(item, "module", None)
    if module is not None:
        found |= _imported_backends(module)
        found |= {b for b in (_named_after(module),) if b}
    return found


def mark_backends(items: list[pytest.Item]) -> None:
    for item in items:
        for backend in sorted(backends_driven(item)):
            item.add_marker(getattr(pytest.mark, backend))
