"""The mock agent's conversations, kept in the server process as a CLI keeps its session
files: by session id, so a fork (`SessionSettings.fork_of`) can copy one."""

from __future__ import annotations

import base64
import binascii

from ..kit.images import Image

__all__ = ["HISTORIES", "describe_images"]

#: session id → the conversation's lines (`user: …`, `assistant: …`).
HISTORIES: dict[str, list[str]] = {}


def _size(image: Image) -> int:
    try:
        return len(base64.b64decode(image.data or ""))
    except (binascii.Error, ValueError):
        return 0


def describe_images(images: list[Image]) -> str:
    """One line per image, as the mock answers it: mime and size, or the URL."""
    return "\n".join(
        f"[image: {image.url}]" if image.url else f"[image: {image.mime}, {_size(image)} bytes]"
        for image in images
    )
