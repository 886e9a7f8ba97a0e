"""The early `initialize` answer (server/handshake.py) against the engine's own answer.

The handshake answers the first `initialize` before the engine is imported, from the backend
catalog. These tests hold it to the engine: the same request must get byte-for-byte the same
response from both paths, in every environment that changes the answer, and anything that is
not a plain `initialize` request must reach the engine untouched."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support.tools import TOOLS_BIN
from threadline.backends.instances import create_backends
from threadline.backends.registry import BACKEND_IDS
from threadline.server.app import Server, backend_infos
from threadline.server.config import ServerConfig
from threadline.server.handshake import answer_first_initialize, catalog_backend_infos
from threadline.store import ThreadStore


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(params=["pinned-clis", "no-clis", "cli-path-script", "not-executable"])
def cli_env(request: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str | None]:
    """An environment that changes what `initialize` reports; returns (BACKEND_CLI_PATH,)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cli_path: str | None = None
    if request.param == "pinned-clis":
        if not TOOLS_BIN.is_dir():
            pytest.skip("run scripts/install-clis")
        monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{bin_dir}")
    elif request.param == "cli-path-script":
        # Not from an npm package: its version comes from a `--version` run.
        cli_path = str(_script(tmp_path / "my-claude", "echo '9.9.9 (Claude Code)'\n"))
        _script(bin_dir / "gemini", "exit 3\n")  # --version fails: unavailable
    elif request.param == "not-executable":
        (bin_dir / "codex").write_text("not a program")
    return (cli_path,)


def test_catalog_reports_what_the_backends_report(cli_env: tuple[str | None]) -> None:
    (cli_path,) = cli_env
    engine = trio.run(backend_infos, create_backends(), cli_path, 10.0, "claude")
    assert catalog_backend_infos(cli_path, "claude") == engine
    assert [i.id for i in engine] == list(BACKEND_IDS)


async def _engine_answer(line: bytes, root: Path, config: ServerConfig) -> bytes:
    """The full server's answer to `line` sent as the first request."""
    server = Server(config, ThreadStore(root), create_backends())
    to_server, server_in = trio.testing.memory_stream_one_way_pair()
    server_out, from_server = trio.testing.memory_stream_one_way_pair()
    received = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve, server_in, server_out)
        await to_server.send_all(line + b"\n")
        with trio.fail_after(20):
            while b"\n" not in received:
                received += await from_server.receive_some()
        await to_server.aclose()
    return received


def _early_answer(data: bytes, root: Path, cli_path: str | None) -> tuple[bytes, Any]:
    """(what the handshake wrote, the Handshake) for `data` arriving on stdin."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    try:
        os.write(in_w, data)
        os.close(in_w)
        handshake = answer_first_initialize(
            root, cli_path, "claude", in_r, out_w, install_signal_handlers=False
        )
        os.close(out_w)
        written = b""
        while chunk := os.read(out_r, 65536):
            written += chunk
        return written, handshake
    finally:
        for fd in (in_r, out_r):
            os.close(fd)


REQUESTS = [
    {"id": 1, "method": "initialize", "params": {"clientInfo": {"name": "a", "version": "1"}}},
    {
        "jsonrpc": "2.0",
        "id": "init-é",
        "method": "initialize",
        "params": {
            "clientInfo": {"name": "ed", "title": "Editor", "version": "2"},
            "capabilities": {"experimentalApi": True, "optOutNotificationMethods": ["x/y"]},
            "futureField": {"ignored": True},
        },
    },
    {
        "id": 7,
        "method": "initialize",
        "params": {"clientInfo": {"name": "n", "version": "0"}, "capabilities": None},
    },
]


@pytest.mark.parametrize("request_", REQUESTS, ids=["minimal", "full", "null-capabilities"])
def test_early_answer_is_the_engines_answer(
    request_: dict[str, Any], cli_env: tuple[str | None], tmp_path: Path
) -> None:
    (cli_path,) = cli_env
    line = json.dumps(request_).encode()
    root = tmp_path / "state"
    written, handshake = _early_answer(line + b"\n", root, cli_path)
    config = ServerConfig(default_backend="claude", cli_path=cli_path)
    assert written == trio.run(_engine_answer, line, root, config)
    assert json.loads(written)["result"]["serverInfo"]["name"] == "threadline"
    assert handshake.params is not None and handshake.pending == b""


def test_bytes_after_the_first_line_reach_the_engine(tmp_path: Path) -> None:
    rest = b'{"id":2,"method":"thread/list","params":{}}\n{"id":3,"meth'
    first = json.dumps(REQUESTS[0]).encode() + b"\n"
    written, handshake = _early_answer(first + rest, tmp_path, None)
    assert json.loads(written)["id"] == 1
    assert handshake.pending == rest


_INIT = {"method": "initialize", "params": {"clientInfo": {"name": "a", "version": "1"}}}


def _line(**fields: Any) -> bytes:
    return json.dumps({**_INIT, **fields}).encode() + b"\n"


HANDED_OVER = {
    "not-json": b"{oops\n",
    "blank-line": b"\n" + _line(id=1),
    "batch": b"[" + _line(id=1).strip() + b"]\n",
    "another-method": _line(id=1, method="thread/list"),
    "notification": _line(),
    "bool-id": _line(id=True),
    "null-id": _line(id=None),
    "bad-jsonrpc": _line(id=1, jsonrpc="1.0"),
    "no-client-info": _line(id=1, params={}),
    "params-list": _line(id=1, params=[]),
    "wrong-type": _line(id=1, params={"clientInfo": {"name": 1, "version": "1"}}),
    "eof-without-newline": _line(id=1).strip(),
    "eof": b"",
}


@pytest.mark.parametrize("data", HANDED_OVER.values(), ids=HANDED_OVER.keys())
def test_anything_else_is_left_to_the_engine(data: bytes, tmp_path: Path) -> None:
    written, handshake = _early_answer(data, tmp_path, None)
    assert written == b""
    assert handshake.params is None
    assert handshake.pending == data


@pytest.mark.parametrize("version, outdated", [("1.0.0 (Claude Code)", True), ("99.0.0", False)])
def test_a_cli_older_than_the_oldest_tested_is_flagged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, outdated: bool
) -> None:
    """`initialize` (both paths) says when a CLI predates what threadline is tested with."""
    monkeypatch.setenv("PATH", str(tmp_path))
    cli = str(_script(tmp_path / f"claude-{outdated}", f"echo '{version}'\n"))
    engine = trio.run(backend_infos, create_backends(), cli, 10.0, "claude")
    assert catalog_backend_infos(cli, "claude") == engine
    [info] = [i for i in engine if i.id == "claude"]
    assert info.available and info.outdated is outdated
    if outdated:
        assert info.message is not None and "older than the oldest version" in info.message
        assert "`npm install -g @anthropic-ai/claude-code@" in info.message
    else:
        assert info.message is None
