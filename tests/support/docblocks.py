"""The fenced code blocks of README.md and docs/*.md, for the test that runs them
(tests/e2e/test_docs_examples.py).

A block is the text between an opening fence (three or more backticks or tildes, up to three
spaces of indentation) and the closing fence. Its info string is the language, then optional
attributes: `key=value` or bare words (GitHub shows neither). A block that cannot run says why
in an HTML comment on the last non-blank line before it::

    <!-- not-run: needs a logged-in claude -->

Attributes the test knows (every other one is an error):

- `answers=y,a` (`sh`): stdin gets these lines, as a user answering prompts would type them;
- `clone` (`sh`): run in a fresh `git clone` of the repository, outside the repository's venv;
- `fake=claude` (`sh`, `json`): run against the real `claude` CLI and tests/fakes' Anthropic API;
- `file=NAME` (`js`): the file name the doc tells the reader to save the block as;
- `output` (`text`): what the runnable block before it prints (each line in order; `…`
  matches anything);
- `transcript` (`text`): a session shown as `→` / `←` messages, replayed against a real server
  (tests/support/docsession.py);
- `config` (`json`): a `thread/start` `config` object, not a message;
- `captured` (`json`, generated pages only): a message captured from a real session by
  `threadline docs`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ROOT", "Block", "doc_files", "extract", "output_of"]

ROOT = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")
_NOT_RUN = re.compile(r"^<!--\s*not-run\b:?(.*?)-->$")


@dataclass
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    attrs: dict[str, str] = field(default_factory=dict)
    #: The reason of a `not-run` marker ("" when the marker gives none); None: no marker.
    not_run: str | None = None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _info(info: str) -> tuple[str, dict[str, str]]:
    words = shlex.split(info)
    if not words:
        return "", {}
    attrs = {}
    for word in words[1:]:
        key, _, value = word.partition("=")
        attrs[key] = value
    return words[0].lower(), attrs


def extract(path: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of `path`, in order. An unclosed block runs to the end of the file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    previous = ""  # the last non-blank line outside a block
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            if lines[i].strip():
                previous = lines[i].strip()
            i += 1
            continue
        indent, fence, info = match.groups()
        lang, attrs = _info(info)
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = _FENCE.match(lines[j])
            if (
                close
                and close.group(2)[0] == fence[0]
                and len(close.group(2)) >= len(fence)
                and not close.group(3).strip()
            ):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        marker = _NOT_RUN.match(previous)
        blocks.append(
            Block(
                path=str(path.relative_to(root)),
                line=i + 1,
                lang=lang,
                text="\n".join(body) + "\n",
                attrs=attrs,
                not_run=marker.group(1).strip() if marker else None,
            )
        )
        previous = ""
        i = j + 1
    return blocks


def output_of(blocks: list[Block], block: Block) -> Block | None:
    """The `text output` block right after `block` (same file), if there is one."""
    at = blocks.index(block)
    following = blocks[at + 1] if at + 1 < len(blocks) else None
    if following is not None and following.lang == "text" and "output" in following.attrs:
        return following
    return None
