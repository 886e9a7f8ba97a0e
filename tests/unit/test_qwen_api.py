"""Qwen Code's model-API failures: its error texts made readable (`backends/qwen/invocation.py`)
and its record of a session's API calls (`api_records.py`: what a line says, when a turn is
given up, reading the file as qwen appends to it). Texts and record lines are shaped as qwen
0.24.4 writes them (`~/.qwen/projects/<project>/chats/<id>.jsonl`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from threadline.backends.qwen.api_records import (
    SERVER_ERROR_ATTEMPTS,
    ApiAttempt,
    AttemptWatch,
    RecordTail,
    attempt_of,
)
from threadline.backends.qwen.invocation import api_failure, prompt_failure
from threadline.backends.qwen.spec import SPEC

SID = "3ae15c10-5627-49ba-a8d5-d023b49a57fe"
URL = "http://127.0.0.1:9999/v1"
ENV = {"OPENAI_BASE_URL": URL}


def telemetry(name: str, **fields: Any) -> str:
    event = {"event.name": name, "prompt_id": f"{SID}########1", **fields}
    return json.dumps(
        {"type": "system", "subtype": "ui_telemetry", "systemPayload": {"uiEvent": event}}
    )


def api_error(message: str, status: int | None = None) -> str:
    fields: dict[str, Any] = {"error_message": message}
    if status is not None:
        fields["status_code"] = status
    return telemetry("qwen-code.api_error", **fields)


def test_api_failures_say_what_happened() -> None:
    refused = api_failure("401 Incorrect API key provided", ENV)
    assert refused is not None and refused.codex_error_info == "unauthorized"
    assert f"HTTP 401 from {URL}" in refused.message and str(SPEC.login_fix) in refused.message
    assert refused.additional_details == "401 Incorrect API key provided"
    for text in ("Connection error.", "Connection error. (cause: getaddrinfo EAI_AGAIN x)"):
        unreachable = api_failure(text, ENV)
        assert unreachable is not None and URL in unreachable.message, text
        assert unreachable.codex_error_info == {"httpConnectionFailed": {"httpStatusCode": None}}
    cut = api_failure("terminated", ENV)
    assert cut is not None and "cut off" in cut.message
    assert cut.codex_error_info == {"responseStreamDisconnected": {"httpStatusCode": None}}
    busy = api_failure("429 Rate limit reached", ENV)
    assert busy is not None and busy.codex_error_info == "rateLimitExceeded"
    assert busy.message == "Qwen Code's model API answered HTTP 429: Rate limit reached"
    assert api_failure("Tool registry not ready", ENV) is None


def test_other_prompt_failures_in_qwens_words() -> None:
    too_large = prompt_failure(
        "Context is too large to send safely after automatic compression. Estimated prompt "
        "tokens: 541812; hard limit: 177000",
        ENV,
    )
    assert too_large.codex_error_info == "contextWindowExceeded"
    assert too_large.message.startswith("Qwen Code: Context is too large"), too_large.message
    other = prompt_failure("Tool registry not ready", ENV)
    assert other.message == "Qwen Code: Tool registry not ready"
    assert other.codex_error_info == "other"
    assert prompt_failure("401 bad key", ENV).codex_error_info == "unauthorized"


def test_attempt_of_reads_api_calls_only() -> None:
    assert attempt_of(api_error("500 fake", 500)) == ApiAttempt(False, 500, "500 fake")
    assert attempt_of(api_error("Connection error.")) == ApiAttempt(
        False, None, "Connection error."
    )
    assert attempt_of(telemetry("qwen-code.api_response", status_code=200)) == ApiAttempt(True)
    assert attempt_of(telemetry("qwen-code.tool_call")) is None
    assert attempt_of(json.dumps({"type": "user", "message": {"role": "user"}})) is None
    assert attempt_of("{not json") is None


def test_server_errors_in_a_row_give_up_with_the_url() -> None:
    watch = AttemptWatch(ENV)
    failed = ApiAttempt(False, 503, "503 upstream overloaded")
    for _ in range(SERVER_ERROR_ATTEMPTS - 1):
        assert watch.see(failed) is None
    assert watch.see(ApiAttempt(True)) is None  # an answer starts the count again
    for _ in range(SERVER_ERROR_ATTEMPTS - 1):
        assert watch.see(failed) is None
    error = watch.see(failed)
    assert error is not None
    assert error.codex_error_info == "internalServerError"
    assert URL in error.message and "HTTP 503" in error.message, error.message
    assert error.additional_details == "503 upstream overloaded"


def test_rate_limits_and_refusals_are_left_to_qwen() -> None:
    watch = AttemptWatch(ENV)
    for _ in range(10):
        assert watch.see(ApiAttempt(False, 429, "429 slow down")) is None
        assert watch.see(ApiAttempt(False, 401, "401 bad key")) is None


def test_connection_failures_give_up_after_the_budget() -> None:
    now = [0.0]
    watch = AttemptWatch(ENV, clock=lambda: now[0])
    dns = ApiAttempt(False, None, "Connection error. (cause: getaddrinfo ENOTFOUND api.invalid)")
    for t in (0.0, 1.3):  # qwen's attempts, measured for a host that does not resolve
        now[0] = t
        assert watch.see(dns) is None
    now[0] = 4.7
    error = watch.see(dns)
    assert error is not None
    assert error.codex_error_info == {"httpConnectionFailed": {"httpStatusCode": None}}
    assert URL in error.message and "OPENAI_BASE_URL" in error.message, error.message


def test_tail_reads_what_is_appended_once_complete(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    chats = tmp_path / ".qwen" / "projects" / "-work" / "chats"
    tail = RecordTail(env, SID)
    assert tail.read() == []  # no record yet
    chats.mkdir(parents=True)
    record = chats / f"{SID}.jsonl"
    record.write_text("first\nsecond (half")
    assert tail.read() == ["first"]
    with record.open("a") as f:
        f.write(" and the rest)\n")
    assert tail.read() == ["second (half and the rest)"]
    # a tail started on an existing record reads only what comes after
    later = RecordTail(env, SID)
    with record.open("a") as f:
        f.write("third\n")
    assert later.read() == ["third"] and tail.read() == ["third"]


def test_the_runtime_dir_follows_qwen_home(tmp_path: Path) -> None:
    chats = tmp_path / "qh" / "projects" / "p" / "chats"
    chats.mkdir(parents=True)
    (chats / f"{SID}.jsonl").write_text("")
    tail = RecordTail({"HOME": str(tmp_path / "nowhere"), "QWEN_HOME": str(tmp_path / "qh")}, SID)
    with (chats / f"{SID}.jsonl").open("a") as f:
        f.write("x\n")
    assert tail.read() == ["x"]
