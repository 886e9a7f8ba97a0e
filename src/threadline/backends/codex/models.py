"""Codex's `model/list` answer as threadline's models (measured on codex 0.169.0: with a
custom model provider it lists its bundled catalogue and fetches nothing)."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import protocol as p
from .spec import SPEC

__all__ = ["codex_models"]

_DECODER = msgspec.json.Decoder(p.Model)


def codex_models(data: Any) -> list[p.Model]:
    """Codex's `Model`s (its own ids, which may repeat another backend's, prefixed with the
    backend id as in every backend's list); one that does not decode is left out."""
    models = []
    for raw in data if isinstance(data, list) else []:
        try:
            model = _DECODER.decode(msgspec.json.encode(raw))
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        models.append(msgspec.structs.replace(model, id=f"{SPEC.id}/{model.model}"))
    return models
