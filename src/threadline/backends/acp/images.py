"""A turn's image inputs as ACP content blocks (for agents that accept images)."""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
from typing import Any

import trio

from ...protocol import ImageInput, LocalImageInput, UserInput

__all__ = ["image_blocks", "image_count"]


def image_count(inputs: list[UserInput]) -> int:
    return sum(isinstance(i, (ImageInput, LocalImageInput)) for i in inputs)


def _data_url(url: str) -> dict[str, Any] | str:
    """`data:<mime>;base64,<data>` as an image block, or why not."""
    head, _, data = url.partition(",")
    mime = head.removeprefix("data:").removesuffix(";base64")
    if not head.endswith(";base64") or not mime.startswith("image/"):
        return "a data: URL that is not a base64 image"
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "a data: URL whose data is not base64"
    return {"type": "image", "mimeType": mime, "data": data}


async def _local(path: str, cwd: str) -> dict[str, Any] | str:
    full = path if os.path.isabs(path) else os.path.join(cwd, path)
    mime = mimetypes.guess_type(full)[0] or ""
    if not mime.startswith("image/"):
        return f"{path}: not an image file"
    try:
        data = await trio.Path(full).read_bytes()
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    encoded = base64.b64encode(data).decode("ascii")
    return {"type": "image", "mimeType": mime, "data": encoded, "uri": f"file://{full}"}


async def image_blocks(inputs: list[UserInput], cwd: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(content blocks, why some images were left out). A local file or a data: URL goes as
    an image block; an http(s) URL as a link to it (ACP image blocks carry the data)."""
    blocks: list[dict[str, Any]] = []
    problems: list[str] = []
    for item in inputs:
        block: dict[str, Any] | str | None = None
        if isinstance(item, LocalImageInput):
            block = await _local(item.path, cwd)
        elif isinstance(item, ImageInput) and item.url and item.url.startswith("data:"):
            block = _data_url(item.url)
        elif isinstance(item, ImageInput) and item.url:
            name = item.url.rstrip("/").rsplit("/", 1)[-1] or item.url
            block = {"type": "resource_link", "uri": item.url, "name": name}
        elif isinstance(item, ImageInput):
            block = "an image given by file id (no data or URL to send)"
        if isinstance(block, str):
            problems.append(block)
        elif block is not None:
            blocks.append(block)
    return blocks, problems
