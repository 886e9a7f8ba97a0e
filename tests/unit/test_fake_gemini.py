"""tests.fakes.gemini: the fake Gemini API, unit-tested over HTTP and proven against the real
`gemini` CLI (headless ``-p -o stream-json`` and ``--acp``). The CLI tests skip when gemini is
not installed, except under CI, where they fail.

Observed with Gemini CLI 0.61.0 (see the assertions for exact shapes)."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gemini import (
    API_KEY,
    MODEL,
    REDACTED,
    FakeGemini,
    FunctionCall,
    HttpError,
    Replace,
    Rule,
    ShellCommand,
    Step,
    Text,
    Thought,
    WriteFile,
    gemini_env,
    gemini_home,
    side_answer,
)
from tests.support.cli_env import cli_or_skip

STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini() as f:
        yield f
        assert f.errors == []


# --------------------------------------------------------------------------- HTTP helpers


def request(
    fake: FakeGemini,
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


def sse_chunks(raw: bytes) -> list[dict[str, Any]]:
    """Parse SSE strictly: every event is exactly ``data: {json}\\r\\n\\r\\n``."""
    text = raw.decode()
    assert text.endswith("\r\n\r\n")
    frames = text[:-4].split("\r\n\r\n")
    assert all(f.startswith("data: ") and "\n" not in f for f in frames)
    return [json.loads(f[6:]) for f in frames]


def parts_of(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]


def user(*texts: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": t} for t in texts]}


def model_call(name: str = "run_shell_command") -> dict[str, Any]:
    return {"role": "model", "parts": [{"functionCall": {"name": name, "args": {}}}]}


def tool_response(name: str = "run_shell_command") -> dict[str, Any]:
    part = {"functionResponse": {"id": "x", "name": name, "response": {"output": "ok"}}}
    return {"role": "user", "parts": [part]}


def body(contents: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "contents": contents,
        "systemInstruction": {"role": "user", "parts": [{"text": "You are the CLI."}]},
        "tools": [{"functionDeclarations": [{"name": "run_shell_command"}, {"name": "glob"}]}],
        "generationConfig": {"temperature": 1},
    }


CONTEXT = "<session_context>\nThis is the Gemini CLI. We are setting up the context...\n"


# --------------------------------------------------------------------------- unit tests


def test_sse_framing(fake: FakeGemini) -> None:
    fake.set_script(
        default=Step(
            [
                Thought("**Plan**\n\nthink, then act"),
                Text("hello world, chunked"),
                FunctionCall("run_shell_command", {"command": "ls"}, id="call_1"),
            ],
            chunk_size=5,
        )
    )
    status, headers, raw = request(fake, STREAM, body([user("hi")]))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    chunks = sse_chunks(raw)
    assert parts_of(chunks) == [
        {"text": "**Plan**\n\nthink, then act", "thought": True},  # one part: keeps the subject
        {"text": "hello"},
        {"text": " worl"},
        {"text": "d, ch"},
        {"text": "unked"},
        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}, "id": "call_1"}},
    ]
    assert len(chunks) == 6  # one part per event
    assert {c["responseId"] for c in chunks} == {chunks[0]["responseId"]}
    assert {c["modelVersion"] for c in chunks} == {MODEL}
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)
    # Only the last event finishes and carries usage.
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None] * 5 + ["STOP"]
    assert [("usageMetadata" in c) for c in chunks] == [False] * 5 + [True]
    usage = chunks[-1]["usageMetadata"]
    assert usage["promptTokenCount"] > 0 and usage["candidatesTokenCount"] > 0
    assert usage["thoughtsTokenCount"] > 0
    assert usage["totalTokenCount"] == (
        usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    )


def test_step_overrides_and_empty_answer(fake: FakeGemini) -> None:
    fake.set_script(
        Rule("tokens", [Step(["x"], prompt_tokens=7, output_tokens=3, finish_reason="MAX_TOKENS")]),
        default=Step([]),
    )
    [chunk] = sse_chunks(request(fake, STREAM, body([user("tokens")]))[2])
    assert chunk["candidates"][0]["finishReason"] == "MAX_TOKENS"
    assert chunk["usageMetadata"]["totalTokenCount"] == 10
    [chunk] = sse_chunks(request(fake, STREAM, body([user("empty")]))[2])
    assert chunk["candidates"][0]["content"]["parts"] == []
    assert chunk["candidates"][0]["finishReason"] == "STOP"


def test_side_calls_get_fixed_answers_and_skip_the_script(fake: FakeGemini) -> None:
    fake.set_script(default=HttpError(500))  # would fail any model call
    router = {
        "contents": [user("say hi")],
        "generationConfig": {
            "responseMimeType": "application/json",
            # The CLI's router schema: upper-case types, no bounds, yet it wants a score >= 1.
            "responseSchema": {
                "type": "OBJECT",
                "properties": {
                    "complexity_reasoning": {"type": "STRING"},
                    "complexity_score": {"type": "INTEGER"},
                },
            },
        },
    }
    status, _, raw = request(fake, "/v1beta/models/gemini-3.5-flash-lite:generateContent", router)
    assert status == 200
    answer = json.loads(raw)
    assert answer["candidates"][0]["finishReason"] == "STOP"
    assert json.loads(answer["candidates"][0]["content"]["parts"][0]["text"]) == {
        "complexity_reasoning": "fake complexity_reasoning",
        "complexity_score": 1,
    }
    assert answer["usageMetadata"]["totalTokenCount"] > 0
    assert answer["modelVersion"] == "gemini-3.5-flash-lite"
    # Next-speaker and loop checks, and plain-text summaries.
    schema = {
        "type": "object",
        "properties": {
            "next_speaker": {"type": "string", "enum": ["model", "user"]},
            "unproductive_state_confidence": {"type": "number"},
            "flags": {"type": "array"},
            "ok": {"type": "boolean"},
            "level": {"type": "integer", "minimum": 3},
        },
    }
    config = {"responseMimeType": "application/json", "responseJsonSchema": schema}
    assert json.loads(side_answer({"generationConfig": config})) == {
        "next_speaker": "user",
        "unproductive_state_confidence": 0,
        "flags": [],
        "ok": False,
        "level": 3,
    }
    assert side_answer({"contents": [user("Summarize the user's primary intent")]}) == (
        "Fake summary."
    )
    assert [r.kind for r in fake.requests] == ["side"]
    assert fake.side_requests[0].model == "gemini-3.5-flash-lite"
    assert fake.side_requests[0].rpc == "generateContent"
    assert fake.model_requests == []


def test_other_routes(fake: FakeGemini) -> None:
    status, _, raw = request(fake, f"/v1beta/models/{MODEL}:countTokens", body([user("hi")]))
    assert status == 200 and json.loads(raw)["totalTokens"] > 0
    status, _, raw = request(fake, "/v1beta/models", method="GET")
    assert status == 200 and json.loads(raw)["models"][0]["name"] == f"models/{MODEL}"
    status, _, raw = request(fake, f"/v1beta/models/{MODEL}", method="GET")
    assert status == 200 and json.loads(raw)["inputTokenLimit"] > 0
    for method, path in [
        ("POST", f"/v1beta/models/{MODEL}:embedContent"),
        ("GET", STREAM),
        ("POST", "/v1/chat/completions"),
    ]:
        status, _, raw = request(fake, path, {} if method == "POST" else None, method=method)
        assert status == 404, path
        error = json.loads(raw)["error"]
        assert (error["code"], error["status"]) == (404, "NOT_FOUND")
        assert path.split("?")[0] in error["message"]
    status, _, raw = request(fake, STREAM, None)
    assert status == 400 and json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"
    kinds = [r.kind for r in fake.requests]
    assert kinds == ["count_tokens", "models", "models", "other", "other", "other", "other"]
    assert fake.model_requests == []


def test_recording_redaction_and_accessors(fake: FakeGemini) -> None:
    contents = [
        user(CONTEXT, "run it"),
        model_call(),
        tool_response(),
        {"role": "model", "parts": [{"text": "thinking", "thought": True}, {"text": "done"}]},
    ]
    secrets = {"x-goog-api-key": "sk-secret", "User-Agent": "GeminiCLI/0.61.0/m (linux)"}
    request(
        fake,
        f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key=k2",
        body(contents),
        headers=secrets,
    )
    [rec] = fake.wait_for_requests(1, timeout=1)
    assert rec.path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={REDACTED}"
    assert rec.route == f"/v1beta/models/{MODEL}:streamGenerateContent"
    assert rec.headers["x-goog-api-key"] == REDACTED
    assert rec.headers["user-agent"].startswith("GeminiCLI/")
    assert "sk-secret" not in repr(fake.requests) and "k2" not in repr(fake.requests)
    assert (rec.kind, rec.model, rec.rpc) == ("model", MODEL, "streamGenerateContent")
    assert rec.generation_config == {"temperature": 1}
    assert fake.contents(0) == contents
    assert fake.system_text(0) == "You are the CLI."
    assert fake.user_texts(0) == [CONTEXT, "run it"]
    assert fake.function_responses(0) == [contents[2]["parts"][0]["functionResponse"]]
    assert rec.function_calls == [{"name": "run_shell_command", "args": {}}]
    assert fake.tool_names(0) == ["run_shell_command", "glob"]
    assert rec.human_text == "run it" and (rec.rule, rec.step) == ("default", 1)
    with pytest.raises(TimeoutError):
        fake.wait_for_requests(2, timeout=0.05)
    assert len(fake.wait_for_requests(1, timeout=0.05, kind=None)) == 1


def test_rules_match_human_text_and_steps_follow_tool_responses(fake: FakeGemini) -> None:
    fake.set_script(
        Rule("List Files", ["zero", "one", "two"]),
        Rule("session_context", ["never: the CLI's context is not human text"]),
        default="fallback",
    )

    def answer(contents: list[dict[str, Any]]) -> str:
        raw = request(fake, STREAM, body(contents))[2]
        return "".join(p["text"] for p in parts_of(sse_chunks(raw)))

    human = user(CONTEXT, "please list files")
    hook = user("<hook_context>list files</hook_context>")
    assert answer([user(CONTEXT, "hello")]) == "fallback"
    assert answer([human]) == "zero"
    assert answer([human, model_call(), tool_response()]) == "one"
    # Parallel calls come back as one content with several responses: one model call.
    parallel = {"role": "user", "parts": tool_response()["parts"] * 2}
    assert answer([human, model_call(), parallel]) == "one"
    two_rounds = [human, model_call(), tool_response(), model_call(), tool_response()]
    assert answer(two_rounds) == "two"
    assert answer([*two_rounds, model_call(), tool_response()]) == "two"  # the last repeats
    # The CLI's own user contents do not restart the count ...
    assert answer([*two_rounds[:3], user("Please continue."), hook]) == "one"
    # ... a new human message does, even one that follows a tool response.
    assert (
        answer(
            [
                *two_rounds[:3],
                {"role": "model", "parts": [{"text": "ok"}]},
                user("list files again"),
            ]
        )
        == "zero"
    )
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


def test_http_errors(fake: FakeGemini) -> None:
    fake.set_script(
        Rule("auth", [HttpError(401)]),
        Rule("denied", [HttpError(403, "no access", details=[{"reason": "X"}])]),
        Rule("server", [HttpError(500, "fake internal error")]),
        default=HttpError(429, headers={"retry-after": "2"}),
    )

    def error(text: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        status, headers, raw = request(fake, STREAM, body([user(text)]))
        return status, headers, json.loads(raw)

    assert error("auth")[::2] == (
        401,
        {
            "error": {
                "code": 401,
                "message": "API key not valid. Please pass a valid API key.",
                "status": "UNAUTHENTICATED",
            }
        },
    )
    assert error("denied")[2]["error"] == {
        "code": 403,
        "message": "no access",
        "status": "PERMISSION_DENIED",
        "details": [{"reason": "X"}],
    }
    assert error("server")[2]["error"]["status"] == "INTERNAL"
    status, headers, payload = error("hi")
    assert (status, headers["retry-after"]) == (429, "2")
    assert payload["error"]["status"] == "RESOURCE_EXHAUSTED"


def test_stream_cut_short(fake: FakeGemini) -> None:
    fake.set_script(
        Rule("drop", [Step([Text("abcdefgh")], chunk_size=2, close_midstream=True)]),
        Rule("nofinish", [Step([Text("abcd")], finish_reason=None)]),
        default=Step(drop_connection=True),
    )
    with pytest.raises(http.client.IncompleteRead) as info:
        request(fake, STREAM, body([user("drop")]))
    partial = info.value.partial.decode()
    assert '"text": "ab"' in partial and '"text": "cd"' not in partial
    [chunk] = sse_chunks(request(fake, STREAM, body([user("nofinish")]))[2])
    assert "finishReason" not in chunk["candidates"][0] and "usageMetadata" in chunk
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        request(fake, STREAM, body([user("anything")]))


def test_delay_between_chunks(fake: FakeGemini) -> None:
    fake.set_script(default=Step([Text("abcd")], chunk_size=1, delay_ms=60))
    started = time.monotonic()
    request(fake, STREAM, body([user("hi")]))
    assert time.monotonic() - started >= 0.18  # three pauses: none before the first chunk


def stalled_client(fake: FakeGemini, outcome: list[BaseException | bytes]) -> threading.Thread:
    def client() -> None:
        try:
            outcome.append(request(fake, STREAM, body([user("hi")]))[2])
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=client)
    thread.start()
    fake.wait_for_requests(1, timeout=5)
    time.sleep(0.2)
    assert thread.is_alive()  # stalled
    return thread


def test_stall_is_cut_short_by_close() -> None:
    fake = FakeGemini(default=Step([Text("abcd")], chunk_size=1, stall_after_first_chunk_ms=60_000))
    outcome: list[BaseException | bytes] = []
    with fake:
        thread = stalled_client(fake, outcome)
        started = time.monotonic()
    assert time.monotonic() - started < 2
    thread.join(5)
    assert isinstance(outcome[0], http.client.IncompleteRead)
    assert b'"text": "a"' in outcome[0].partial and b'"text": "b"' not in outcome[0].partial


def test_stall_ends_when_the_client_hangs_up(fake: FakeGemini) -> None:
    fake.set_script(default=Step([Text("abcd")], chunk_size=1, stall_after_first_chunk_ms=60_000))
    data = json.dumps(body([user("hi")])).encode()
    with socket.create_connection(("127.0.0.1", fake.port), timeout=5) as sock:
        head = f"POST {STREAM} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(data)}\r\n\r\n"
        sock.sendall(head.encode() + data)
        received = b""
        while b'"text": "a"' not in received:  # headers and the first event may come apart
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    deadline = time.monotonic() + 3
    while fake._conns and time.monotonic() < deadline:  # the handler notices the EOF
        time.sleep(0.05)
    assert not fake._conns


def test_max_lifetime_stops_the_server() -> None:
    fake = FakeGemini(max_lifetime=0.2).start()
    url = fake.url
    deadline = time.monotonic() + 5
    while not fake.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.closed
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + STREAM, data=b"{}", timeout=2)
    fake.close()  # idempotent


def test_tool_helpers() -> None:
    assert ShellCommand("ls").call() == FunctionCall("run_shell_command", {"command": "ls"})
    shell = ShellCommand("make", description="build", dir_path="sub", is_background=True, id="c")
    assert shell.call() == FunctionCall(
        "run_shell_command",
        {"command": "make", "description": "build", "dir_path": "sub", "is_background": True},
        "c",
    )
    assert WriteFile("a.txt", "x").call() == FunctionCall(
        "write_file", {"file_path": "a.txt", "content": "x"}
    )
    assert Replace("a.txt", "x", "y").call().args == {
        "file_path": "a.txt",
        "instruction": "Apply the scripted edit.",
        "old_string": "x",
        "new_string": "y",
    }
    with pytest.raises(ValueError):
        Rule("x", [])
    with pytest.raises(ValueError):
        Step(chunk_size=0)


def test_gemini_home_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    home = gemini_home(Path("rel"), "http://127.0.0.1:9/", max_attempts=3)
    assert home == tmp_path / "rel" / "home"  # absolute: a relative HOME breaks the CLI
    settings = json.loads((home / ".gemini/settings.json").read_text())
    assert settings == {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "maxAttempts": 3,
        },
        "ide": {"enabled": False},
        "tools": {"shell": {"enableInteractiveShell": False}},
    }
    env = gemini_env(home)
    assert env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9"  # read back from .gemini/.env
    assert env["GEMINI_API_KEY"] == API_KEY and env["HOME"] == str(home)
    assert env["GEMINI_CLI_TRUST_WORKSPACE"] == "true" and env["GEMINI_CLI_NO_RELAUNCH"] == "1"
    assert Path(env["TMPDIR"]).is_dir()
    other = gemini_env(home, "http://127.0.0.1:10", no_relaunch=False, tmpdir=tmp_path / "t")
    assert other["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:10"
    assert "GEMINI_CLI_NO_RELAUNCH" not in other and other["TMPDIR"] == str(tmp_path / "t")
    with pytest.raises(ValueError):
        gemini_home(tmp_path, "http://127.0.0.1:9", max_attempts=0)


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture(scope="module")
def gemini() -> str:
    return str(cli_or_skip("gemini"))


@dataclass
class Run:
    events: list[dict[str, Any]]
    code: int
    stderr: str
    cwd: Path

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def text(self) -> str:
        return "".join(m["content"] for m in self.of("message") if m["role"] == "assistant")


def run_headless(
    gemini: str,
    fake: FakeGemini,
    tmp_path: Path,
    prompt: str,
    *args: str,
    model: str | None = MODEL,
    env: dict[str, str] | None = None,
) -> Run:
    """``gemini -p "" -o stream-json`` with `prompt` on stdin in a fresh cwd. Piped stdin is
    prepended to the (empty) -p text, so the prompt never meets argv parsing (no "-" or
    length trouble). `-m` skips the `auto` router's side call."""
    if env is None:
        env = gemini_env(gemini_home(tmp_path, fake.url))
    cwd = tmp_path / "work"
    cwd.mkdir()
    argv = [gemini, "-p", "", "-o", "stream-json", *(["-m", model] if model else []), *args]
    proc = subprocess.run(
        argv, input=prompt, env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert events[0]["type"] == "init", proc.stderr
    assert events[1] == {
        "type": "message",
        "timestamp": events[1]["timestamp"],
        "role": "user",
        "content": prompt,
    }
    assert fake.errors == []
    return Run(events, proc.returncode, proc.stderr, cwd)


def test_cli_plain_text_via_router(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    # Model "auto" and the relaunch on: the default path, side call included.
    fake.set_script(Rule("say hi", ["Hi from the fake, in several chunks."]))
    env = gemini_env(gemini_home(tmp_path, fake.url), no_relaunch=False)
    run = run_headless(gemini, fake, tmp_path, "please say hi", model=None, env=env)
    assert run.code == 0
    assert run.of("init")[0]["model"] == "auto"
    deltas = [m for m in run.of("message") if m["role"] == "assistant"]
    assert len(deltas) == 3 and all(m["delta"] is True for m in deltas)
    assert run.text == "Hi from the fake, in several chunks."
    result = run.events[-1]
    assert result["type"] == "result" and result["status"] == "success"
    assert result["stats"]["input_tokens"] > 0 and result["stats"]["tool_calls"] == 0
    # The router: one JSON generateContent to the lite model, answered without the script;
    # complexity 1 sends the turn to the flash model.
    [side] = fake.side_requests
    assert side.model == "gemini-3.5-flash-lite" and side.rpc == "generateContent"
    assert side.generation_config["responseMimeType"] == "application/json"
    [call] = fake.model_requests
    assert call.model == "gemini-3.8-flash" and call.rpc == "streamGenerateContent"
    assert call.path.endswith("?alt=sse") and (call.rule, call.step) == ("say hi", 0)
    assert call.headers["x-goog-api-key"] == REDACTED
    assert call.headers["user-agent"].startswith("GeminiCLI")
    # One user content: the CLI's context part, then the prompt.
    assert [c["role"] for c in fake.contents(0)] == ["user"]
    context, prompt = fake.user_texts(0)
    assert context.startswith("<session_context>") and prompt == "please say hi"
    assert call.human_text == "please say hi"
    assert "Gemini CLI" in fake.system_text(0)
    assert "run_shell_command" not in fake.tool_names(0)  # default approval mode


def test_cli_thoughts_are_not_in_stream_json(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    fake.set_script(default=[[Thought("**Pondering**\n\nHmm."), Text("Answer.")]])
    run = run_headless(gemini, fake, tmp_path, "think first")
    assert run.code == 0 and run.text == "Answer."
    assert "Pondering" not in json.dumps(run.events)
    assert fake.model_requests[0].generation_config["thinkingConfig"]["includeThoughts"] is True


def test_cli_shell_command(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    command = "printf fake-ran > marker.txt && echo made-it"
    fake.set_script(Rule("make the marker", [ShellCommand(command, description="mark"), "Made."]))
    run = run_headless(gemini, fake, tmp_path, "please make the marker", "--approval-mode", "yolo")
    assert run.code == 0
    assert (run.cwd / "marker.txt").read_text() == "fake-ran"
    [use] = run.of("tool_use")
    assert use["tool_name"] == "run_shell_command"
    assert use["parameters"] == {"command": command, "description": "mark"}
    assert use["tool_id"].startswith("run_shell_command__run_shell_command_")
    [result] = run.of("tool_result")
    assert result["tool_id"] == use["tool_id"]
    assert (result["status"], result["output"]) == ("success", "made-it")
    assert run.text == "Made." and run.events[-1]["stats"]["tool_calls"] == 1
    steps = [(r.rule, r.step) for r in fake.model_requests]
    assert steps == [("make the marker", 0), ("make the marker", 1)]
    assert "run_shell_command" in fake.tool_names(0)
    # The model gets the output wrapped as untrusted context; the response id is the
    # CLI's call id without its "<name>__" prefix.
    [response] = fake.function_responses(1)
    assert response["name"] == "run_shell_command"
    assert use["tool_id"] == f"run_shell_command__{response['id']}"
    assert response["response"]["output"].startswith("<untrusted_context>\nOutput: made-it\n")
    assert [c["role"] for c in fake.contents(1)] == ["user", "model", "user"]


def test_cli_write_file_and_replace(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    fake.set_script(
        default=[
            WriteFile("notes/added.txt", "alpha\nbeta\n"),
            Replace("notes/added.txt", "beta", "gamma"),
            "Edited.",
        ]
    )
    run = run_headless(gemini, fake, tmp_path, "edit things", "--approval-mode", "yolo")
    assert run.code == 0
    assert (run.cwd / "notes/added.txt").read_text() == "alpha\ngamma\n"
    assert [u["tool_name"] for u in run.of("tool_use")] == ["write_file", "replace"]
    assert run.of("tool_use")[1]["parameters"] == {
        "file_path": "notes/added.txt",
        "instruction": "Apply the scripted edit.",
        "old_string": "beta",
        "new_string": "gamma",
    }
    # Edits report no `output` in stream-json (their display is a diff object).
    assert [(r["status"], "output" in r) for r in run.of("tool_result")] == [("success", False)] * 2
    assert run.text == "Edited."
    assert [r.step for r in fake.model_requests] == [0, 1, 2]
    responses = fake.function_responses(2)
    assert [r["name"] for r in responses] == ["write_file", "replace"]
    assert "Successfully created and wrote to new file" in responses[0]["response"]["output"]


@pytest.mark.parametrize(
    ("status", "exit_code", "rpc_status"),
    [(401, 145, "UNAUTHENTICATED"), (500, 244, "INTERNAL")],
    ids=["http401", "http500"],
)
def test_cli_http_errors(
    gemini: str, fake: FakeGemini, tmp_path: Path, status: int, exit_code: int, rpc_status: str
) -> None:
    fake.set_script(default=HttpError(status))
    run = run_headless(gemini, fake, tmp_path, "hello")
    assert run.code == exit_code  # process.exit(HTTP status) & 0xFF
    result = run.events[-1]
    assert (result["type"], result["status"], result["error"]["type"]) == (
        "result",
        "error",
        "unknown",
    )
    message = result["error"]["message"]
    assert message.startswith("[API Error: ") and f'"status":"{rpc_status}"' in message
    assert len(fake.model_requests) == 1  # maxAttempts 1: no retry


def test_cli_stream_cut_midway(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    fake.set_script(default=Step([Text("partial text here")], chunk_size=4, close_midstream=True))
    run = run_headless(gemini, fake, tmp_path, "hello")
    # Exit 0 even so: an `error` event, then an error result without an error object.
    assert run.code == 0 and run.text == "part"
    [error] = run.of("error")
    assert (error["severity"], error["message"]) == (
        "error",
        "Model stream ended without a finish reason.",
    )
    assert run.events[-1]["type"] == "result" and run.events[-1]["status"] == "error"
    assert len(fake.model_requests) == 1


def test_cli_finds_the_fake_through_home_env_file(
    gemini: str, fake: FakeGemini, tmp_path: Path
) -> None:
    env = gemini_env(gemini_home(tmp_path, fake.url))
    del env["GOOGLE_GEMINI_BASE_URL"], env["GEMINI_API_KEY"]
    run = run_headless(gemini, fake, tmp_path, "hello", env=env)
    assert run.code == 0 and run.text == "Hello from the fake Gemini API."
    assert len(fake.model_requests) == 1


class AcpClient:
    """`gemini --acp` over stdio: newline-delimited JSON-RPC 2.0, read by a thread."""

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

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def until(self, method: str | None = None, *, id: int | None = None) -> dict[str, Any]:
        """Read until a message with `method` (or the response to `id`) arrives; return it."""
        deadline = time.monotonic() + 30
        while True:
            message = self.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            self.seen.append(message)
            if method is not None and message.get("method") == method:
                return message
            if id is not None and message.get("id") == id and "method" not in message:
                assert "error" not in message, message
                return message

    def updates(self, kind: str) -> list[dict[str, Any]]:
        return [
            m["params"]["update"]
            for m in self.seen
            if m.get("method") == "session/update"
            and m["params"]["update"]["sessionUpdate"] == kind
        ]

    def close(self) -> int:
        """Close stdin (the agent exits on EOF); kill it if it does not; return its code."""
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


def test_acp_prompt_and_permission(gemini: str, fake: FakeGemini, tmp_path: Path) -> None:
    command = "touch acp-made.txt && echo touched"  # not a known-safe command: asks first
    fake.set_script(
        Rule(
            "think",
            [[Thought("**Planning**\n\nI should answer briefly."), Text("The answer, chunked.")]],
        ),
        Rule("touch", [ShellCommand(command, description="make a file"), "Made it."]),
    )
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = gemini_env(gemini_home(tmp_path, fake.url))
    client = AcpClient([gemini, "--acp", "-m", MODEL], env, cwd)
    try:
        client.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": 1,
                    "clientCapabilities": {
                        "fs": {"readTextFile": False, "writeTextFile": False},
                        "terminal": False,
                    },
                },
            }
        )
        init = client.until(id=1)["result"]
        assert init["protocolVersion"] == 1
        assert init["agentInfo"]["name"] == "gemini-cli"
        assert [m["id"] for m in init["authMethods"]] == [
            "oauth-personal",
            "gemini-api-key",
            "vertex-ai",
            "gateway",
        ]
        assert init["agentCapabilities"] == {
            "loadSession": True,
            "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},
        }
        new = client.until(id=client.request("session/new", {"cwd": str(cwd), "mcpServers": []}))
        session = new["result"]
        sid = session["sessionId"]
        assert [m["id"] for m in session["modes"]["availableModes"]] == [
            "default",
            "autoEdit",
            "yolo",
            "plan",
        ]
        assert session["modes"]["currentModeId"] == "default"
        assert session["models"]["currentModelId"] == MODEL
        assert {"modelId", "name"} <= set(session["models"]["availableModels"][0])

        # A text prompt: thought and message chunks, then the prompt's result.
        text = [{"type": "text", "text": "please think"}]
        done = client.until(id=client.request("session/prompt", {"sessionId": sid, "prompt": text}))
        assert done["result"]["stopReason"] == "end_turn"
        quota = done["result"]["_meta"]["quota"]
        assert quota["token_count"]["input_tokens"] > 0
        assert [u["model"] for u in quota["model_usage"]] == [MODEL]
        # The CLI re-renders the thought as "**subject**\ndescription".
        assert client.updates("agent_thought_chunk") == [
            {
                "sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "**Planning**\nI should answer briefly."},
            }
        ]
        chunks = client.updates("agent_message_chunk")
        assert len(chunks) == 2 and {c["content"]["type"] for c in chunks} == {"text"}
        assert "".join(c["content"]["text"] for c in chunks) == "The answer, chunked."
        notifications = [m for m in client.seen if m.get("method") == "session/update"]
        assert all(m["params"]["sessionId"] == sid for m in notifications)

        # A shell call: the agent asks first, with no tool_call notification before it.
        client.seen.clear()
        text = [{"type": "text", "text": "touch it"}]
        prompt_id = client.request("session/prompt", {"sessionId": sid, "prompt": text})
        ask = client.until("session/request_permission")
        assert not (cwd / "acp-made.txt").exists()  # nothing ran before the answer
        tool_call_id = ask["params"]["toolCall"]["toolCallId"]
        assert tool_call_id.startswith("run_shell_command__run_shell_command_")
        assert ask["params"] == {
            "sessionId": sid,
            "options": [
                {
                    "optionId": "proceed_always",
                    "name": "Allow for this session",
                    "kind": "allow_always",
                },
                {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
                {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
            ],
            "toolCall": {
                "toolCallId": tool_call_id,
                "status": "pending",
                "title": command,
                "content": [
                    {
                        "type": "content",
                        "content": {
                            "type": "text",
                            "text": f"[current working directory {cwd}] (make a file)",
                        },
                    }
                ],
                "locations": [],
                "kind": "execute",
            },
        }
        assert isinstance(ask["id"], int)  # agent-side ids count from 0
        client.send(
            {
                "id": ask["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": "proceed_once"}},
            }
        )
        done = client.until(id=prompt_id)
        assert done["result"]["stopReason"] == "end_turn"
        assert client.updates("tool_call") == []
        assert client.updates("tool_call_update") == [
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": tool_call_id,
                "status": "completed",
                "title": command,
                "content": [{"type": "content", "content": {"type": "text", "text": "touched"}}],
                "locations": [],
                "kind": "execute",
            }
        ]
        assert [c["content"]["text"] for c in client.updates("agent_message_chunk")] == ["Made it."]
        assert client.close() == 0
    finally:
        client.close()
    assert (cwd / "acp-made.txt").exists()
    assert [(r.rule, r.step) for r in fake.model_requests] == [
        ("think", 0),
        ("touch", 0),
        ("touch", 1),
    ]
    [response] = fake.function_responses(-1)
    assert tool_call_id == f"run_shell_command__{response['id']}"
    assert "Output: touched" in response["response"]["output"]
    assert fake.side_requests == []
