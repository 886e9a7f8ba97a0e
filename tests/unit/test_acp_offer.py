"""What an ACP agent offers a session, read from the answers of the pinned CLIs (shapes as
gemini 0.61.0, opencode 1.18.33 and qwen 0.24.4 sent them to session/new)."""

from __future__ import annotations

from typing import Any

from threadline.backends.kit.acp.offer import SessionOffer, agent_offers

GEMINI_NEW: dict[str, Any] = {
    "sessionId": "s",
    "modes": {
        "availableModes": [{"id": m, "name": m} for m in ("default", "autoEdit", "yolo", "plan")],
        "currentModeId": "default",
    },
    "models": {
        "availableModels": [
            {"modelId": "auto", "name": "Auto"},
            {"modelId": "gemini-2.5-pro", "name": "gemini-2.5-pro"},
        ],
        "currentModelId": "gemini-2.5-flash",
    },
}
OPENCODE_NEW: dict[str, Any] = {
    "sessionId": "ses_x",
    "configOptions": [
        {
            "id": "model",
            "category": "model",
            "type": "select",
            "currentValue": "fake/fake-model",
            "options": [
                {"value": "fake/fake-model", "name": "Fake/fake-model"},
                {"value": "fake/fake-small", "name": "Fake/fake-small"},
            ],
        },
        {
            "id": "effort",
            "category": "thought_level",
            "type": "select",
            "currentValue": "low",
            "options": [{"value": v, "name": v} for v in ("low", "high", "default")],
        },
        {
            "id": "mode",
            "category": "mode",
            "type": "select",
            "currentValue": "build",
            "options": [{"value": "build", "name": "build"}, {"value": "plan", "name": "plan"}],
        },
    ],
}


def test_models_and_modes_from_the_session_models_api() -> None:
    offer = SessionOffer()
    offer.read(GEMINI_NEW)
    assert offer.has_models_api and offer.current_model == "gemini-2.5-flash"
    assert offer.find_model("GEMINI-2.5-PRO") == "gemini-2.5-pro"
    assert offer.find_model("gpt-5") is None
    assert offer.modes == ["default", "autoEdit", "yolo", "plan"]
    assert offer.current_mode == "default" and offer.option("thought_level") is None


def test_models_modes_and_effort_from_config_options() -> None:
    offer = SessionOffer()
    offer.read(OPENCODE_NEW)
    assert not offer.has_models_api
    assert [m for m, _, _ in offer.models] == ["fake/fake-model", "fake/fake-small"]
    assert offer.find_model("fake-small") == "fake/fake-small"  # the model part of the id
    assert offer.current_model == "fake/fake-model" and offer.current_mode == "build"
    effort = offer.option("thought_level")
    assert effort is not None and effort.id == "effort" and effort.current == "low"
    # set_config_option answers with the options as they are now
    changed = {**OPENCODE_NEW["configOptions"][0], "currentValue": "fake/fake-small"}
    offer.read({"configOptions": [changed, *OPENCODE_NEW["configOptions"][1:]]})
    assert offer.current_model == "fake/fake-small"


def test_updates_about_the_offer() -> None:
    offer = SessionOffer()
    offer.read(GEMINI_NEW)
    offer.update({"sessionUpdate": "current_mode_update", "currentModeId": "yolo"})
    commands = [{"name": "compress", "description": ""}, {"name": "/init", "description": ""}]
    offer.update({"sessionUpdate": "available_commands_update", "availableCommands": commands})
    assert offer.current_mode == "yolo" and offer.commands == {"compress", "init"}


def test_agent_capabilities_true_or_an_object() -> None:
    init = {"agentCapabilities": {"loadSession": True, "sessionCapabilities": {"fork": {}}}}
    assert agent_offers(init, "loadSession") and agent_offers(init, "sessionCapabilities", "fork")
    assert not agent_offers(init, "promptCapabilities", "image")
