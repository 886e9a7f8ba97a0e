"""tests.fakes.anthropic: the fake Messages API, unit-tested over HTTP and proven against the
real `claude` CLI (those tests skip when the CLI is not installed)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic import (
    REDACTED,
    FakeAnthropic,
    HttpError,
    Rule,
    SseError,
    Step,
    Text,
    Thinking,
    ToolUse,
)
from tests.support.cli_env import cli_or_skip


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as f:
        yield f
        assert f.errors == []


# --------------------------------------------------------------------------- HTTP helpers


def request(
    fake: FakeAnthropic,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(fake.url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read()


def sse_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Parse SSE frames strictly: each is exactly `event: X` + `data: {json}`."""
    events = []
    text = raw.decode()
    assert text.endswith("\n\n")
    for frame in text[:-2].split("\n\n"):
        event_line, data_line = frame.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        events.append((event_line[7:], json.loads(data_line[6:])))
    return events


def body(messages: list[dict[str, Any]], *, stream: bool = False) -> dict[str, Any]:
    return {"model": "claude-test-model", "max_tokens": 100, "stream": stream, "messages": messages}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


# --------------------------------------------------------------------------- unit tests


def test_streaming_sse_framing(fake: FakeAnthropic) -> None:
    fake.set_script(
        default=Step(
            [
                Thinking("hmm, let me see", signature="sig-1"),
                Text("hello world, chunked"),
                ToolUse("Bash", {"command": "echo hi"}),
            ],
            chunk_size=5,
        )
    )
    status, headers, raw = request(fake, "/v1/messages?beta=true", body([user("hi")], stream=True))
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    events = sse_events(raw)
    assert all(data["type"] == name for name, data in events)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 3

    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["model"] == "claude-test-model"
    assert start["usage"]["input_tokens"] > 0 and start["content"] == []

    deltas: dict[int, list[dict[str, Any]]] = {}
    for name, data in events:
        if name == "content_block_delta":
            deltas.setdefault(data["index"], []).append(data["delta"])
    assert "".join(d["thinking"] for d in deltas[0][:-1]) == "hmm, let me see"
    assert deltas[0][-1] == {"type": "signature_delta", "signature": "sig-1"}
    assert [d["text"] for d in deltas[1]] == ["hello", " worl", "d, ch", "unked"]
    assert json.loads("".join(d["partial_json"] for d in deltas[2])) == {"command": "echo hi"}
    tool_start = [d for n, d in events if n == "content_block_start"][2]["content_block"]
    assert tool_start["id"].startswith("toolu_") and tool_start["name"] == "Bash"

    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] > 0


def test_non_streaming_json(fake: FakeAnthropic) -> None:
    fake.set_script(default=[[Thinking("t"), Text("plain answer")]])
    status, _, raw = request(fake, "/v1/messages", body([user("hi")]))
    msg = json.loads(raw)
    assert status == 200
    assert msg["type"] == "message" and msg["id"].startswith("msg_")
    assert msg["model"] == "claude-test-model" and msg["stop_reason"] == "end_turn"
    assert msg["content"] == [
        {"type": "thinking", "thinking": "t", "signature": "fake-signature"},
        {"type": "text", "text": "plain answer"},
    ]


def test_count_tokens_and_unknown_routes(fake: FakeAnthropic) -> None:
    status, _, raw = request(fake, "/v1/messages/count_tokens?beta=true", body([user("x" * 400)]))
    assert status == 200 and json.loads(raw)["input_tokens"] >= 100
    for method, path in [("GET", "/v1/models"), ("POST", "/v1/complete"), ("GET", "/v1/messages")]:
        status, _, raw = request(fake, path, {} if method == "POST" else None, method=method)
        assert status == 404, path
        assert json.loads(raw)["error"]["type"] == "not_found_error"
    # Only POST /v1/messages counts as a model call.
    assert len(fake.requests) == 4 and fake.model_requests == []


def test_recording_redaction_and_accessors(fake: FakeAnthropic) -> None:
    payload = body(
        [
            user("<system-reminder>\nctx: do not match me\n</system-reminder>"),
            {"role": "user", "content": "say hi<system-reminder>x</system-reminder>"},
        ]
    )
    payload["system"] = [{"type": "text", "text": "billing"}, {"type": "text", "text": "rules"}]
    secrets = {"x-api-key": "sk-secret", "Authorization": "Bearer sk-secret", "X-App": "cli"}
    request(fake, "/v1/messages?beta=true", payload, headers=secrets)
    [rec] = fake.wait_for_requests(1, timeout=1)
    assert rec.method == "POST" and rec.path == "/v1/messages?beta=true"
    assert rec.route == "/v1/messages" and rec.model == "claude-test-model"
    assert rec.headers["x-api-key"] == rec.headers["authorization"] == REDACTED
    assert rec.headers["x-app"] == "cli"
    assert "sk-secret" not in repr(fake.requests)
    assert rec.body == payload
    assert fake.system_text(0) == "billing\nrules"
    assert fake.messages(0) == payload["messages"]
    assert fake.last_user_text(0) == "say hi"
    assert (rec.rule, rec.step) == ("default", 0)
    with pytest.raises(TimeoutError):
        fake.wait_for_requests(2, timeout=0.05)


def test_rules_match_human_text_and_steps_follow_tool_results(fake: FakeAnthropic) -> None:
    fake.set_script(
        Rule("list files", [ToolUse("Bash", {"command": "ls"}, id="toolu_1"), "Listed."]),
        default="fallback",
    )

    def answer(messages: list[dict[str, Any]]) -> str:
        _, _, raw = request(fake, "/v1/messages", body(messages))
        block = json.loads(raw)["content"][0]
        return str(block.get("text") or block.get("name"))

    # Reminder text never matches; matching is case-insensitive.
    assert answer([user("<system-reminder>list files</system-reminder>hello")]) == "fallback"
    human = user("Please LIST FILES")
    assert answer([human]) == "Bash"
    tool_turn = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash"}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                {"type": "text", "text": "<system-reminder>only a reminder</system-reminder>"},
            ],
        },
    ]
    # role "system" messages (the CLI sends them mid-conversation) are not assistant turns.
    system_msg = {"role": "system", "content": [{"type": "text", "text": "agents: ..."}]}
    assert answer([human, system_msg, *tool_turn]) == "Listed."
    assert answer([human, *tool_turn, *tool_turn]) == "Listed."  # the last step repeats
    assert fake.tool_results()[0]["tool_use_id"] == "toolu_1"
    # A new human message restarts at step 0.
    assert answer([human, *tool_turn, {"role": "assistant", "content": "ok"}, human]) == "Bash"
    assert [(r.rule, r.step) for r in fake.requests] == [
        ("default", 0),
        ("list files", 0),
        ("list files", 1),
        ("list files", 2),
        ("list files", 0),
    ]


def test_http_errors(fake: FakeAnthropic) -> None:
    fake.set_script(
        Rule("auth", [HttpError(401, "invalid x-api-key")]),
        default=HttpError(500, "boom", should_retry=False),
    )
    status, headers, raw = request(fake, "/v1/messages", body([user("hi")], stream=True))
    assert (status, headers["x-should-retry"]) == (500, "false")
    assert json.loads(raw) == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    status, headers, raw = request(fake, "/v1/messages", body([user("auth")]))
    assert status == 401 and "x-should-retry" not in headers
    assert json.loads(raw)["error"] == {
        "type": "authentication_error",
        "message": "invalid x-api-key",
    }


def test_sse_error_after_blocks(fake: FakeAnthropic) -> None:
    fake.set_script(default=Step([Text("kept"), Text("never sent")], sse_error=SseError(1)))
    _, _, raw = request(fake, "/v1/messages", body([user("hi")], stream=True))
    events = sse_events(raw)
    assert [n for n, _ in events][-3:] == ["content_block_delta", "content_block_stop", "error"]
    assert events[-1][1] == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert sum(n == "content_block_start" for n, _ in events) == 1


def test_close_midstream_truncates_the_chunked_body(fake: FakeAnthropic) -> None:
    fake.set_script(default=Step([Text("abcdefgh")], chunk_size=2, close_midstream=True))
    with pytest.raises(http.client.IncompleteRead) as info:
        request(fake, "/v1/messages", body([user("hi")], stream=True))
    partial = info.value.partial.decode()
    assert '"text": "ab"' in partial and '"text": "cd"' not in partial


def test_stall_is_cut_short_by_close() -> None:
    fake = FakeAnthropic(
        default=Step([Text("abcd")], chunk_size=1, stall_after_first_delta_ms=60_000)
    )
    outcome: list[BaseException | bytes] = []

    def client() -> None:
        try:
            outcome.append(request(fake, "/v1/messages", body([user("hi")], stream=True))[2])
        except BaseException as exc:
            outcome.append(exc)

    with fake:
        thread = threading.Thread(target=client)
        thread.start()
        fake.wait_for_requests(1, timeout=5)
        time.sleep(0.2)
        assert thread.is_alive()  # stalled
        started = time.monotonic()
    assert time.monotonic() - started < 2
    thread.join(5)
    assert isinstance(outcome[0], http.client.IncompleteRead)
    assert b'"text": "a"' in outcome[0].partial and b'"text": "b"' not in outcome[0].partial


def test_max_lifetime_stops_the_server() -> None:
    fake = FakeAnthropic(max_lifetime=0.2).start()
    url = fake.url
    deadline = time.monotonic() + 5
    while not fake.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.closed
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/v1/messages", data=b"{}", timeout=2)
    fake.close()  # idempotent


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture
def claude() -> str:
    return str(cli_or_skip("claude"))


def offline_env(fake: FakeAnthropic, tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(env, cwd) for a fully offline CLI run with a fresh HOME and config dir."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    return {
        "PATH": os.environ.get("PATH", os.defpath),  # the Bash tool needs a shell
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "test-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",  # the default (10, with backoff) retries even 401
    }, cwd


def run_claude(
    claude: str, fake: FakeAnthropic, tmp_path: Path, prompt: str, *args: str
) -> tuple[list[dict[str, Any]], Path]:
    """Run `claude -p PROMPT` against `fake`; return (stdout messages, cwd)."""
    env, cwd = offline_env(fake, tmp_path)
    argv = [claude, "-p", prompt, "--output-format", "stream-json", "--verbose", *args]
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    results = [m for m in out if m["type"] == "result"]
    assert len(results) == 1, (proc.returncode, proc.stderr, out)
    # Exit code rule: 1 iff the result is an error.
    assert proc.returncode == (1 if results[0]["is_error"] else 0), proc.stderr
    assert fake.errors == []
    return out, cwd


def result_of(out: list[dict[str, Any]]) -> dict[str, Any]:
    return next(m for m in out if m["type"] == "result")


def assistant_blocks(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for m in out if m["type"] == "assistant" for b in m["message"]["content"]]


def test_cli_plain_text(claude: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.set_script(Rule("say hi", ["Hi from the fake, in several deltas."]))
    out, _ = run_claude(claude, fake, tmp_path, "say hi")
    result = result_of(out)
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "Hi from the fake, in several deltas."
    [call] = fake.model_requests
    assert call.path == "/v1/messages?beta=true" and call.body["stream"] is True
    assert call.rule == "say hi" and call.last_user_text == "say hi"
    assert call.headers["x-api-key"] == REDACTED and call.headers["anthropic-version"]
    assert "Claude" in fake.system_text(0)
    # The CLI takes message id and model from our message_start.
    [msg] = [m["message"] for m in out if m["type"] == "assistant"]
    assert msg["id"].startswith("msg_fake") and msg["model"] == call.model


def test_cli_thinking_then_text(claude: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    fake.set_script(default=[[Thinking("Pondering the greeting."), Text("Hello after thought.")]])
    out, _ = run_claude(claude, fake, tmp_path, "think, then greet")
    assert assistant_blocks(out) == [
        {"type": "thinking", "thinking": "Pondering the greeting.", "signature": "fake-signature"},
        {"type": "text", "text": "Hello after thought."},
    ]
    assert result_of(out)["result"] == "Hello after thought."


def test_cli_runs_scripted_bash_tool(claude: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    command = "printf fake-ran > marker.txt && echo made-it"
    fake.set_script(
        Rule(
            "make the marker",
            [
                [Text("Running it."), ToolUse("Bash", {"command": command, "description": "m"})],
                "Marker made.",
            ],
        )
    )
    out, cwd = run_claude(
        claude, fake, tmp_path, "please make the marker", "--allowedTools", "Bash"
    )
    assert (cwd / "marker.txt").read_text() == "fake-ran"
    assert result_of(out)["result"] == "Marker made."
    first, second = fake.model_requests
    assert (first.step, second.step) == (0, 1)
    [tool_use] = [b for b in assistant_blocks(out) if b["type"] == "tool_use"]
    [tool_result] = second.tool_results
    assert tool_result["tool_use_id"] == tool_use["id"] and tool_use["id"].startswith("toolu_")
    assert "made-it" in json.dumps(tool_result["content"])
    assert tool_result.get("is_error") in (None, False)


@pytest.mark.parametrize(
    ("step", "status", "expected"),
    [
        (HttpError(401, "invalid x-api-key"), 401, ("API key",)),
        (HttpError(500, "fake internal error"), 500, ("fake internal error",)),
        # The wording of claude 2.1.197, then of 2.1.332.
        (
            Step([Text("partial")], sse_error=SseError(1)),
            None,
            ("Overloaded", "Server error mid-response"),
        ),
        (
            Step([Text("x")], drop_connection=True),
            None,
            ("Unable to connect to API", "Connection dropped (ECONNRESET)"),
        ),
    ],
    ids=["http401", "http500", "sse_error", "dropped"],
)
def test_cli_api_errors(
    claude: str,
    fake: FakeAnthropic,
    tmp_path: Path,
    step: Step | HttpError,
    status: int | None,
    expected: tuple[str, ...],
) -> None:
    fake.set_script(default=[step])
    out, _ = run_claude(claude, fake, tmp_path, "hello")
    result = result_of(out)
    assert result["is_error"] is True and result["api_error_status"] == status
    assert any(text in result["result"] for text in expected), result["result"]
    # CLAUDE_CODE_MAX_RETRIES=0: no retry. But claude 2.1.332 asks the model up to 3 times to
    # resume a response cut mid-stream (2.1.197 does not).
    _, *resumes = fake.model_requests
    assert len(resumes) <= 3
    for request in resumes:
        assert "cut off mid-stream" in json.dumps(request.body["messages"][-1])


def test_cli_dropped_stream_falls_back_to_non_streaming(
    claude: str, fake: FakeAnthropic, tmp_path: Path
) -> None:
    fake.set_script(default=Step([Text("recovered answer")], chunk_size=4, close_midstream=True))
    out, _ = run_claude(claude, fake, tmp_path, "hello")
    assert result_of(out)["result"] == "recovered answer"
    streamed, fallback = fake.model_requests
    assert streamed.body["stream"] is True and not fallback.body.get("stream")


def test_cli_sigint_during_stall(claude: str, fake: FakeAnthropic, tmp_path: Path) -> None:
    stall = Step([Text("Part one, then silence")], chunk_size=10, stall_after_first_delta_ms=60_000)
    fake.set_script(default=stall)
    env, cwd = offline_env(fake, tmp_path)
    argv = [claude, "-p", "hi", "--output-format", "stream-json", "--verbose"]
    argv.append("--include-partial-messages")
    out: list[dict[str, Any]] = []
    with subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.append(json.loads(line))
                if out[-1].get("event", {}).get("type") == "content_block_delta":
                    proc.send_signal(signal.SIGINT)  # the fake is now stalling
            assert proc.wait(timeout=10) == 0  # SIGINT in -p mode: graceful, exit 0
        finally:
            proc.kill()
    assert assistant_blocks(out) == [{"type": "text", "text": "Part one, "}]
    assert result_of(out)["subtype"] == "error_during_execution"
    started = time.monotonic()
    fake.close()  # the handler thread is still stalled; close must cut it short
    assert time.monotonic() - started < 2
