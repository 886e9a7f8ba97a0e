"""tests.fakes.openai_chat: the fake Chat Completions API, unit-tested over HTTP and proven against
the real `opencode` CLI (`opencode run --format json` and `opencode acp`). The CLI tests skip when
opencode is not installed, except under CI, where they fail."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai_chat import (
    API_KEY,
    MODEL,
    OPENCODE_VERSION,
    REDACTED,
    SMALL_MODEL,
    FakeOpenAIChat,
    HttpError,
    Reasoning,
    Rule,
    Step,
    StreamError,
    Text,
    ToolCall,
    bash_call,
    edit_call,
    opencode_env,
    write_call,
)
from tests.support.cli_env import cli_or_skip

TITLE_SYSTEM = "You are a title generator. You output ONLY a thread title. Nothing else."


@pytest.fixture
def fake() -> Iterator[FakeOpenAIChat]:
    with FakeOpenAIChat() as f:
        yield f
        assert f.errors == []


# --------------------------------------------------------------------------- HTTP helpers


def request(
    fake: FakeOpenAIChat,
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


def sse_data(raw: bytes) -> list[Any]:
    """Parse SSE frames strictly: each is exactly one `data: ...` line; JSON except [DONE]."""
    text = raw.decode()
    assert text.endswith("\n\n")
    frames = []
    for frame in text[:-2].split("\n\n"):
        assert frame.startswith("data: ") and "\n" not in frame
        payload = frame[6:]
        frames.append(payload if payload == "[DONE]" else json.loads(payload))
    return frames


def chat(messages: list[dict[str, Any]], *, stream: bool = True, usage: bool = True) -> Any:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "stream": stream}
    if stream and usage:
        body["stream_options"] = {"include_usage": True}
    return body


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str | list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": text}


def tool_round(call_id: str, output: str = "ok") -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def answer_text(fake: FakeOpenAIChat, messages: list[dict[str, Any]]) -> str:
    _, _, raw = request(fake, "/v1/chat/completions", chat(messages, stream=False))
    return str(json.loads(raw)["choices"][0]["message"]["content"])


# --------------------------------------------------------------------------- unit tests


def test_sse_framing(fake: FakeOpenAIChat) -> None:
    fake.set_script(
        default=Step(
            [
                Reasoning("think hard"),
                Text("hello world"),
                ToolCall("bash", {"command": "ls"}, id="call_1"),
                bash_call("pwd"),
            ],
            chunk_size=5,
        )
    )
    status, headers, raw = request(fake, "/v1/chat/completions", chat([user("hi")]))
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    frames = sse_data(raw)
    assert frames[-1] == "[DONE]"
    chunks: list[dict[str, Any]] = frames[:-1]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert {c["model"] for c in chunks} == {MODEL}
    *with_choice, usage_chunk = chunks
    deltas = [c["choices"][0]["delta"] for c in with_choice]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [d["reasoning_content"] for d in deltas if "reasoning_content" in d] == [
        "think",
        " hard",
    ]
    assert [d["content"] for d in deltas[1:] if "content" in d] == ["hello", " worl", "d"]
    calls = [tc for d in deltas if "tool_calls" in d for tc in d["tool_calls"]]
    # Per call: a head with id/type/name and empty arguments, then argument chunks by index.
    heads = [tc for tc in calls if "id" in tc]
    assert [(h["index"], h["type"], h["function"]) for h in heads] == [
        (0, "function", {"name": "bash", "arguments": ""}),
        (1, "function", {"name": "bash", "arguments": ""}),
    ]
    assert heads[0]["id"] == "call_1" and heads[1]["id"].startswith("call_")
    for index, expected in [(0, {"command": "ls"}), (1, {"command": "pwd"})]:
        args = "".join(tc["function"]["arguments"] for tc in calls if tc["index"] == index)
        assert json.loads(args) == expected
    # Only the last choice chunk finishes; the usage chunk has no choices.
    finishes = [c["choices"][0]["finish_reason"] for c in with_choice]
    assert finishes[:-1] == [None] * (len(finishes) - 1) and finishes[-1] == "tool_calls"
    assert deltas[-1] == {}
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0


def test_usage_chunk_only_when_asked(fake: FakeOpenAIChat) -> None:
    _, _, raw = request(fake, "/v1/chat/completions", chat([user("hi")], usage=False))
    frames = sse_data(raw)
    assert frames[-1] == "[DONE]"
    assert all("usage" not in f for f in frames[:-1])
    assert frames[-2]["choices"][0]["finish_reason"] == "stop"


def test_non_streaming(fake: FakeOpenAIChat) -> None:
    fake.set_script(
        default=Step(
            [Reasoning("why"), Text("a"), Text("b"), write_call("x.txt", "hi\n", id="call_w")],
            finish_reason="length",
        )
    )
    status, _, raw = request(fake, "/v1/chat/completions", chat([user("hi")], stream=False))
    assert status == 200
    body = json.loads(raw)
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length"
    assert choice["message"] == {
        "role": "assistant",
        "content": "ab",
        "reasoning_content": "why",
        "tool_calls": [
            {
                "id": "call_w",
                "type": "function",
                "function": {
                    "name": "write",
                    "arguments": '{"filePath": "x.txt", "content": "hi\\n"}',
                },
            }
        ],
    }
    assert body["usage"]["total_tokens"] > 0


def test_models_and_unknown_routes(fake: FakeOpenAIChat) -> None:
    status, _, raw = request(fake, "/v1/models", method="GET")
    assert status == 200
    assert [m["id"] for m in json.loads(raw)["data"]] == [MODEL, SMALL_MODEL]
    for method, path in [("GET", "/v1/chat/completions"), ("POST", "/v1/responses")]:
        status, _, raw = request(fake, path, {} if method == "POST" else None, method=method)
        assert status == 404, path
        assert json.loads(raw)["error"]["type"] == "invalid_request_error"
    status, _, _ = request(fake, "/v1/chat/completions", [1, 2])
    assert status == 400
    assert len(fake.requests) == 4 and fake.model_requests == []


def test_recording_redaction_and_accessors(fake: FakeOpenAIChat) -> None:
    messages = [
        system("base prompt"),
        system("more system"),
        user([{"type": "text", "text": "run it"}, {"type": "text", "text": "please"}]),
        *tool_round("call_9", "out"),
    ]
    secrets = {"Authorization": "Bearer sk-secret", "X-Session-Id": "ses_1"}
    request(fake, "/v1/chat/completions?x=1", chat(messages), headers=secrets)
    [rec] = fake.wait_for_requests(1, timeout=1)
    assert (rec.method, rec.path, rec.route) == (
        "POST",
        "/v1/chat/completions?x=1",
        "/v1/chat/completions",
    )
    assert rec.headers["authorization"] == REDACTED and rec.headers["x-session-id"] == "ses_1"
    assert "sk-secret" not in repr(fake.requests)
    assert rec.body == chat(messages) and rec.model == MODEL and rec.stream
    assert fake.messages(0) == messages
    assert fake.system_text(0) == "base prompt\nmore system"
    assert fake.user_texts(0) == ["run it\nplease"]
    assert fake.tool_results(0) == [messages[-1]]
    assert rec.tool_calls == [messages[-2]["tool_calls"][0]]
    assert rec.human_text == "run it\nplease" and (rec.rule, rec.step) == ("default", 1)
    assert rec.side_call is None and rec.tool_names == []
    with pytest.raises(TimeoutError):
        fake.wait_for_requests(2, timeout=0.05)


def test_rules_match_human_text_and_steps_count_assistant_messages(
    fake: FakeOpenAIChat,
) -> None:
    fake.set_script(
        Rule("List Files", ["zero", "one", "two"]),
        Rule("secret", ["never: system text and tool output are not human text"]),
        default="fallback",
    )
    human = user("please list files")
    reminder = user("<system-reminder>secret plan mode</system-reminder>")
    assert answer_text(fake, [system("list files, secret"), user("hello")]) == "fallback"
    assert answer_text(fake, [system("x"), human]) == "zero"
    assert answer_text(fake, [human, *tool_round("a", "secret")]) == "one"
    # Parallel calls are one assistant message: still one model call.
    two_calls = tool_round("b")[0] | {"tool_calls": tool_round("b")[0]["tool_calls"] * 2}
    assert answer_text(fake, [human, two_calls, tool_round("b")[1], tool_round("b")[1]]) == "one"
    assert answer_text(fake, [human, *tool_round("a"), *tool_round("b")]) == "two"
    assert answer_text(fake, [human, *tool_round("a"), *tool_round("b"), *tool_round("c")]) == (
        "two"  # the last step repeats
    )
    # A reminder-only user message is not human; a new human message restarts the count.
    assert answer_text(fake, [human, *tool_round("a"), reminder]) == "one"
    resumed = [human, *tool_round("a"), {"role": "assistant", "content": "one"}]
    assert answer_text(fake, [*resumed, user("list files again")]) == "zero"
    assert [(r.rule, r.step) for r in fake.requests] == [
        ("default", 0),
        ("List Files", 0),
        ("List Files", 1),
        ("List Files", 1),
        ("List Files", 2),
        ("List Files", 3),
        ("List Files", 1),
        ("List Files", 0),
    ]


def test_side_calls_do_not_consume_steps(fake: FakeOpenAIChat) -> None:
    fake.set_script(Rule("say hi", ["scripted"]))
    title = [
        system(TITLE_SYSTEM),
        user("Generate a title for this conversation:\n"),
        user("say hi"),
    ]
    assert answer_text(fake, title) == "Fake session title"
    summary = [system("Summarize what was done in this conversation. Rules: ..."), user("say hi")]
    assert answer_text(fake, summary) == "Fake summary of the conversation."
    assert answer_text(fake, [system("You are opencode"), user("say hi")]) == "scripted"
    assert [r.side_call for r in fake.side_requests] == ["title", "summary"]
    assert [(r.rule, r.step) for r in fake.model_requests] == [("say hi", 0)]
    assert len(fake.wait_for_requests(3, timeout=1, include_side_calls=True)) == 3
    # Side answers can be scripted too, e.g. to fail title generation.
    fake.set_script(side_calls={"title": HttpError(500, "no titles today")})
    status, _, _ = request(fake, "/v1/chat/completions", chat(title))
    assert status == 500


def test_http_errors(fake: FakeOpenAIChat) -> None:
    fake.set_script(
        Rule("auth", [HttpError(401, "Incorrect API key provided")]),
        Rule("boom", [HttpError(500, "upstream broke", headers={"retry-after-ms": "0"})]),
        default=HttpError(429, "slow down", headers={"retry-after": "2"}),
    )
    status, headers, raw = request(fake, "/v1/chat/completions", chat([user("auth")]))
    assert status == 401 and headers["x-request-id"].startswith("req_")
    assert json.loads(raw) == {
        "error": {
            "message": "Incorrect API key provided",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    status, headers, raw = request(fake, "/v1/chat/completions", chat([user("hi")]))
    assert (status, headers["retry-after"]) == (429, "2")
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    status, headers, raw = request(fake, "/v1/chat/completions", chat([user("boom")]))
    assert (status, headers["retry-after-ms"]) == (500, "0")
    assert json.loads(raw)["error"] == {
        "message": "upstream broke",
        "type": "server_error",
        "param": None,
        "code": None,
    }


def test_stream_error_and_missing_done(fake: FakeOpenAIChat) -> None:
    fake.set_script(
        Rule("fail", [Step([Text("kept"), Text("never")], stream_error=StreamError("boom", 1))]),
        default=Step([Text("all of it")], omit_done=True),
    )
    frames = sse_data(request(fake, "/v1/chat/completions", chat([user("fail")]))[2])
    contents = [f["choices"][0]["delta"].get("content") for f in frames[:-1]]
    assert contents == ["", "kept"]
    assert frames[-1] == {
        "error": {"message": "boom", "type": "server_error", "param": None, "code": None}
    }
    frames = sse_data(request(fake, "/v1/chat/completions", chat([user("hi")]))[2])
    assert "[DONE]" not in frames and frames[-1]["usage"]["total_tokens"] > 0


def test_close_midstream_truncates_the_chunked_body(fake: FakeOpenAIChat) -> None:
    fake.set_script(default=Step([Text("abcdefgh")], chunk_size=2, close_midstream=True))
    with pytest.raises(http.client.IncompleteRead) as info:
        request(fake, "/v1/chat/completions", chat([user("hi")]))
    partial = info.value.partial.decode()
    assert '"content": "ab"' in partial and '"content": "cd"' not in partial


def test_drop_connection(fake: FakeOpenAIChat) -> None:
    fake.set_script(default=Step(drop_connection=True))
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
        request(fake, "/v1/chat/completions", chat([user("hi")]))
    assert len(fake.model_requests) == 1


def test_delay_between_deltas(fake: FakeOpenAIChat) -> None:
    fake.set_script(default=Step([Text("abcd")], chunk_size=1, delay_ms=60))
    started = time.monotonic()
    request(fake, "/v1/chat/completions", chat([user("hi")]))
    assert time.monotonic() - started >= 0.18  # three pauses: none before the first delta


def test_stall_is_cut_short_by_close() -> None:
    fake = FakeOpenAIChat(
        default=Step([Text("abcd")], chunk_size=1, stall_after_first_delta_ms=60_000)
    )
    outcome: list[BaseException | bytes] = []

    def client() -> None:
        try:
            outcome.append(request(fake, "/v1/chat/completions", chat([user("hi")]))[2])
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
    assert b'"content": "a"' in outcome[0].partial and b'"content": "b"' not in outcome[0].partial


def test_max_lifetime_stops_the_server() -> None:
    fake = FakeOpenAIChat(max_lifetime=0.2).start()
    url = fake.url
    deadline = time.monotonic() + 5
    while not fake.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.closed
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/v1/chat/completions", data=b"{}", timeout=2)
    fake.close()  # idempotent


def test_tool_helpers() -> None:
    assert bash_call("ls") == ToolCall("bash", {"command": "ls"})
    assert bash_call("ls", "List", workdir="/w", timeout_ms=5, id="c").arguments == {
        "command": "ls",
        "description": "List",
        "workdir": "/w",
        "timeout": 5,
    }
    assert write_call("a.txt", "x").arguments == {"filePath": "a.txt", "content": "x"}
    assert edit_call("a.txt", "x", "y", replace_all=True).arguments == {
        "filePath": "a.txt",
        "oldString": "x",
        "newString": "y",
        "replaceAll": True,
    }
    assert ToolCall("t", '{"raw": 1}').arguments_json == '{"raw": 1}'
    with pytest.raises(ValueError):
        Rule("x", [])


def test_opencode_env(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    env = opencode_env(tmp_path, "http://127.0.0.1:9/", permission={"bash": "ask"}, cwd=work)
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == f"fake/{MODEL}" and config["small_model"] == f"fake/{SMALL_MODEL}"
    assert config["enabled_providers"] == ["fake"] and config["autoupdate"] is False
    provider = config["provider"]["fake"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:9/v1", "apiKey": API_KEY}
    assert set(provider["models"]) == {MODEL, SMALL_MODEL}
    assert config["permission"] == {"bash": "ask"}
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert env["PWD"] == str(work)
    root = tmp_path / "opencode"
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        assert Path(env[name]).is_dir() and Path(env[name]).parent == root
    plugin_dir = root / "config/opencode"
    assert (plugin_dir / "node_modules").is_dir()
    deps = json.loads((plugin_dir / "package.json").read_text())["dependencies"]
    lock = json.loads((plugin_dir / "package-lock.json").read_text())
    assert deps == lock["packages"][""]["dependencies"] == {"@opencode-ai/plugin": OPENCODE_VERSION}
    assert list(work.iterdir()) == []  # nothing written into the project dir


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture(scope="module")
def opencode() -> str:
    return str(cli_or_skip("opencode"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def run(
    opencode: str, env: dict[str, str], work: Path, prompt: str, *args: str
) -> tuple[list[dict[str, Any]], int, str]:
    """`opencode run --format json` like a service runs it: the prompt on stdin, then EOF (an
    open stdin hangs it), PWD = cwd (it prefers PWD). Returns (events, exit code, stderr)."""
    proc = subprocess.run(
        [opencode, "run", "--format", "json", *args],
        input=prompt,
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return events, proc.returncode, proc.stderr


def parts(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["part"] for e in events if e["type"] == kind]


def test_cli_plain_text(opencode: str, fake: FakeOpenAIChat, tmp_path: Path, work: Path) -> None:
    fake.set_script(Rule("say hi", [Step([Text("Hi from the fake, in deltas.")], chunk_size=4)]))
    env = opencode_env(tmp_path, fake.url, cwd=work)
    events, code, stderr = run(opencode, env, work, "Please say hi")
    assert code == 0, stderr
    assert [e["type"] for e in events] == ["step_start", "text", "step_finish"]
    assert parts(events, "text")[0]["text"] == "Hi from the fake, in deltas."  # one whole part
    finish = parts(events, "step_finish")[0]
    assert finish["reason"] == "stop" and finish["tokens"]["input"] > 0  # from the usage chunk
    assert len({e["sessionID"] for e in events}) == 1
    [call] = fake.model_requests
    assert call.rule == "say hi" and call.step == 0 and call.model == MODEL
    assert call.stream and call.body["stream_options"] == {"include_usage": True}
    assert call.headers["authorization"] == REDACTED
    assert call.headers["user-agent"].startswith("opencode/")
    assert call.headers["x-session-id"] == events[0]["sessionID"]
    assert fake.user_texts(0) == ["Please say hi"]  # verbatim from stdin, no quoting
    assert fake.system_text(0).startswith("You are opencode")
    assert {"bash", "edit", "read", "write"} <= set(call.tool_names)
    # The title side call: small model, no tools, answered outside the script.
    [title] = fake.side_requests
    assert title.side_call == "title" and title.model == SMALL_MODEL and title.tool_names == []
    assert title.user_texts == ["Generate a title for this conversation:\n", "Please say hi"]
    assert list(work.iterdir()) == []  # OpenCode wrote nothing into the project dir


def test_cli_reasoning(opencode: str, fake: FakeOpenAIChat, tmp_path: Path, work: Path) -> None:
    fake.set_script(default=[[Reasoning("Pondering."), Text("Answer.")]])
    env = opencode_env(tmp_path, fake.url, cwd=work)
    events, code, stderr = run(opencode, env, work, "think", "--thinking")
    assert code == 0, stderr
    assert [e["type"] for e in events] == ["step_start", "reasoning", "text", "step_finish"]
    assert parts(events, "reasoning")[0]["text"] == "Pondering."
    assert parts(events, "step_finish")[0]["tokens"]["reasoning"] > 0


def test_cli_bash_then_resume(
    opencode: str, fake: FakeOpenAIChat, tmp_path: Path, work: Path
) -> None:
    command = "printf fake-ran > marker.txt && echo made-it"
    fake.set_script(
        Rule("make the marker", [bash_call(command, "Make a marker", id="call_m"), "Made."]),
        Rule("what did you do", ["I ran a command."]),
    )
    env = opencode_env(tmp_path, fake.url, cwd=work)  # default permissions allow bash
    events, code, stderr = run(opencode, env, work, "please make the marker")
    assert code == 0, stderr
    assert (work / "marker.txt").read_text() == "fake-ran"
    assert [e["type"] for e in events] == [
        "step_start",
        "tool_use",
        "step_finish",
        "step_start",
        "text",
        "step_finish",
    ]
    [tool] = parts(events, "tool_use")
    assert (tool["tool"], tool["callID"]) == ("bash", "call_m")
    state = tool["state"]
    assert state["status"] == "completed" and state["output"] == "made-it\n"
    assert state["input"] == {"command": command, "description": "Make a marker"}
    assert state["metadata"]["exit"] == 0
    assert [p["reason"] for p in parts(events, "step_finish")] == ["tool-calls", "stop"]
    assert parts(events, "text")[0]["text"] == "Made."
    assert [(r.rule, r.step) for r in fake.model_requests] == [
        ("make the marker", 0),
        ("make the marker", 1),
    ]
    assert fake.tool_results(1) == [
        {"role": "tool", "tool_call_id": "call_m", "content": "made-it\n"}
    ]

    # --session continues it: the whole history goes back to the model, no new title call.
    session = events[0]["sessionID"]
    events, code, stderr = run(opencode, env, work, "what did you do?", "--session", session)
    assert code == 0, stderr
    assert {e["sessionID"] for e in events} == {session}
    assert parts(events, "text")[0]["text"] == "I ran a command."
    history = [m for m in fake.messages(-1) if m["role"] != "system"]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert history[1]["tool_calls"][0]["id"] == "call_m"
    assert history[3]["content"] == "Made."
    assert fake.model_requests[-1].rule == "what did you do"
    assert len(fake.side_requests) == 1


@pytest.mark.parametrize(
    ("step", "name", "status", "requests"),
    [
        (HttpError(401, "bad fake key"), "APIError", 401, 1),
        # Retryable: OpenCode tries 6 times; retry-after-ms makes that immediate, not ~70 s.
        (HttpError(500, "fake upstream", headers={"retry-after-ms": "0"}), "APIError", 500, 6),
        # A mid-stream error object that matches none of OpenCode's retry patterns.
        (
            Step(
                [Text("partial")], stream_error=StreamError("blocked", 1, "invalid_request_error")
            ),
            "UnknownError",
            None,
            1,
        ),
    ],
    ids=["http401", "http500", "stream_error"],
)
def test_cli_errors(
    opencode: str,
    fake: FakeOpenAIChat,
    tmp_path: Path,
    work: Path,
    step: Step | HttpError,
    name: str,
    status: int | None,
    requests: int,
) -> None:
    fake.set_script(default=[step])
    env = opencode_env(tmp_path, fake.url, cwd=work)
    events, code, stderr = run(opencode, env, work, "hello")
    assert code == 1, stderr
    error = events[-1]
    assert error["type"] == "error" and error["error"]["name"] == name, events
    data = error["error"]["data"]
    if status is None:
        assert json.loads(data["message"])["message"] == "blocked"
    else:
        assert data["statusCode"] == status and data["isRetryable"] is (status >= 500)
        assert data["message"] == json.loads(data["responseBody"])["error"]["message"]
    assert not parts(events, "text")  # partial text is not printed
    assert len(fake.model_requests) == requests


class Acp:
    """`opencode acp` over stdio (newline-delimited JSON-RPC). A thread reads stdout; agent
    requests are answered by `until` (permission: `permission_option`; fs/*: real file I/O)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.inbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.permission_option = "once"
        self.next_id = 1
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        self.proc.stdin.flush()

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its result (answering agent requests meanwhile)."""
        request_id, self.next_id = self.next_id, self.next_id + 1
        self.send({"id": request_id, "method": method, "params": params})
        reply = self.until(request_id)
        assert "error" not in reply, reply
        return dict(reply["result"])

    def until(self, request_id: int) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            message = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            self.seen.append(message)
            method = message.get("method")
            if method is not None and "id" in message:
                self.send({"id": message["id"], **self._answer(method, message["params"])})
            elif message.get("id") == request_id:
                return message

    def _answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "session/request_permission":
            outcome = {"outcome": "selected", "optionId": self.permission_option}
            return {"result": {"outcome": outcome}}
        if method == "fs/write_text_file":
            Path(params["path"]).write_text(params["content"])
            return {"result": None}
        if method == "fs/read_text_file":
            return {"result": {"content": Path(params["path"]).read_text()}}
        return {"error": {"code": -32601, "message": f"test client: no {method}"}}

    def updates(self, kind: str) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.seen
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind
        ]

    def requests(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.seen if m.get("method") == method and "id" in m]

    def close(self) -> int:
        """Close stdin (the agent exits 0 on EOF); kill it if it does not; return its code."""
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            return self.proc.wait(10)
        finally:
            self.proc.kill()
            self.proc.wait()
            self.reader.join(5)
            assert self.proc.stdout is not None
            self.proc.stdout.close()


def test_acp_prompt_permission_and_edit(
    opencode: str, fake: FakeOpenAIChat, tmp_path: Path, work: Path
) -> None:
    command = "printf acp > acp_marker.txt && echo acp-ok"
    fake.set_script(
        Rule("say hi", [Step([Text("Hi there from the fake.")], chunk_size=6)]),
        Rule("run bash", [bash_call(command, id="call_b"), "Ran it."]),
        Rule("write it", [write_call("new.txt", "fresh\n", id="call_w"), "Wrote it."]),
        side_calls={"title": "ACP fake title"},
    )
    env = opencode_env(tmp_path, fake.url, permission={"bash": "ask", "edit": "ask"})
    acp = Acp([opencode, "acp"], env, work)
    try:
        fs = {"readTextFile": True, "writeTextFile": True}
        init = acp.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"fs": fs}})
        assert init["protocolVersion"] == 1 and init["agentInfo"]["name"] == "OpenCode"
        assert init["agentCapabilities"]["loadSession"] is True
        assert [m["id"] for m in init["authMethods"]] == ["opencode-login"]
        new = acp.call("session/new", {"cwd": str(work), "mcpServers": []})
        session = new["sessionId"]
        assert session.startswith("ses_")
        options = {o["id"]: o for o in new["configOptions"]}
        assert options["model"]["currentValue"] == f"fake/{MODEL}"
        assert [o["value"] for o in options["model"]["options"]] == [
            f"fake/{MODEL}",
            f"fake/{SMALL_MODEL}",
        ]  # enabled_providers hides the bundled Zen models
        assert options["mode"]["currentValue"] == "build"

        def prompt(text: str) -> dict[str, Any]:
            acp.seen.clear()
            params = {"sessionId": session, "prompt": [{"type": "text", "text": text}]}
            return acp.call("session/prompt", params)

        # 1. Text: one agent_message_chunk per streamed delta.
        result = prompt("say hi")
        assert result["stopReason"] == "end_turn" and result["usage"]["inputTokens"] > 0
        chunks = acp.updates("agent_message_chunk")
        assert [c["content"] for c in chunks] == [
            {"type": "text", "text": t} for t in ["Hi the", "re fro", "m the ", "fake."]
        ]
        assert len({c["messageId"] for c in chunks}) == 1

        # 2. bash under "ask": tool_call, in_progress, request_permission, then it runs.
        result = prompt("run bash")
        assert result["stopReason"] == "end_turn"
        assert (work / "acp_marker.txt").read_text() == "acp"
        [ask] = acp.requests("session/request_permission")
        assert ask["params"]["sessionId"] == session
        assert ask["params"]["toolCall"] == {
            "toolCallId": "call_b",
            "title": command,
            "kind": "execute",
            "status": "pending",
            "locations": [],
            "rawInput": {"command": command},
        }
        assert [(o["optionId"], o["kind"]) for o in ask["params"]["options"]] == [
            ("once", "allow_once"),
            ("always", "allow_always"),
            ("reject", "reject_once"),
        ]
        [first] = acp.updates("tool_call")
        assert first == {
            "sessionUpdate": "tool_call",
            "toolCallId": "call_b",
            "title": "bash",
            "kind": "execute",
            "status": "pending",
            "locations": [{"path": str(work)}],
            "rawInput": {"cwd": str(work)},
        }
        updates = acp.updates("tool_call_update")
        assert updates[0]["status"] == "in_progress"
        assert updates[0]["rawInput"] == {"command": command, "cwd": str(work)}
        done = updates[-1]
        assert done["status"] == "completed"
        assert done["content"] == [
            {"type": "content", "content": {"type": "text", "text": "acp-ok\n"}}
        ]
        assert (
            done["rawOutput"]["output"] == "acp-ok\n" and done["rawOutput"]["metadata"]["exit"] == 0
        )
        assert fake.tool_results(-1) == [
            {"role": "tool", "tool_call_id": "call_b", "content": "acp-ok\n"}
        ]

        # 3. write under edit "ask": the permission carries a diff; after "once" OpenCode
        # also sends the new content to the client with fs/write_text_file.
        result = prompt("write it")
        assert result["stopReason"] == "end_turn"
        target = str(work / "new.txt")
        [ask] = acp.requests("session/request_permission")
        tool_call = ask["params"]["toolCall"]
        assert tool_call["kind"] == "edit" and tool_call["rawInput"]["filepath"] == target
        assert tool_call["content"] == [
            {"type": "diff", "path": target, "oldText": "", "newText": "fresh\n"}
        ]
        [write] = acp.requests("fs/write_text_file")
        assert write["params"] == {"sessionId": session, "path": target, "content": "fresh\n"}
        assert acp.requests("fs/read_text_file") == []
        assert (work / "new.txt").read_text() == "fresh\n"

        # The title side call's answer became the session title.
        deadline = time.monotonic() + 5
        while True:
            listed = acp.call("session/list", {"cwd": str(work)})["sessions"]
            if listed[0]["title"] == "ACP fake title" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(s["sessionId"], s["title"]) for s in listed] == [(session, "ACP fake title")]
        assert acp.close() == 0
    finally:
        acp.close()
    assert [(r.rule, r.step) for r in fake.model_requests] == [
        ("say hi", 0),
        ("run bash", 0),
        ("run bash", 1),
        ("write it", 0),
        ("write it", 1),
    ]
    assert [r.side_call for r in fake.side_requests] == ["title"]
