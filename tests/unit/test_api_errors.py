"""Model-API failures that say what to do: when threadline gives up on a CLI's retries
(`ConnectionWatch`), which texts are connection failures, and where each CLI's API is
(the URL an error names). The real CLIs are exercised in tests/matrix/test_api_reach.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from threadline.backends.codex.api import provider_url as codex_url
from threadline.backends.kit.api_errors import (
    ConnectionWatch,
    is_connection_failure,
    no_credentials,
    refused,
    unreachable,
)
from threadline.backends.kit.api_probe import connect_error, probe_target
from threadline.backends.opencode.api import model_not_found, provider_url, stream_failure
from threadline.backends.registry import SPECS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_watch_gives_up_once_the_next_attempt_would_pass_the_budget() -> None:
    clock = Clock()
    watch = ConnectionWatch(budget=8, clock=clock)
    # claude's own schedule (retry_delay_ms): 0.55, 1.2, 2.2, 5.0, then 8.1 s
    for at, delay in ((0.1, 0.55), (0.7, 1.2), (1.9, 2.2)):
        clock.now = 100 + at
        assert not watch.failed(delay)
    clock.now = 104.1
    assert watch.failed(5.0)  # the next attempt would come 9 s after the first failure
    assert watch.elapsed() == pytest.approx(4.0)


def test_watch_guesses_the_next_attempt_from_the_last_gap_and_progress_resets_it() -> None:
    clock = Clock()
    watch = ConnectionWatch(budget=8, clock=clock)
    for at in (3.3, 6.6):  # codex's notices, ~3.3 s apart: no delay given
        clock.now = 100 + at
        assert not watch.failed()
    clock.now = 110.0
    assert watch.failed()
    # an answer from the model ends the series: a long working turn is not cut short
    watch.progress()
    clock.now = 500.0
    assert not watch.failed()


async def test_watch_expires_at_the_budget_without_waiting_for_a_late_attempt(
    autojump_clock: trio.abc.Clock,
) -> None:
    watch = ConnectionWatch(budget=8, clock=trio.current_time)
    ended: list[float] = []

    async def wait() -> None:
        await watch.expired()
        ended.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        start = trio.current_time()
        await trio.sleep(30)  # no failure: nothing expires
        assert ended == []
        watch.failed()
        await trio.sleep(5)
        watch.progress()  # the model answered: that series is over
        await trio.sleep(30)
        assert ended == []
        watch.failed()  # a new series; its next attempt never comes (a DNS lookup hangs)
        await trio.sleep(20)
    assert ended == [pytest.approx(start + 65 + 8)]


def test_watch_gives_up_on_the_second_refusal() -> None:
    watch = ConnectionWatch()
    assert not watch.refused()  # (the first retry may follow a token refresh)
    assert watch.refused()


@pytest.mark.parametrize(
    ("text", "connection"),
    [
        ("API Error: Unable to connect to API (ConnectionRefused)", True),  # claude
        ("Connection failed: error sending request", True),  # codex
        ("failed to lookup address information: Name does not resolve", True),  # codex, DNS
        ("exception TypeError: fetch failed sending request", True),  # gemini
        ("Cannot connect to API: Was there a typo in the url or port?", True),  # opencode
        ("stream disconnected before completion: stream closed before response.completed", False),
        ("We're currently experiencing high demand", False),
        ("API Error: 500 the model broke", False),
    ],
)
def test_connection_failures(text: str, connection: bool) -> None:
    assert is_connection_failure(text) is connection


def test_messages_say_what_to_do() -> None:
    spec = SPECS["claude"]
    error = refused(spec, "http://h/v1/messages", "Invalid API key")
    assert error.message == (
        "Claude Code refused the credentials (HTTP 401 from http://h/v1/messages): "
        "set ANTHROPIC_API_KEY, or run `claude login`"
    )
    assert (error.codex_error_info, error.additional_details) == ("unauthorized", "Invalid API key")
    error = no_credentials(spec, "Not logged in · Please run /login")
    assert error.message.endswith(": set ANTHROPIC_API_KEY, or run `claude login`")
    error = unreachable(spec, "http://h:9/v1/messages", "ANTHROPIC_BASE_URL", "refused", after=4.2)
    assert error.message == (
        "Claude Code cannot reach its model API at http://h:9/v1/messages (still failing after "
        "4 s of retries): check the network connection and proxy settings, and ANTHROPIC_BASE_URL"
    )
    assert error.codex_error_info == {"httpConnectionFailed": {"httpStatusCode": None}}


def test_opencode_log_lines() -> None:
    line = (
        'timestamp=2026-11-25T11:05:43.239Z level=ERROR run=3a2fa2f7 message="stream error" '
        "providerID=fake modelID=fake-model session.id=ses_1 small=false agent=build "
        'mode=primary error.error="AI_APICallError: Cannot connect to API: Unable to connect. '
        'Is the computer able to access the url? (cause: Error: Unable to connect.)"'
    )
    failure = stream_failure(line)
    assert failure is not None and (failure.session_id, failure.provider) == ("ses_1", "fake")
    assert failure.text.startswith("AI_APICallError: Cannot connect to API")
    overloaded = line.partition("error.error=")[0] + 'error.error="AI_APICallError: Overloaded"'
    assert stream_failure(overloaded) is None  # (a 5xx: OpenCode's own retries stand)
    missing = 'message=failed error="ProviderModelNotFoundError: Model not found: a/b. Did you'
    assert model_not_found(missing) == "Model not found: a/b"


def test_opencode_provider_url(tmp_path: Path) -> None:
    content = {"provider": {"fake": {"options": {"baseURL": "http://127.0.0.1:9/v1"}}}}
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(content), "HOME": str(tmp_path)}
    assert provider_url(env, str(tmp_path), "fake") == "http://127.0.0.1:9/v1"
    assert provider_url(env, str(tmp_path), "opencode") == "https://opencode.ai/zen/v1"
    assert "`other`" in provider_url(env, str(tmp_path), "other")


def test_codex_provider_url(tmp_path: Path) -> None:
    env = {"CODEX_HOME": str(tmp_path)}
    assert codex_url(env) == "https://api.openai.com/v1/responses"
    (tmp_path / "config.toml").write_text(
        'model_provider = "mock"\n[model_providers.mock]\nbase_url = "http://127.0.0.1:9/v1"\n'
    )
    assert codex_url(env) == "http://127.0.0.1:9/v1/responses"
    assert codex_url(env, {"model_provider": "openai"}) == "https://api.openai.com/v1/responses"


def test_probe_target_and_a_refused_connection() -> None:
    assert probe_target("https://api.example.com", {}) == ("api.example.com", 443)
    assert probe_target("http://127.0.0.1:9/v1", {}) == ("127.0.0.1", 9)
    # behind a proxy the CLI's path is not ours to test
    assert probe_target("https://api.example.com", {"HTTPS_PROXY": "http://proxy:3128"}) is None

    async def main() -> None:
        with trio.socket.socket() as sock:  # a port that is bound but never listens
            await sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            assert await connect_error("127.0.0.1", port) is not None
            listener = trio.socket.socket()
            await listener.bind(("127.0.0.1", 0))
            listener.listen()
            with listener:
                assert await connect_error("127.0.0.1", listener.getsockname()[1]) is None

    trio.run(main)
