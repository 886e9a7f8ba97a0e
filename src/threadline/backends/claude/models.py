"""`model/list` from claude itself: the models its `initialize` answer lists (its aliases, each
with the model it stands for now and the efforts it takes)."""

from __future__ import annotations

from typing import Any

import msgspec

from ... import protocol as p
from .spec import SPEC

__all__ = ["claude_models"]

_OFFERED = {effort for effort, _ in SPEC.efforts}


def _model(raw: dict[str, Any]) -> p.Model:
    value = str(raw["value"])
    levels = raw.get("supportedEffortLevels") if raw.get("supportsEffort") else None
    efforts = [e for e in levels if e in _OFFERED] if isinstance(levels, list) else []
    return p.Model(
        id=f"{SPEC.id}/{value}",
        model=value,
        display_name=str(raw.get("displayName") or value),
        description=str(raw.get("description") or ""),
        hidden=False,
        is_default=value == "default",
        default_reasoning_effort=SPEC.default_effort,
        supported_reasoning_efforts=[
            p.ReasoningEffortOption(reasoning_effort=e, description=f"{e} effort") for e in efforts
        ],
    )


def claude_models(data: Any) -> list[p.Model]:
    """The `models` of claude's `initialize` answer as `model/list` entries ([] when there are
    none); `default` (claude's configured default) is the default, else the first."""
    listed = data if isinstance(data, list) else []
    models = [
        _model(raw)
        for raw in listed
        if isinstance(raw, dict) and isinstance(raw.get("value"), str) and raw["value"]
    ]
    if models and not any(m.is_default for m in models):
        models[0] = msgspec.structs.replace(models[0], is_default=True)
    return models
