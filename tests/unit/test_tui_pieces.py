"""The pieces of the tui modes that need no CLI: the hook endpoint's authentication, claude's
config answers (onboarding, trust, the API key), the hook settings and the transcript tail."""

from __future__ import annotations

import json
import os
import stat
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import trio

from threadline.backends.claude.tui_debug import DebugTail
from threadline.backends.claude.tui_hooks import TOKEN_VARIABLE, hook_settings
from threadline.backends.claude.tui_setup import config_path, prepare_config
from threadline.backends.kit.hook_http import new_token, serve_hooks


def _post(port: int, path: str, body: bytes, token: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


async def test_hook_endpoint_answers_only_its_token() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    async def handler(name: str, payload: dict[str, Any]) -> dict[str, Any]:
        calls.append((name, payload))
        return {"seen": name}

    token = new_token()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_hooks, handler, token)

        def post(path: str, body: bytes, token: str | None) -> tuple[int, Any]:
            return _post(port, path, body, token)

        ok = await trio.to_thread.run_sync(post, "/hook/Stop", b'{"a": 1}', token)
        assert ok == (200, {"seen": "Stop"})
        for bad_token in (None, "wrong", token + "x"):
            status, _ = await trio.to_thread.run_sync(post, "/hook/Stop", b"{}", bad_token)
            assert status == 401
        status, _ = await trio.to_thread.run_sync(post, "/hook/Stop", b"[1, 2]", token)
        assert status == 400
        status, _ = await trio.to_thread.run_sync(post, "/hook/Stop", b"{not json", token)
        assert status == 400
        nursery.cancel_scope.cancel()
    assert calls == [("Stop", {"a": 1})]  # the refused requests never reached the handler


def test_claude_config_answers_what_a_fresh_claude_asks(tmp_path: Path) -> None:
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "cfg"), "ANTHROPIC_API_KEY": "sk-ant-" + "k" * 40}
    path = Path(config_path(env))
    assert path == tmp_path / "cfg" / ".claude.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"userID": "u", "customApiKeyResponses": {"rejected": ["x"]}}))
    prepare_config(env, str(tmp_path / "work"))
    data = json.loads(path.read_text())
    assert data["userID"] == "u"  # (the rest of claude's config is kept)
    assert data["hasCompletedOnboarding"] is True
    assert data["projects"][str(tmp_path / "work")]["hasTrustDialogAccepted"] is True
    # the key's last 20 characters, as claude records a person's yes; never the key
    assert data["customApiKeyResponses"]["approved"] == ["k" * 20]
    assert env["ANTHROPIC_API_KEY"] not in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # without CLAUDE_CONFIG_DIR: ~/.claude.json
    assert config_path({"HOME": "/h"}) == "/h/.claude.json"


def test_hook_settings_hold_no_secret() -> None:
    settings = json.loads(hook_settings("http://127.0.0.1:1/hook"))
    events = set(settings["hooks"])
    assert {"UserPromptSubmit", "PreToolUse", "PermissionRequest", "Stop", "StopFailure"} <= events
    for entries in settings["hooks"].values():
        [hook] = entries[0]["hooks"]
        assert hook["type"] == "http"
        assert hook["headers"] == {"Authorization": f"Bearer ${TOKEN_VARIABLE}"}
        assert hook["allowedEnvVars"] == [TOKEN_VARIABLE]
    permission = settings["hooks"]["PermissionRequest"][0]["hooks"][0]
    assert permission["timeout"] >= 24 * 3600  # longer than any approval wait


def test_claude_debug_log_lines_become_api_retries(tmp_path: Path) -> None:
    """An interactive claude's failed API attempts, read from its debug log as it grows."""
    log = tmp_path / "debug.log"
    log.write_text(
        "2026-11-27T22:23:13.441Z [DEBUG] Error log sink initialized\n"
        "2026-11-27T22:23:13.944Z [ERROR] API error (attempt 1/11): undefined Connection error.\n"
        "2026-11-27T22:23:14.481Z [ERROR] API error (attempt 2/11): 401 "
        '{"type":"error","error":{"type":"authentication_error"}}\n'
        "2026-11-27T22:23:15.700Z [ERROR] API error (attempt 3/1"
    )
    tail = DebugTail(str(log))
    first, second = tail.read()
    assert first.message["error_status"] is None and first.message["attempt"] == 1
    assert first.message["max_retries"] == 11 and first.message["error"] == "Connection error."
    assert second.message["error_status"] == 401 and round(second.at - first.at, 3) == 0.537
    assert tail.read() == []  # (the last line is not complete yet)
    with log.open("a") as f:
        f.write("1): 529 overloaded\n")
    [third] = tail.read()
    assert third.message["error_status"] == 529 and third.message["attempt"] == 3
