"""Fixtures shared by the e2e tests: every CLI's `<id>_bin` and `<id>_env`
(tests/e2e/<id>_env.py, built on tests/support/cli_env.py)."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.support.cli_env import env_fixtures

globals().update(env_fixtures())


@pytest.fixture
def tmux() -> None:
    """tmux is needed (scripts/install-clis installs it): skip without it, fail under CI."""
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed; CI must run the tui tests", pytrace=False)
        pytest.skip("tmux is not installed (scripts/install-clis installs it)")
