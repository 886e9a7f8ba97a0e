"""Protocol fuzzing against a real `python -m threadline` (mock backend, 64 KiB request cap).

Each test drives one long-lived server with hypothesis-generated lines; every line is checked
against the model in `oracle` (exactly the right answer, or none), every message the server
writes against `schemas/` (and Codex's schema when available), and the process must stay up. At
the end of each test `thread/list` must still answer, RSS must not have grown out of bounds, and
the server must exit 0 on stdin EOF. The default run sends 10,000 inputs over stdio; the `slow`
run 100,000. The same cases run over a WebSocket listener (`--listen ws://`, one text frame per
line) with an eighth of the examples (`WS_SHARE`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from . import strategies as fz
from .harness import FuzzInput, FuzzSession

pytestmark = pytest.mark.e2e

#: RSS may grow by this much over one test: caches, threads the fuzzer started (each stays
#: loaded), the allocator's high-water mark. Seen: at most 1 MiB over a default case, 6 MiB over
#: the slow batches case (15,000 inputs); a leak of ~2 kB per input fails the slow run.
RSS_GROWTH_KB = 32 * 1024
#: The ws cells run this share of each case's examples (the same properties, fewer inputs: the
#: transport under test is the framing, which the first few hundred inputs cover).
WS_SHARE = 8

StartSession = Callable[..., FuzzSession]


@dataclass(frozen=True)
class Case:
    """`examples` hypothesis examples, each a drawn input plus `derived` seeded mutants (see
    `mutate`); an input is one line, or at least `lines` pipelined ones."""

    base: st.SearchStrategy[FuzzInput]
    examples: int
    derived: int
    structural: float
    before_initialize: bool = False
    lines: int = 1

    def min_lines(self, examples: int | None = None) -> int:
        """The fewest lines this case sends (with `examples` examples instead of its own).
        Before initialize, the inputs that would initialize are left out (~3%; 5% allowed)."""
        lines = (examples or self.examples) * (1 + self.derived) * self.lines
        return lines * 95 // 100 if self.before_initialize else lines


def fuzz(session: FuzzSession, case: Case, node: str, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        # No shrinking: the server's state moves on with every input, so replaying a smaller
        # case would not reproduce it. The failure message names the exact line and the
        # expected answer; hypothesis prints the whole case.
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(fz.cases(case.base, case.derived, case.structural))
    def one(inputs: list[FuzzInput]) -> None:
        for fuzz_input in inputs:
            if case.before_initialize and session.would_initialize(fuzz_input):
                continue  # keep this server uninitialized
            session.check(fuzz_input)

    one()
    session.finish(node=node, min_inputs=case.min_lines(examples), rss_growth_kb=RSS_GROWTH_KB)


# The default run: at least 10,000 lines in all (see test_fuzz_counts_add_up).
CASES: dict[str, Case] = {
    # every method (and non-methods) before initialize: all -32600 "Not initialized"
    "before-initialize": Case(
        fz.request_lines() | fz.batch_lines(), 200, 5, 0.8, before_initialize=True
    ),
    # requests for every client method with valid and wrong params, odd ids and envelopes
    "requests": Case(
        st.one_of(fz.request_lines(), fz.request_lines(), fz.request_lines(), fz.turn_lines()),
        420,
        5,
        0.8,
    ),
    # byte-level damage to valid lines
    "mutations": Case(fz.mutated_lines(), 300, 6, 0.1),
    # batches: empty, garbage, big, notifications only, mixed requests/notifications/responses
    "batches": Case(fz.batch_lines(), 375, 3, 0.7),
    # invalid UTF-8, deep nesting, lines around and far beyond the cap, id literals
    "edges": Case(fz.edge_lines, 500, 2, 0.3),
    # responses to ids issued and never issued, while turns run and ask for approvals
    "responses": Case(
        st.one_of(
            fz.response_lines(),
            fz.response_lines(),
            fz.turn_lines(),
            fz.turn_lines(),
            fz.request_lines(methods=["turn/start"]),
        ),
        250,
        3,
        0.5,
    ),
    # 2-5 lines written at once: answers may come in any order, each exactly once
    "pipelined": Case(fz.pipelined_lines(), 100, 2, 0.8, lines=2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_protocol_fuzz(name: str, fuzz_session: StartSession) -> None:
    case = CASES[name]
    session = fuzz_session(name=name, initialize=not case.before_initialize)
    fuzz(session, case, f"fuzz[{name}]", case.examples)


@pytest.mark.parametrize("name", sorted(CASES))
def test_protocol_fuzz_ws(name: str, fuzz_session: StartSession) -> None:
    """The same case over a WebSocket listener: one text frame per line, the same oracle."""
    case = CASES[name]
    session = fuzz_session(name=name, initialize=not case.before_initialize, transport="ws")
    fuzz(session, case, f"fuzz-ws[{name}]", case.examples // WS_SHARE)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_protocol_fuzz_long(name: str, fuzz_session: StartSession) -> None:
    """Ten times the default run (over 100,000 lines), each case on one server."""
    case = CASES[name]
    session = fuzz_session(name=name, initialize=not case.before_initialize)
    fuzz(session, case, f"fuzz-long[{name}]", case.examples * 10)


@pytest.mark.slow
def test_handshake_fuzz(fuzz_session: StartSession) -> None:
    """The first input of a fresh server initializes it, alone, inside a batch or among
    pipelined lines, followed by requests: every line is answered as the model says (a fresh
    server per example, so this one is slow)."""
    sessions = 0

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(fz.handshake_lines(), st.lists(fz.request_lines(), min_size=1, max_size=5))
    def one(handshake: FuzzInput, after: list[FuzzInput]) -> None:
        nonlocal sessions
        sessions += 1
        session = fuzz_session(name=f"handshake{sessions}", initialize=False)
        assert session.would_initialize(handshake), handshake
        for fuzz_input in (handshake, *after):
            session.check(fuzz_input)
        assert session.state.initialized
        session.finish(node="fuzz-handshake", min_inputs=2, rss_growth_kb=RSS_GROWTH_KB)

    one()


def test_fuzz_counts_add_up() -> None:
    """The default run sends at least 10,000 lines (the slow run ten times as many)."""
    assert sum(case.min_lines() for case in CASES.values()) >= 10_000
