"""A turn's images, mentions and skills for `gemini -p`: files as `@<path>` references in the
prompt, Gemini's own syntax (it reads them; an image reaches the model as `inlineData`,
measured on 0.61.0), with `--include-directories` for a file outside the working directory;
an image given as a data: URL through a private temporary file; a skill named in the
prompt."""

from __future__ import annotations

import base64
import mimetypes
import os
import re
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
    #: Paths to reference with `@`, in order.
    files: list[str] = field(default_factory=list)
    #: Directories outside the working directory they are in (`--include-directories`).
    directories: list[str] = field(default_factory=list)
    #: Text to add to the prompt (skills).
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def prompt(self, text: str) -> str:
        """`text` with the references and notes after it."""
        refs = " ".join("@" + re.sub(r"([\s\\])", r"\\\1", path) for path in self.files)
        return "\n\n".join(part for part in (text, refs, *self.notes) if part)


def _write(directory: str, index: int, mime: str | None, data: str) -> str:
    suffix = mimetypes.guess_extension(mime or "") or ".png"
    path = os.path.join(directory, f"image-{index}{suffix}")
    with open(path, "wb") as out:
        out.write(base64.b64decode(data))
    return path


def _add(found: Attachments, path: str, cwd: str) -> None:
    found.files.append(path)
    folder = os.path.dirname(path)
    inside = os.path.commonpath([os.path.realpath(folder), os.path.realpath(cwd)])
    if inside != os.path.realpath(cwd) and folder not in found.directories:
        found.directories.append(folder)


@asynccontextmanager
async def attachments(inputs: list[UserInput], cwd: str) -> AsyncIterator[Attachments]:
    """The turn's attachments; the temporary files are removed on exit."""
    found = Attachments()
    scratch: str | None = None
    try:
        for index, image in enumerate(await resolve_images(inputs, cwd)):
            if image.path:
                _add(found, image.path, cwd)
            elif image.data is not None:
                scratch = scratch or tempfile.mkdtemp(prefix="threadline-gemini-")
                path = await trio.to_thread.run_sync(_write, scratch, index, image.mime, image.data)
                _add(found, path, cwd)
            else:
                found.warnings.append(
                    f"gemini -p takes image files only: {image.url} is left out of the prompt"
                )
        for item in inputs:
            if isinstance(item, MentionInput):
                _add(found, os.path.join(cwd, item.path), cwd)  # (an absolute path stays)
            elif isinstance(item, SkillInput):
                found.notes.append(f"Use the skill `{item.name}` ({item.path}).")
        yield found
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
