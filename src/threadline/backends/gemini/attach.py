"""A turn's images, mentions and skills for `gemini -p`: files as `@<path>` references in the
prompt, Gemini's own syntax (it reads them; an image reaches the model as `inlineData`,
measured on 0.61.0); a file outside the working directory, and an image given as a data:
URL, through a copy in a private temporary directory added with `--include-directories`; a
skill named in the prompt."""

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
    #: The private directory of copies, when there are any (`--include-directories`).
    directories: list[str] = field(default_factory=list)
    #: Text to add to the prompt (skills).
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def prompt(self, text: str) -> str:
        """`text` with the references and notes after it."""
        refs = " ".join("@" + re.sub(r"([\s\\])", r"\\\1", path) for path in self.files)
        return "\n\n".join(part for part in (text, refs, *self.notes) if part)


class _Scratch:
    """A private temporary directory for the turn's files that are not in the working
    directory: only it is added to Gemini's workspace (never the folder a file came from)."""

    def __init__(self) -> None:
        self.path: str | None = None

    def file(self, name: str) -> str:
        self.path = self.path or tempfile.mkdtemp(prefix="threadline-gemini-")
        return os.path.join(self.path, name)

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)


def _inside(path: str, cwd: str) -> bool:
    real = os.path.realpath(cwd)
    return os.path.commonpath([os.path.realpath(path), real]) == real


def _write(target: str, data: bytes) -> str:
    with open(target, "wb") as out:
        out.write(data)
    return target


def _copied(found: Attachments, scratch: _Scratch, path: str) -> None:
    """Reference `path`, a file in `scratch`."""
    found.files.append(path)
    if scratch.path is not None and scratch.path not in found.directories:
        found.directories.append(scratch.path)


async def _reference(found: Attachments, scratch: _Scratch, path: str, cwd: str) -> None:
    """Reference `path`, through a copy in `scratch` when it is outside `cwd` (OSError when
    it cannot be read: Gemini would fail the turn on a bad `@` reference)."""
    await trio.Path(path).stat()
    if _inside(path, cwd):
        found.files.append(path)
        return
    target = scratch.file(f"{len(found.files)}-{os.path.basename(path)}")
    _copied(found, scratch, await trio.to_thread.run_sync(shutil.copyfile, path, target))


@asynccontextmanager
async def attachments(inputs: list[UserInput], cwd: str) -> AsyncIterator[Attachments]:
    """The turn's attachments; the temporary files are removed on exit."""
    found = Attachments()
    scratch = _Scratch()
    try:
        for index, image in enumerate(await resolve_images(inputs, cwd)):
            if image.path:
                await _reference(found, scratch, image.path, cwd)
            elif image.data is not None:
                suffix = mimetypes.guess_extension(image.mime or "") or ".png"
                target = scratch.file(f"image-{index}{suffix}")
                data = base64.b64decode(image.data)
                _copied(found, scratch, await trio.to_thread.run_sync(_write, target, data))
            else:
                found.warnings.append(
                    f"gemini -p takes image files only: {image.url} is left out of the prompt"
                )
        for item in inputs:
            if isinstance(item, MentionInput):
                try:  # (an absolute path stays)
                    await _reference(found, scratch, os.path.join(cwd, item.path), cwd)
                except OSError as exc:
                    found.warnings.append(f"mention {item.path} left out: {exc.strerror or exc}")
            elif isinstance(item, SkillInput):
                found.notes.append(f"Use the skill `{item.name}` ({item.path}).")
        yield found
    finally:
        scratch.remove()
