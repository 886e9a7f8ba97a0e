"""Fixtures shared by the e2e tests. The real-CLI ones live in their own modules."""

from __future__ import annotations

from tests.e2e.claude_env import claude_bin, claude_env

__all__ = ["claude_bin", "claude_env"]
