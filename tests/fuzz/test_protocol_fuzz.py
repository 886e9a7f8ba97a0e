"""Protocol fuzzing against a real `python -m threadline` (mock backend, 64 KiB request cap).

Each test drives one long-lived server with hypothesis-generated lines; every line is checked
against the model in `oracle` (exactly the right answer, or none), every stdout line against
`schemas/` (and Codex's schema when available), and the process must stay up. At the end of each
test `thread/list` must still answer, RSS must not have grown out of bounds, and the server must
exit 0 on stdin EOF. The default run sends 10,000 inputs; the `slow` run 100,000.
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

#: RSS may grow by this much over one test: caches, loaded threads the fuzzer opened, the
#: allocator's high-water mark. A leak per input would pass it within a few thousand inputs.
RSS_GROWTH_KB = 96 * 1024

StartSession = Callable[..., FuzzSession]


@dataclass(frozen=True)
class Case:
    """`examples` hypothesis examples, each a drawn input plus `derived` seeded mutants (see
    `mutate`): `examples * (1 + derived)` inputs."""

    base: st.SearchStrategy[FuzzInput]
    examples: int
    derived: int
    structural: float
    before_initialize: bool = False

    @property
    def inputs(self) -> int:
        return self.examples * (1 + self.derived)


def fuzz(session: FuzzSession, case: Case, node: str, scale: int = 1) -> None:
    skipped = 0

    @settings(
        max_examples=case.examples * scale,
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
        nonlocal skipped
        for fuzz_input in inputs:
            if case.before_initialize and session.would_initialize(fuzz_input):
                skipped += 1  # keep this server uninitialized
                continue
            session.check(fuzz_input)

    one()
    # before initialize, the few inputs that would initialize are left out (~3%)
    wanted = case.inputs * scale * (95 if case.before_initialize else 100) // 100
    session.finish(node=node, min_inputs=wanted, rss_growth_kb=RSS_GROWTH_KB)


# The default run: 10,000 inputs in all (hypothesis examples x (1 + derived mutants)).
CASES: dict[str, Case] = {
    # every method (and non-methods) before initialize: all -32600 "Not initialized"
    "before-initialize": Case(
        fz.request_lines() | fz.batch_lines(), 200, 5, 0.8, before_initialize=True
    ),
    # requests for every client method with valid and wrong params, odd ids and envelopes
    "requests": Case(fz.request_lines(), 500, 5, 0.8),
    # byte-level damage to valid lines
    "mutations": Case(fz.mutated_lines(), 300, 6, 0.1),
    # batches: empty, garbage, notifications only, mixed requests/notifications/responses
    "batches": Case(fz.batch_lines(), 375, 3, 0.7),
    # invalid UTF-8, deep nesting, lines around and far beyond the cap, id literals
    "edges": Case(fz.edge_lines, 500, 2, 0.3),
    # responses to ids issued and never issued, while turns run and ask for approvals
    "responses": Case(fz.response_lines() | fz.request_lines(methods=["turn/start"]), 250, 3, 0.5),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_protocol_fuzz(name: str, fuzz_session: StartSession) -> None:
    case = CASES[name]
    session = fuzz_session(name=name, initialize=not case.before_initialize)
    fuzz(session, case, f"fuzz[{name}]")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_protocol_fuzz_long(name: str, fuzz_session: StartSession) -> None:
    """Ten times the default run (100,000 inputs), each case on one server."""
    case = CASES[name]
    session = fuzz_session(name=name, initialize=not case.before_initialize)
    fuzz(session, case, f"fuzz-long[{name}]", scale=10)


def test_fuzz_counts_add_up() -> None:
    """The default run sends at least 10,000 inputs (the slow run ten times as many)."""
    assert sum(case.inputs for case in CASES.values()) >= 10_000
