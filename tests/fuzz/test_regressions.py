"""Lines the protocol fuzzer found mishandled, each checked against the oracle on a real server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .harness import FuzzInput, FuzzSession

pytestmark = pytest.mark.e2e

StartSession = Callable[..., FuzzSession]


def check_lines(session: FuzzSession, lines: list[bytes]) -> None:
    for line in lines:
        session.check(FuzzInput(line, "regression"))
    session.finish(node="regression", min_inputs=len(lines), rss_growth_kb=1 << 30)


def test_form_feed_and_vertical_tab_lines_are_parse_errors(fuzz_session: StartSession) -> None:
    """`\\x0b`/`\\x0c` are not JSON whitespace: such a line is unparsable (-32700), not blank.
    (bytes.strip() treated it as blank and the line went unanswered.)"""
    check_lines(
        fuzz_session(),
        [b"\x0b", b"\x0c", b"\t\x0c", b" \x0b ", b"\x0b\x0b", b"\x0c{}", b"", b" \t\r", b"\r"],
    )


def test_odd_pagination_cursors_are_not_internal_errors(fuzz_session: StartSession) -> None:
    """`thread/loaded/list` and `model/list` cursors that pass str.isdigit() but not int():
    superscripts, digits beyond Python's 4300-digit limit. Both were -32603 Internal error."""
    lines = [
        f'{{"id":{n},"method":"{method}","params":{{"cursor":"{cursor}"}}}}'.encode()
        for n, (method, cursor) in enumerate(
            (method, cursor)
            for method in ("thread/loaded/list", "model/list", "thread/list")
            for cursor in ("\u00b2", "\\u2075", "9" * 5000, "\u0663", "1")
        )
    ]
    check_lines(fuzz_session(), lines)
