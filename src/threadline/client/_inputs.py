"""Building a turn's input and injected history: text, images (`image()`), and the Responses
API message items `thread/inject_items` takes (`message_item()`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from ..protocol import ImageInput, LocalImageInput, TextInput, UserInput

__all__ = ["Prompt", "image", "message_item", "to_inputs"]

#: A turn's input: text, or a list of text and input items (`image(...)`, `TextInput`, ...).
Prompt = str | Sequence[str | UserInput]

_URL_PREFIXES = ("http://", "https://", "data:")


def image(source: str | os.PathLike[str], detail: str | None = None) -> UserInput:
    """An image input: an `http(s)://` or `data:` URL as `ImageInput`, anything else as a
    file path (`LocalImageInput`, relative to the thread's cwd on the server)."""
    if isinstance(source, str) and source.startswith(_URL_PREFIXES):
        return ImageInput(url=source, detail=detail)
    return LocalImageInput(path=os.fspath(source), detail=detail)


def message_item(role: Literal["user", "assistant", "developer"], text: str) -> dict[str, Any]:
    """One message of earlier conversation for `Client.inject_items`, in the Responses API
    shape Codex takes (`input_text` for user and developer, `output_text` for assistant)."""
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


def to_inputs(prompt: Prompt) -> list[UserInput]:
    """The `input` of `turn/start` / `turn/steer`: each string becomes a `TextInput`."""
    if isinstance(prompt, str):
        return [TextInput(text=prompt)]
    return [TextInput(text=part) if isinstance(part, str) else part for part in prompt]
