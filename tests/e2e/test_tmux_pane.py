"""The tmux pane the tui modes drive (backends/kit/tmux.py), with a real tmux server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from threadline.backends.kit.tmux import open_tmux_pane

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("tmux")]


async def test_a_paste_into_an_exited_program_keeps_every_session(tmp_path: Path) -> None:
    """tmux 3.3a's server dies of a paste into a dead pane; the pane refuses it instead, and
    the program's last screen stays readable."""
    env = dict(os.environ)
    cwd = str(tmp_path)
    async with open_tmux_pane("keeper", ["cat"], cwd=cwd, env=env) as keeper:
        quitter = ["sh", "-c", "echo bye-now; exit 3"]
        async with open_tmux_pane("quitter", quitter, cwd=cwd, env=env) as pane:
            with trio.fail_after(10):
                while pane.alive:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert await pane.paste("hello") is False
            assert "bye-now" in await pane.capture(history=True)
        assert await keeper.paste("still-served") is True
        with trio.fail_after(10):
            while "still-served" not in await keeper.capture():  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert keeper.alive
