"""A turn's input as the stream-json user message claude reads (both modes): text blocks,
`@path` for mentioned files and skills (claude attaches the file), Anthropic image blocks."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ...protocol import MentionInput, SkillInput
from .. import base as b
from ..kit.images import Image, resolve_images

__all__ = ["COMPACT", "new_uuid", "user_line", "user_message"]

#: The slash command that compacts claude's conversation (written as a user message).
COMPACT = "/compact"


def _at(path: str) -> str:
    """claude's own file reference (`@"…"` when the path has whitespace)."""
    return f'@"{path}"' if any(c.isspace() for c in path) else f"@{path}"


def _references(turn: b.TurnInput) -> str:
    """The turn's `mention` and `skill` items as claude file references, one a line."""
    lines = []
    for item in turn.input:
        if isinstance(item, MentionInput):
            lines.append(_at(item.path))
        elif isinstance(item, SkillInput):
            lines.append(f"Use the skill {item.name}: {_at(item.path)}")
    return "\n".join(lines)


def _image_block(image: Image) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    source = {"type": "base64", "media_type": image.mime or "image/png", "data": image.data}
    return {"type": "image", "source": source}


async def user_message(turn: b.TurnInput, cwd: str) -> list[dict[str, Any]]:
    """The content blocks of the turn's user message: the role bootstrap, the images, then the
    text (BackendError when an image file went away since the engine checked it). The text
    comes last: claude attaches the files `@path` names only in a message's last block."""
    blocks: list[dict[str, Any]] = []
    if turn.bootstrap:
        blocks.append({"type": "text", "text": turn.bootstrap})
    try:
        images = await resolve_images(turn.input, cwd)
    except OSError as exc:
        raise b.BackendError(f"cannot read the turn's image: {exc}") from None
    blocks += [_image_block(image) for image in images]
    text = "\n\n".join(t for t in (turn.text, _references(turn)) if t)
    if text or not blocks:
        blocks.append({"type": "text", "text": text})
    return blocks


def user_line(content: str | list[dict[str, Any]], message_uuid: str | None = None) -> bytes:
    """One stream-json user message; `message_uuid` lets claude's `result` and
    `command_lifecycle` messages name it (`user_message_uuids`)."""
    message: dict[str, Any] = {
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": None,
    }
    if message_uuid is not None:
        message["uuid"] = message_uuid
    return json.dumps(message).encode() + b"\n"


def new_uuid() -> str:
    return str(uuid.uuid4())
