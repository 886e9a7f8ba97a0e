"""Markdown pieces shared by the generated pages."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "HEADER",
    "anchor",
    "cell",
    "json_block",
    "method_anchor",
    "table",
    "text_block",
    "yes",
]

HEADER = "<!-- generated — do not edit; run `threadline docs --out docs` -->\n"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def cell(text: str) -> str:
    """Text that stays inside one table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table: the header, its rule, then one line per row (cells as given)."""
    rule = "|" + "---|" * len(header)
    return [_row(header), rule, *(_row(row) for row in rows)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def anchor(name: str) -> str:
    """The anchor of a type's section."""
    return "t-" + name.lower()


def method_anchor(method: str) -> str:
    return method.lower().replace("/", "-")


def json_block(message: Any) -> list[str]:
    """One message on one line, as on the wire; `captured` tells tests/e2e/test_docs_examples.py
    that `threadline docs` ran it (tests/unit/test_docs_fresh.py keeps it current)."""
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return ["```json captured", line, "```"]


def text_block(why: str, lines: list[str]) -> list[str]:
    """A block of text that is not a command, marked so for tests/e2e/test_docs_examples.py."""
    return [f"<!-- not-run: {why} -->", "```text", *lines, "```"]
