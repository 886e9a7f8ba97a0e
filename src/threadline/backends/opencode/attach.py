"""A turn's images, mentions and skills for `opencode run`: files go with `-f` (OpenCode reads
them; an image reaches the model as an image, measured on 1.18.33: a synthetic Read tool
result with an `image_url` part), an image given as a data: URL through a private temporary
file; a skill is named in the prompt."""

from __future__ import annotations

import base64
import mimetypes
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from ...protocol import MentionInput, SkillInput, UserInput
from ..kit.images import resolve_images

__all__ = ["Attachments", "attachments"]


@dataclass
class Attachments:
    #: `-f` arguments, in order.
    files: list[str] = field(default_factory=list)
    #: Text to add to the prompt (skills).
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _write(directory: str, index: int, mime: str | None, data: str) -> str:
    suffix = mimetypes.guess_extension(mime or "") or ".png"
    path = os.path.join(directory, f"image-{index}{suffix}")
    with open(path, "wb") as out:
        out.write(base64.b64decode(data))
    return path


@asynccontextmanager
async def attachments(inputs: list[UserInput], cwd: str) -> AsyncIterator[Attachments]:
    """The turn's attachments; the temporary files are removed on exit."""
    found = Attachments()
    scratch: str | None = None
    try:
        for index, image in enumerate(await resolve_images(inputs, cwd)):
            if image.path:
                found.files.append(image.path)
            elif image.data is not None:
                scratch = scratch or tempfile.mkdtemp(prefix="threadline-opencode-")
                found.files.append(
                    await trio.to_thread.run_sync(_write, scratch, index, image.mime, image.data)
                )
            else:
                found.warnings.append(
                    f"opencode run takes image files only: {image.url} is left out of the prompt"
                )
        for item in inputs:
            if isinstance(item, MentionInput):
                path = os.path.join(cwd, item.path)  # (an absolute path stays)
                try:
                    await trio.Path(path).stat()  # (opencode run fails on a missing --file)
                except OSError as exc:
                    found.warnings.append(f"mention {item.path} left out: {exc.strerror or exc}")
                    continue
                found.files.append(path)
            elif isinstance(item, SkillInput):
                found.notes.append(f"Use the skill `{item.name}` ({item.path}).")
        yield found
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
