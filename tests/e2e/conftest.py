"""Fixtures shared by the e2e tests: every CLI's `<id>_bin` and `<id>_env`
(tests/e2e/<id>_env.py, built on tests/support/cli_env.py)."""

from __future__ import annotations

from tests.support.cli_env import env_fixtures

globals().update(env_fixtures())
