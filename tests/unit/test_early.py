"""What a plan of procs/early.py may hold and what it matches (tests/e2e/test_early_start.py runs
it with the real CLIs)."""

from __future__ import annotations

import os

import pytest

from threadline.procs.early import Eligible, Plan, _plan_for

CLAUDE = Eligible(free=("--session-id=",), env_keys=("CLAUDECODE",))


def test_a_plan_keeps_only_pwd_and_the_backends_own_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CLAUDECODE", "1")
    env = {k: v for k, v in os.environ.items() if k != "CLAUDECODE"}
    plan = _plan_for(["claude", "--session-id=a"], "/w", {**env, "PWD": "/w"}, CLAUDE)
    assert plan is not None
    assert (plan.env_set, plan.env_unset, plan.free) == (
        {"PWD": "/w"},
        ["CLAUDECODE"],
        list(CLAUDE.free),
    )
    # any other variable of its own (a thread's, a credential) and there is no plan
    assert _plan_for(["claude"], "/w", {**env, "ZAI_KEY": "k"}, CLAUDE) is None


def test_no_plan_carries_a_credential_in_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "s3cr3t-value")
    argv = ["codex", "app-server", "-c", 'x.token="s3cr3t-value"']
    assert _plan_for(argv, "/w", dict(os.environ), Eligible()) is None
    assert _plan_for(argv[:2], "/w", dict(os.environ), Eligible()) is not None


def test_a_plan_matches_the_same_process_with_any_fresh_session_id() -> None:
    plan = Plan(["claude", "-p", "--session-id=a"], "/w", {"PWD": "/w"}, [], ["--session-id="])
    env = plan.env(os.environ)
    started = plan.fresh_argv()
    assert started[:2] == ["claude", "-p"] and started[2] != "--session-id=a"
    assert started[2].startswith("--session-id=") and len(started[2]) == len(plan.argv[2]) + 35
    assert plan.matches(["claude", "-p", "--session-id=b"], "/w", env)
    assert not plan.matches(["claude", "-p", "--resume=b"], "/w", env)
    assert not plan.matches(["claude", "-p", "--session-id=b", "-x"], "/w", env)
    assert not plan.matches(["claude", "-p", "--session-id=b"], "/other", env)
    assert not plan.matches(["claude", "-p", "--session-id=b"], "/w", {**env, "X": "1"})


@pytest.mark.parametrize(
    "data", [None, [], {}, {"argv": []}, {"argv": "x", "cwd": 1}, {"argv": ["a"], "cwd": "/"}]
)
def test_a_damaged_plan_is_none(data: object) -> None:
    assert Plan.from_json(data) is None
