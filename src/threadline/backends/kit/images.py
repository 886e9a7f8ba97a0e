"""A turn's image inputs (`image`, `localImage`), resolved once for every backend.

The engine checks them before a turn starts (`problems`: a bad item is a -32602 naming it);
a backend turns each `Image` into its CLI's own form (`data` base64 with `mime`, or an http(s)
`url` the model fetches)."""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
from dataclasses import dataclass

import trio

from ...protocol import ImageInput, LocalImageInput, UserInput

__all__ = ["MAX_IMAGE_BYTES", "Image", "image_count", "image_problems", "resolve_images"]

#: The largest image a turn may carry (model APIs refuse bigger ones; 20 MiB is OpenAI's cap).
MAX_IMAGE_BYTES = 20 * 1024 * 1024


@dataclass(frozen=True)
class Image:
    """One image: base64 `data` with its `mime` type, or a `url` (http or https)."""

    mime: str | None = None
    data: str | None = None
    url: str | None = None
    #: The file it was read from (a `localImage`), absolute.
    path: str | None = None


def image_count(inputs: list[UserInput]) -> int:
    return sum(isinstance(i, (ImageInput, LocalImageInput)) for i in inputs)


def _full(path: str, cwd: str) -> str:
    return path if os.path.isabs(path) else os.path.join(cwd, path)


def _data_url_problem(url: str) -> str | None:
    head, _, data = url.partition(",")
    mime = head.removeprefix("data:").removesuffix(";base64")
    if not head.endswith(";base64") or not mime.startswith("image/"):
        return "a data: URL that is not a base64 image"
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return "a data: URL whose data is not base64"
    return None


def _local_problem(path: str, cwd: str) -> str | None:
    full = _full(path, cwd)
    if not (mimetypes.guess_type(full)[0] or "").startswith("image/"):
        return f"{path}: not an image file (by its name)"
    try:
        size = os.stat(full).st_size
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if not os.path.isfile(full) or not os.access(full, os.R_OK):
        return f"{path}: not a readable file"
    if size > MAX_IMAGE_BYTES:
        return f"{path}: {size} bytes, over the {MAX_IMAGE_BYTES}-byte limit"
    return None


def image_problems(inputs: list[UserInput], cwd: str) -> list[str]:
    """Why image items cannot be sent (each names the item), checked without reading them."""
    problems = []
    for item in inputs:
        problem = None
        if isinstance(item, LocalImageInput):
            problem = _local_problem(item.path, cwd)
            problem = problem and f"localImage {problem}"
        elif isinstance(item, ImageInput):
            if not item.url:
                problem = "image: no url (an image by file id cannot be sent to a CLI)"
            elif item.url.startswith("data:"):
                problem = _data_url_problem(item.url)
                problem = problem and f"image: {problem}"
            elif not item.url.startswith(("http://", "https://")):
                problem = f"image: url {item.url[:60]!r} is not http(s) or data:"
        if problem:
            problems.append(problem)
    return problems


async def resolve_images(inputs: list[UserInput], cwd: str) -> list[Image]:
    """The turn's images in order. Local files are read (off the event loop) and data: URLs
    split; http(s) URLs stay URLs. Raises OSError when a checked file went away since."""
    images = []
    for item in inputs:
        if isinstance(item, LocalImageInput):
            full = _full(item.path, cwd)
            data = await trio.Path(full).read_bytes()
            mime = mimetypes.guess_type(full)[0] or "image/png"
            images.append(Image(mime=mime, data=base64.b64encode(data).decode("ascii"), path=full))
        elif isinstance(item, ImageInput) and item.url and item.url.startswith("data:"):
            head, _, data_part = item.url.partition(",")
            mime = head.removeprefix("data:").removesuffix(";base64")
            images.append(Image(mime=mime, data=data_part))
        elif isinstance(item, ImageInput) and item.url:
            images.append(Image(url=item.url))
    return images
