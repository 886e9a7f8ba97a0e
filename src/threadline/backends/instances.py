"""The backends the engine drives: one instance of each registered backend."""

from __future__ import annotations

from importlib import import_module

from .base import Backend
from .registry import PACKAGES

__all__ = ["create_backends"]


def create_backends() -> dict[str, Backend]:
    """One instance of every backend in the registry, by id."""
    backends: dict[str, Backend] = {}
    for package in PACKAGES:
        backend = import_module(f"{__package__}.{package}.backend").create()
        assert isinstance(backend, Backend) and backend.id == package, package
        backends[package] = backend
    return backends
