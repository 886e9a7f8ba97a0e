"""Building and writing the generated pages."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .backends_page import render_backends
from .protocol_page import Example, render_protocol
from .schema_view import load_schemas
from .session import capture

__all__ = ["GENERATED", "Docs", "build_docs", "write_docs"]

#: The pages this package owns (relative to the docs directory).
GENERATED = ("protocol.md", "backends.md")


@dataclass
class Docs:
    pages: dict[str, str]
    examples: list[Example]

    @property
    def checks(self) -> list[tuple[str, Any]]:
        return [check for example in self.examples for check in example.checks]


def build_docs(schemas: Path | None = None) -> Docs:
    """Render every generated page (runs the scripted session; about a second)."""
    bundle, index = load_schemas(schemas)
    protocol, examples = render_protocol(bundle, index, capture())
    return Docs(
        pages={"protocol.md": protocol, "backends.md": render_backends()}, examples=examples
    )


def write_docs(out: Path, schemas: Path | None = None) -> list[Path]:
    """Write every generated page into `out`; return the paths written. `schemas` is the
    directory of the committed JSON Schemas the protocol reference is rendered from."""
    docs = build_docs(schemas)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in GENERATED:
        path = out / name
        path.write_text(docs.pages[name], encoding="utf-8")
        written.append(path)
    return written
