"""What an ACP agent offers one session: its models, modes and config options (from the
answer to `session/new`, `session/load` or `session/fork`, kept current by
`config_option_update` / `current_mode_update`), and the slash commands it lists
(`available_commands_update`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigOption", "SessionOffer", "agent_offers"]


def agent_offers(init_result: dict[str, Any], *path: str) -> bool:
    """Whether the agent's `initialize` answer has `agentCapabilities.<path>` (true, or an
    object: ACP's `sessionCapabilities.fork: {}`)."""
    found: Any = init_result.get("agentCapabilities")
    for key in path:
        found = found.get(key) if isinstance(found, dict) else None
    return found is True or isinstance(found, dict)


def _model_entry(raw: dict[str, Any]) -> tuple[str, str, str]:
    model_id = str(raw["modelId"])
    return model_id, str(raw.get("name") or model_id), str(raw.get("description") or "")


@dataclass
class ConfigOption:
    """One `select` config option of the session (`session/set_config_option` sets it)."""

    id: str
    category: str | None
    current: str | None
    #: (value, display name)
    values: list[tuple[str, str]]

    @classmethod
    def of(cls, raw: Any) -> ConfigOption | None:
        if not isinstance(raw, dict) or raw.get("type") != "select" or not raw.get("id"):
            return None
        values: list[tuple[str, str]] = []
        for entry in raw.get("options") or []:
            # (Options may come in groups: {group, name, options: [...]}.)
            group = entry.get("options") if isinstance(entry, dict) else None
            for option in group if isinstance(group, list) else [entry]:
                if isinstance(option, dict) and isinstance(option.get("value"), str):
                    values.append((option["value"], str(option.get("name") or option["value"])))
        current = raw.get("currentValue")
        category = raw.get("category")
        return cls(
            id=str(raw["id"]),
            category=category if isinstance(category, str) else None,
            current=current if isinstance(current, str) else None,
            values=values,
        )


@dataclass
class SessionOffer:
    #: The agent's models: (id, name, description), from `models.availableModels` or else
    #: the `model` config option.
    models: list[tuple[str, str, str]] = field(default_factory=list)
    current_model: str | None = None
    modes: list[str] = field(default_factory=list)
    current_mode: str | None = None
    options: dict[str, ConfigOption] = field(default_factory=dict)
    #: Slash commands the agent lists (names without the slash).
    commands: set[str] = field(default_factory=set)
    #: Whether the agent speaks ACP's session models API (`session/set_model`).
    has_models_api: bool = False

    def read(self, result: Any) -> None:
        """Take in an answer to session/new, /load or /fork (or `set_config_option`'s)."""
        if not isinstance(result, dict):
            return
        self._read_options(result.get("configOptions"))
        models = result.get("models")
        if isinstance(models, dict):
            self.has_models_api = True
            self.models = [
                _model_entry(m)
                for m in models.get("availableModels") or []
                if isinstance(m, dict) and m.get("modelId")
            ]
            current = models.get("currentModelId")
            self.current_model = current if isinstance(current, str) else self.current_model
        modes = result.get("modes")
        if isinstance(modes, dict):
            self.modes = [
                str(m["id"]) for m in modes.get("availableModes") or [] if isinstance(m, dict)
            ]
            current = modes.get("currentModeId")
            self.current_mode = current if isinstance(current, str) else self.current_mode

    def _read_options(self, raw: Any) -> None:
        if not isinstance(raw, list):
            return
        self.options = {o.id: o for o in map(ConfigOption.of, raw) if o is not None}
        model = self.option("model")
        if model is not None:
            if not self.has_models_api:
                self.models = [(value, name, "") for value, name in model.values]
            self.current_model = model.current or self.current_model
        mode = self.option("mode")
        if mode is not None:
            self.modes = self.modes or [value for value, _ in mode.values]
            self.current_mode = mode.current or self.current_mode

    def update(self, update: dict[str, Any]) -> None:
        """Take in a session/update about the offer (others are ignored)."""
        kind = update.get("sessionUpdate")
        if kind == "config_option_update":
            self._read_options(update.get("configOptions"))
        elif kind == "current_mode_update" and isinstance(update.get("currentModeId"), str):
            self.current_mode = update["currentModeId"]
        elif kind == "available_commands_update":
            self.commands = {
                str(c["name"]).lstrip("/")
                for c in update.get("availableCommands") or []
                if isinstance(c, dict) and c.get("name")
            }

    def option(self, category: str) -> ConfigOption | None:
        """The config option of `category` (`model`, `mode`, `thought_level`)."""
        return next((o for o in self.options.values() if o.category == category), None)

    def find_model(self, wanted: str) -> str | None:
        """The agent's id for the model a client named: the id itself, or the model part of a
        `provider/model` id, or its display name (case-insensitive); None if not listed."""
        lowered = wanted.lower()
        for exact in (True, False):
            for model_id, name, _ in self.models:
                candidates = (model_id,) if exact else (model_id.rsplit("/", 1)[-1], name)
                if any(c.lower() == lowered for c in candidates):
                    return model_id
        return None
