"""A turn's non-text inputs as ACP content blocks: images (`image` blocks, when the agent's
`initialize` offers `promptCapabilities.image`), file mentions (`resource_link` blocks, the
agent reads the file) and skills (a text block naming the skill's file)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ....protocol import MentionInput, SkillInput, UserInput
from ..images import Image, image_count, resolve_images

__all__ = ["input_blocks"]


def _image_block(image: Image) -> dict[str, Any] | None:
    """An ACP image block (it carries the data: an http(s) image has none, `image_urls`)."""
    if image.data is None:
        return None
    block: dict[str, Any] = {"type": "image", "mimeType": image.mime, "data": image.data}
    if image.path:
        block["uri"] = Path(image.path).as_uri()
    return block


def _mention_block(item: MentionInput, cwd: str) -> dict[str, Any]:
    path = item.path if os.path.isabs(item.path) else os.path.join(cwd, item.path)
    return {"type": "resource_link", "uri": Path(path).as_uri(), "name": item.name or path}


async def input_blocks(
    inputs: list[UserInput], cwd: str, *, images: bool
) -> tuple[list[dict[str, Any]], list[str]]:
    """(blocks, warnings): the blocks follow the turn's text in its prompt; `images` says
    whether the agent takes images (if not, they are left out with a warning)."""
    blocks: list[dict[str, Any]] = []
    warnings: list[str] = []
    count = image_count(inputs)
    if count and images:
        try:
            for image in await resolve_images(inputs, cwd):
                block = _image_block(image)
                if block is None:
                    warnings.append(f"image {image.url} left out: an ACP image carries its data")
                else:
                    blocks.append(block)
        except OSError as exc:
            warnings.append(f"image left out of the prompt: {exc}")
    elif count:
        warnings.append(f"the agent does not accept images: {count} left out of the prompt")
    for item in inputs:
        if isinstance(item, MentionInput):
            blocks.append(_mention_block(item, cwd))
        elif isinstance(item, SkillInput):
            blocks.append({"type": "text", "text": f"Use the skill `{item.name}` ({item.path})."})
    return blocks, warnings
