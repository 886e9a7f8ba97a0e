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


def test_initialize_notification_changes_nothing(fuzz_session: StartSession) -> None:
    """An `initialize` notification after the handshake ran the initialize handler: it replaced
    the client's notification opt-outs (here: silencing `thread/started`) and re-ran every
    backend's check. It is ignored now, as `initialize` is only a request."""
    session = fuzz_session()

    async def scenario() -> None:
        srv = session.srv
        client_info = {"name": "late", "version": "1"}
        opt_out = {"optOutNotificationMethods": ["thread/started"]}
        await srv.send(
            {"method": "initialize", "params": {"clientInfo": client_info, "capabilities": opt_out}}
        )
        thread_id = await srv.start_thread(session.workdir)
        await srv.wait_for(
            lambda e: (
                e.get("method") == "thread/started" and e["params"]["thread"]["id"] == thread_id
            ),
            timeout=5,
        )

    session.run(scenario)
    check_lines(
        session, [b'{"method":"initialize","params":{}}', b'{"id":1,"method":"initialize"}']
    )


def test_a_batch_that_initializes_comes_before_the_next_line(fuzz_session: StartSession) -> None:
    """A batch with `initialize` ran as a task, so the line after it (here the sentinel) could be
    handled first and refused with "Not initialized" although initialize had been sent first."""
    init = b'{"id":"i","method":"initialize","params":{"clientInfo":{"name":"b","version":"1"}}}'
    check_lines(
        fuzz_session(initialize=False),
        [
            b'[{"id":1,"method":"thread/list"},' + init + b',{"id":2,"method":"model/list"}]',
            b'{"id":3,"method":"thread/loaded/list"}',
        ],
    )
    check_lines(fuzz_session(initialize=False), [b"[" + init + b"]"])
