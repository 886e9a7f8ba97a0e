"""What a client sends as a turn's input (`UserInput`), as in Codex."""

from __future__ import annotations

import msgspec

from .base import Base, TypeTagged

__all__ = [
    "ByteRange",
    "ImageInput",
    "LocalImageInput",
    "MentionInput",
    "SkillInput",
    "TextElement",
    "TextInput",
    "UserInput",
]


class ByteRange(Base, kw_only=True):
    start: int
    end: int


class TextElement(Base, kw_only=True):
    byte_range: ByteRange
    placeholder: str | None = None


class TextInput(TypeTagged, tag="text", kw_only=True):
    text: str
    # Codex spells this one field in snake_case.
    text_elements: list[TextElement] | None = msgspec.field(default=None, name="text_elements")


class ImageInput(TypeTagged, tag="image", kw_only=True):
    url: str | None = None
    file_id: str | None = None
    detail: str | None = None


class LocalImageInput(TypeTagged, tag="localImage", kw_only=True):
    path: str
    detail: str | None = None


class SkillInput(TypeTagged, tag="skill", kw_only=True):
    name: str
    path: str


class MentionInput(TypeTagged, tag="mention", kw_only=True):
    name: str
    path: str


UserInput = TextInput | ImageInput | LocalImageInput | SkillInput | MentionInput
