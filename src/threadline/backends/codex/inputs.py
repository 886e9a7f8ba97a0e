"""A turn's input items in Codex's forms (measured on codex 0.169.0).

- The app-server takes Codex's `UserInput` as it is: a `localImage` is read by Codex and sent
  as an `input_image` data URL wrapped in `<image name=[Image #1] path=…>` text, an `image`
  data URL is sent as it is, a `skill` whose SKILL.md Codex knows adds its `<skill>` message.
  It refuses an http(s) image URL (`remote image URLs are not supported; use an inline data URL
  instead`), and it drops a `mention` whose path is a file (its mentions are `app://…` and
  `plugin://…`): a file mention goes in as text naming the path.
- `codex exec` takes the prompt as text and images as files (`-i FILE`); `$name` in the text
  invokes a skill as the app-server's `skill` item does.
"""

from __future__ import annotations

import base64
import mimetypes
import os
from typing import Any

import msgspec
import trio

from ...protocol import ImageInput, LocalImageInput, MentionInput, SkillInput, UserInput
from .. import base as b

__all__ = ["REMOTE_IMAGE", "app_server_input", "exec_images", "exec_prompt", "mention_text"]

REMOTE_IMAGE = (
    "codex accepts images only as local files or data: URLs (it refuses remote image URLs): "
    "send a `localImage` or an `image` with a data: URL"
)


def _native_mention(item: MentionInput) -> bool:
    """Codex's own mention targets (apps, plugins): a URL-like path."""
    return "://" in item.path


def mention_text(item: MentionInput) -> str:
    """A file mention as text: the path, as a person would type it after `@`."""
    return f"@{item.path}"


def app_server_input(inputs: list[UserInput], cwd: str) -> list[dict[str, Any]]:
    """`turn/start.input` / `turn/steer.input` for the app-server: Codex's items as they are
    (a relative `localImage` path made absolute against the thread's cwd), a file mention as
    text. An http(s) image is a BackendError, as in exec mode."""
    out: list[dict[str, Any]] = []
    for item in inputs:
        if isinstance(item, ImageInput) and not (item.url or "").startswith("data:"):
            raise b.BackendError(REMOTE_IMAGE, codex_error_info="badRequest")
        if isinstance(item, MentionInput) and not _native_mention(item):
            out.append({"type": "text", "text": mention_text(item), "text_elements": []})
            continue
        if isinstance(item, LocalImageInput) and not os.path.isabs(item.path):
            item = msgspec.structs.replace(item, path=os.path.join(cwd, item.path))
        out.append(msgspec.to_builtins(item))
    return out


def exec_prompt(turn: b.TurnInput) -> str:
    """The prompt `codex exec` reads on stdin: the turn's text, then each skill as `$name`
    and each file mention as its path, joined by blank lines."""
    parts = [turn.text] if turn.text else []
    for item in turn.input:
        if isinstance(item, SkillInput):
            parts.append(f"${item.name}")
        elif isinstance(item, MentionInput):
            parts.append(mention_text(item))
    return "\n\n".join(parts)


async def exec_images(inputs: list[UserInput], cwd: str, scratch: str) -> list[str]:
    """The image files of the turn for `codex exec -i`, in input order: a `localImage` as its
    (absolute) path, a data: URL written to a file in `scratch`. An http(s) URL is a
    BackendError (Codex cannot send one)."""
    files = []
    for index, item in enumerate(inputs):
        if isinstance(item, LocalImageInput):
            files.append(item.path if os.path.isabs(item.path) else os.path.join(cwd, item.path))
        elif isinstance(item, ImageInput) and item.url and item.url.startswith("data:"):
            head, _, data = item.url.partition(",")
            mime = head.removeprefix("data:").removesuffix(";base64")
            path = os.path.join(scratch, f"image-{index}{mimetypes.guess_extension(mime) or ''}")
            await trio.Path(path).write_bytes(base64.b64decode(data))
            files.append(path)
        elif isinstance(item, ImageInput):
            raise b.BackendError(REMOTE_IMAGE, codex_error_info="badRequest")
    return files
