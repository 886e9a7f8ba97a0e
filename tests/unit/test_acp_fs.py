"""The `fs/*` requests an ACP agent (gemini, opencode) sends are confined to the thread's cwd:
`..`, absolute paths elsewhere and symlinks pointing out are refused before any file access."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from threadline.backends import base as b
from threadline.backends.kit.acp import AcpError, AcpHost, AcpSession


def session(cwd: Path, turn_running: bool = True) -> AcpSession:
    settings = b.SessionSettings(thread_id="t", cwd=str(cwd), mode="acp")
    s = AcpSession(cast(AcpHost, SimpleNamespace()), settings, "gemini")
    if turn_running:
        s._turn_ctx = cast(b.TurnContext, SimpleNamespace())
    return s


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "project" / "sub").mkdir(parents=True)
    (tmp_path / "project" / "sub" / "ok.txt").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    os.symlink(tmp_path / "secret.txt", tmp_path / "project" / "link-out")
    os.symlink(tmp_path, tmp_path / "project" / "dir-out")
    return tmp_path


async def test_reads_inside_the_cwd_work(tree: Path) -> None:
    s = session(tree / "project")
    assert await s.on_request("fs/read_text_file", {"path": "sub/ok.txt"}) == {
        "content": "one\ntwo\nthree\n"
    }
    absolute = str(tree / "project" / "sub" / "ok.txt")
    result = await s.on_request("fs/read_text_file", {"path": absolute, "line": 2, "limit": 1})
    assert result == {"content": "two\n"}
    await s.on_request("fs/write_text_file", {"path": "sub/new.txt", "content": "x"})
    assert (tree / "project" / "sub" / "new.txt").read_text() == "x"


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",
        "sub/../../secret.txt",
        "link-out",
        "dir-out/secret.txt",
        "/etc/passwd",
        "{tree}/secret.txt",
        "{tree}/project-sibling/x",
        "",
        None,
        42,
    ],
)
async def test_paths_outside_the_cwd_are_refused(tree: Path, path: Any) -> None:
    (tree / "project-sibling").mkdir()
    if isinstance(path, str):
        path = path.format(tree=tree)
    s = session(tree / "project")
    for method, extra in (("fs/read_text_file", {}), ("fs/write_text_file", {"content": "PWNED"})):
        with pytest.raises(AcpError) as info:
            await s.on_request(method, {"path": path, **extra})
        assert info.value.code == -32602, info.value
    assert (tree / "secret.txt").read_text() == "TOP SECRET"
    assert not (tree / "project-sibling" / "x").exists()


async def test_writes_outside_a_turn_are_refused(tree: Path) -> None:
    s = session(tree / "project", turn_running=False)
    with pytest.raises(AcpError):
        await s.on_request("fs/write_text_file", {"path": "sub/idle.txt", "content": "x"})
    assert not (tree / "project" / "sub" / "idle.txt").exists()


async def test_other_client_methods_are_not_implemented(tree: Path) -> None:
    s = session(tree / "project")
    with pytest.raises(AcpError) as info:
        await s.on_request("terminal/create", {"command": "rm -rf /"})
    assert info.value.code == -32601
