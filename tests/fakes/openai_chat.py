"""A scripted fake of the OpenAI Chat Completions API for driving the real `opencode` CLI offline.

OpenCode reaches it through a custom provider (``"npm": "@ai-sdk/openai-compatible"``, bundled in
the binary); `opencode_env` builds the whole environment for that::

    with FakeOpenAIChat(Rule("make it", [bash_call("touch x"), "Done."])) as fake:
        env = opencode_env(tmp_path, fake.url, cwd=work)
        subprocess.run([opencode, "run", "--format", "json"], input="make it", cwd=work, env=env,
                       ...)
        fake.tool_results(1)  # what OpenCode sent back after running the command

Scripting: rules are tried in order against the text of the latest *human* user message
(case-insensitive substring; ``<system-reminder>`` blocks stripped; system messages and
``role: "tool"`` results never count). The first matching rule wins, else the default rule. A
rule's step k answers the k-th model call since that human message (k = assistant messages after
it): step 0 is the first answer, step 1 the answer after the first round of tool results, ...;
the last step repeats. A retry re-sends the same messages, so it gets the same step.

Side calls: besides the agent loop OpenCode calls the model for a session title (observed with
1.18.33: once per new session, not on ``--session`` continuations, in parallel with the first
answer, with the `small_model`, no tools, system prompt "You are a title generator", the
prompt as the last user message) and, in some flows, for a summary or a context compaction.
They are recognised by their system prompt (`SIDE_CALLS`), answered from ``side_calls`` (a
fixed title/summary by default; the title answer becomes the session title), never consume
scripted steps, and are kept out of `model_requests` (see `side_requests`).

A step is a `Step`, or shorthand: a `str` (one text message), one block, a list of blocks, or an
`HttpError`. Lists passed as ``steps``/``default`` are always lists of *steps*.

Only stdlib; binds 127.0.0.1; serves from a background thread so it works next to trio tests and
subprocesses; closes itself after ``max_lifetime`` seconds so nothing can linger.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias, cast
from urllib.parse import urlsplit

from ._base import FakeHandler, FakeServer

__all__ = [
    "API_KEY",
    "COMPLETIONS_PATH",
    "MODEL",
    "OPENCODE_VERSION",
    "PROVIDER",
    "REDACTED",
    "SIDE_CALLS",
    "SMALL_MODEL",
    "Block",
    "FakeOpenAIChat",
    "HttpError",
    "Reasoning",
    "RecordedRequest",
    "Rule",
    "Step",
    "StepLike",
    "StreamError",
    "Text",
    "ToolCall",
    "bash_call",
    "edit_call",
    "opencode_config",
    "opencode_env",
    "write_call",
]

COMPLETIONS_PATH = "/v1/chat/completions"
MODELS_PATH = "/v1/models"
REDACTED = "<redacted>"
PROVIDER = "fake"  # the provider id in OpenCode's config: models are "fake/<model>"
MODEL = "fake-model"
SMALL_MODEL = "fake-small"  # OpenCode's `small_model`: what title generation uses
API_KEY = "sk-fake-opencode"
OPENCODE_VERSION = "1.18.33"  # for the plugin pre-seed in `opencode_env`
_SECRET_HEADERS = frozenset({"authorization", "api-key", "openai-api-key", "x-api-key"})
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)

# Side calls by a marker in their system prompt (OpenCode 1.18.33's hidden agents `title`,
# `summary` and `compaction`).
SIDE_CALLS: Mapping[str, str] = {
    "title": "You are a title generator",
    "summary": "Summarize what was done in this conversation",
    "compaction": "You are a context summarization agent",
}

# Error `type`/`code` the real API sends for some statuses (the rest send a null code).
_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def _error_type(status: int) -> str:
    if status == 429:
        return "requests"
    return "invalid_request_error" if status < 500 else "server_error"


# --------------------------------------------------------------------------- script types


@dataclass(frozen=True)
class Text:
    """Assistant text, streamed as several ``delta.content`` chunks."""

    text: str


@dataclass(frozen=True)
class Reasoning:
    """Reasoning, streamed as ``delta.reasoning_content`` chunks (what the AI SDK's
    openai-compatible provider reads; OpenCode shows it as a reasoning part)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """A function tool call; `arguments` (JSON-encoded if a mapping) is streamed in
    ``delta.tool_calls[].function.arguments`` chunks after a first chunk with id and name.
    Several calls in one step are parallel calls (``index`` 0, 1, ...)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None  # None: a fresh ``call_…`` id per response

    @property
    def arguments_json(self) -> str:
        args = self.arguments
        return args if isinstance(args, str) else json.dumps(dict(args))


def bash_call(
    command: str,
    description: str | None = None,
    *,
    workdir: str | None = None,
    timeout_ms: int | None = None,
    id: str | None = None,
) -> ToolCall:
    """OpenCode's `bash` tool. Its 1.18.33 schema has `command`, `timeout` (ms) and `workdir`;
    a `description` (what older versions required) is accepted and shown in the tool input."""
    args: dict[str, Any] = {"command": command}
    if description is not None:
        args["description"] = description
    if workdir is not None:
        args["workdir"] = workdir
    if timeout_ms is not None:
        args["timeout"] = timeout_ms
    return ToolCall("bash", args, id)


def write_call(file_path: str, content: str, *, id: str | None = None) -> ToolCall:
    """OpenCode's `write` tool (relative paths resolve against the session directory)."""
    return ToolCall("write", {"filePath": file_path, "content": content}, id)


def edit_call(
    file_path: str,
    old_string: str,
    new_string: str,
    *,
    replace_all: bool = False,
    id: str | None = None,
) -> ToolCall:
    """OpenCode's `edit` tool: exact string replacement (no prior `read` needed)."""
    args: dict[str, Any] = {"filePath": file_path, "oldString": old_string}
    args["newString"] = new_string
    if replace_all:
        args["replaceAll"] = True
    return ToolCall("edit", args, id)


Block: TypeAlias = Text | Reasoning | ToolCall


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error and the API's error body (``{"error": {...}}``).

    OpenCode retries retryable errors (5xx, 429, ...) up to 5 times with backoff starting at 2 s
    (~70 s in all) unless the response carries ``retry-after-ms``/``retry-after``: pass
    ``headers={"retry-after-ms": "0"}`` to make the retries immediate."""

    status: int
    message: str = "fake error"
    error_type: str | None = None  # None: the API's type for `status`
    code: str | None = None  # None: the API's code for `status` (may stay null)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type or _error_type(self.status),
                "param": None,
                "code": self.code if self.code is not None else _ERROR_CODES.get(self.status),
            }
        }


@dataclass(frozen=True)
class StreamError:
    """A ``data: {"error": {...}}`` chunk after `after_blocks` complete blocks, then the stream
    ends (no finish chunk, no ``[DONE]``), as when an upstream fails mid-answer. OpenCode
    reports it as an ``UnknownError`` whose message is the error object's JSON; it retries it
    (~70 s) when the text matches its retry patterns (e.g. type ``server_error``)."""

    message: str = "fake stream error"
    after_blocks: int = 0
    error_type: str = "server_error"
    code: str | None = None


@dataclass(frozen=True)
class Step:
    """One model answer.

    `delay_ms` sleeps between deltas. `stall_after_first_delta_ms` sends the first delta, then
    stalls (interrupt tests; shutdown cuts the stall short). `close_midstream` drops the
    connection after the first delta (an incomplete chunked body: a transport error, which
    OpenCode retries for ~70 s before "Cannot connect to API: The socket connection was closed
    unexpectedly");
    `drop_connection` closes without any answer; `omit_done` ends the body cleanly without
    ``data: [DONE]``. For non-streaming requests the stall delays the whole answer,
    `close_midstream` drops it and `stream_error` becomes an HTTP 500.
    """

    blocks: Sequence[Block] = ()
    delay_ms: int = 0
    chunk_size: int = 16
    stall_after_first_delta_ms: int = 0
    error: HttpError | None = None
    stream_error: StreamError | None = None
    close_midstream: bool = False
    drop_connection: bool = False
    omit_done: bool = False
    finish_reason: str | None = None  # None: "tool_calls" if any ToolCall else "stop"
    prompt_tokens: int | None = None  # None: ~len(request JSON) / 4
    completion_tokens: int | None = None  # None: ~len(output) / 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")

    @property
    def effective_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if any(isinstance(b, ToolCall) for b in self.blocks) else "stop"


StepLike: TypeAlias = Step | HttpError | Block | str | Sequence[Block]


def as_step(step: StepLike) -> Step:
    """Normalise the shorthands accepted in `Rule.steps` into a `Step`."""
    if isinstance(step, Step):
        return step
    if isinstance(step, HttpError):
        return Step(error=step)
    if isinstance(step, str):
        return Step([Text(step)])
    if isinstance(step, Text | Reasoning | ToolCall):
        return Step([step])
    return Step(step)


@dataclass(frozen=True)
class Rule:
    """Answer with `steps` when `match` is a (case-insensitive) substring of the latest human
    user message; ``match=""`` matches everything."""

    match: str
    steps: Sequence[StepLike]
    name: str | None = None  # shown in RecordedRequest.rule; defaults to `match`

    def __post_init__(self) -> None:
        if isinstance(self.steps, str) or not self.steps:
            raise ValueError("Rule.steps must be a non-empty list of steps")
        object.__setattr__(self, "steps", tuple(as_step(s) for s in self.steps))

    @property
    def label(self) -> str:
        return self.name if self.name is not None else self.match

    def step(self, k: int) -> Step:
        return as_step(self.steps[min(k, len(self.steps) - 1)])


DEFAULT_RULE = Rule("", ["Hello from the fake OpenAI Chat Completions API."], name="default")
DEFAULT_SIDE_ANSWERS: Mapping[str, StepLike] = {
    "title": "Fake session title",
    "summary": "Fake summary of the conversation.",
    "compaction": "Fake compacted context.",
}


@dataclass(frozen=True)
class _Script:
    rules: tuple[Rule, ...]
    default: Rule

    def pick(self, human_text: str) -> Rule:
        lowered = human_text.lower()
        return next((r for r in self.rules if r.match.lower() in lowered), self.default)


# --------------------------------------------------------------------------- conversation helpers


def _content_text(content: Any) -> str:
    """Text of a message's `content`: a string, or the text parts of a parts list."""
    if isinstance(content, str):
        return content
    parts = (p.get("text") for p in content or () if isinstance(p, dict))
    return "\n".join(p for p in parts if isinstance(p, str))


def _human_text(message: Mapping[str, Any]) -> str | None:
    """The text a person typed, or None if `message` is not a human user message."""
    if message.get("role") != "user":
        return None
    content = message.get("content")
    text = _REMINDER.sub("", _content_text(content)).strip()
    has_other = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") != "text" for p in content
    )  # e.g. an image or a file
    return text if text or has_other else None


def _locate(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(latest human text, assistant messages since it)."""
    for i in range(len(messages) - 1, -1, -1):
        text = _human_text(messages[i])
        if text is not None:
            return text, sum(1 for m in messages[i + 1 :] if m.get("role") == "assistant")
    return "", sum(1 for m in messages if m.get("role") == "assistant")


def _system_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(_content_text(m.get("content")) for m in messages if m.get("role") == "system")


def _side_call(messages: list[dict[str, Any]]) -> str | None:
    system = _system_text(messages)
    return next((kind for kind, marker in SIDE_CALLS.items() if marker in system), None)


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake saw it (secret header values redacted)."""

    method: str
    path: str  # with query string
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    rule: str | None = None  # label of the rule that answered (scripted model calls only)
    step: int | None = None  # step index k within that rule
    side_call: str | None = None  # "title" | "summary" | "compaction" for side calls

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        if not isinstance(self.body, dict):
            return []
        return [m for m in self.body.get("messages") or () if isinstance(m, dict)]

    @property
    def tool_names(self) -> list[str]:
        """Names of the function tools offered in the request."""
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        return [
            str(t.get("function", {}).get("name"))
            for t in tools or ()
            if isinstance(t, dict) and isinstance(t.get("function"), dict)
        ]

    @property
    def system_text(self) -> str:
        """Text of all system messages, joined by newlines."""
        return _system_text(self.messages)

    @property
    def user_texts(self) -> list[str]:
        """Raw text of every user message, oldest first."""
        return [_content_text(m.get("content")) for m in self.messages if m.get("role") == "user"]

    @property
    def human_text(self) -> str:
        """Text of the latest human user message: what rules are matched against."""
        return _locate(self.messages)[0]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """The ``role: "tool"`` messages after the last assistant message (the results of the
        latest tool round), each ``{"role", "tool_call_id", "content"}``."""
        trailing: list[dict[str, Any]] = []
        for message in reversed(self.messages):
            if message.get("role") != "tool":
                break
            trailing.append(message)
        return trailing[::-1]

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """``tool_calls`` of every assistant message, oldest first."""
        return [
            c
            for m in self.messages
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or ()
            if isinstance(c, dict)
        ]


# --------------------------------------------------------------------------- server


class _Abort(Exception):
    """Stop writing this response and drop the connection."""


class _Handler(FakeHandler):
    def do_POST(self) -> None:
        self._dispatch()

    do_GET = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_POST

    def _dispatch(self) -> None:
        fake = self.server.fake
        self.close_connection = True  # one request per connection: no keep-alive races
        raw = self._read_body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None  # e.g. a compressed body: recorded as None
        headers = {
            k.lower(): (REDACTED if k.lower() in _SECRET_HEADERS else v)
            for k, v in self.headers.items()
        }
        route = urlsplit(self.path).path.rstrip("/")
        base = RecordedRequest(self.command, self.path, headers, body)
        try:
            if self.command == "GET" and route == MODELS_PATH:
                fake._record(base)
                models = [MODEL, SMALL_MODEL]
                data = [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models
                ]
                self._send_json(200, {"object": "list", "data": data})
            elif self.command != "POST" or route != COMPLETIONS_PATH:
                fake._record(base)
                msg = f"fake: no route for {self.command} {self.path}"
                self._send_json(404, HttpError(404, msg).body)
            elif not isinstance(body, dict):
                fake._record(base)
                self._send_json(400, HttpError(400, "fake: body must be a JSON object").body)
            else:
                self._respond(base, body)
        except _Abort:
            self._drop()

    def _respond(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        fake = self.server.fake
        side = _side_call(base.messages)
        if side is not None:
            step = as_step(fake._side_answer(side))
            fake._record(replace(base, side_call=side))
        else:
            human_text, k = _locate(base.messages)
            rule = fake._current_script().pick(human_text)
            step = rule.step(k)
            fake._record(replace(base, rule=rule.label, step=k))
        if step.drop_connection:
            raise _Abort
        if step.error is not None:
            self._send_json(step.error.status, step.error.body, step.error.headers)
            return
        answer = _Answer(self, step, body)
        if body.get("stream"):
            answer.stream()
        else:
            answer.whole()

    # -- I/O helpers

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("content-length") or 0))

    def _send_json(self, status: int, payload: Any, extra: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("x-request-id", f"req_fake{uuid.uuid4().hex[:20]}")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _with_id(block: Block) -> Block:
    if isinstance(block, ToolCall) and block.id is None:
        return replace(block, id=f"call_fake{uuid.uuid4().hex[:20]}")
    return block


class _Answer:
    """One answer, as an SSE stream of ``chat.completion.chunk``s or one ``chat.completion``."""

    def __init__(self, handler: _Handler, step: Step, body: dict[str, Any]) -> None:
        self.h, self.step = handler, step
        self.blocks = [_with_id(b) for b in step.blocks]
        self.id = f"chatcmpl-fake{uuid.uuid4().hex[:20]}"
        self.created = int(time.time())
        self.model = str(body.get("model") or MODEL)
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        prompt = [body.get("messages"), body.get("tools")]
        self.prompt_tokens = step.prompt_tokens or max(1, len(json.dumps(prompt)) // 4)
        self.deltas_sent = 0

    def usage(self) -> dict[str, Any]:
        size = sum(len(json.dumps(_block_json(b))) for b in self.blocks)
        completion = self.step.completion_tokens or max(1, math.ceil(size / 4))
        reasoning = sum(len(b.text) for b in self.blocks if isinstance(b, Reasoning))
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": math.ceil(reasoning / 4)},
        }

    # -- non-streaming

    def whole(self) -> None:
        step, h = self.step, self.h
        if step.stall_after_first_delta_ms and not h._pause(step.stall_after_first_delta_ms):
            raise _Abort
        if step.close_midstream:
            raise _Abort
        if step.stream_error is not None:
            err = step.stream_error
            h._send_json(500, HttpError(500, err.message, err.error_type, err.code).body)
            return
        message: dict[str, Any] = {"role": "assistant", "content": None}
        texts = [b.text for b in self.blocks if isinstance(b, Text)]
        if texts:
            message["content"] = "".join(texts)
        reasoning = [b.text for b in self.blocks if isinstance(b, Reasoning)]
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        calls = [_block_json(b) for b in self.blocks if isinstance(b, ToolCall)]
        if calls:
            message["tool_calls"] = calls
        choice = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": step.effective_finish_reason,
        }
        h._send_json(200, {**self.envelope("chat.completion", [choice]), "usage": self.usage()})

    # -- streaming

    def stream(self) -> None:
        h, step = self.h, self.step
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("cache-control", "no-cache")
        h.send_header("x-request-id", f"req_fake{uuid.uuid4().hex[:20]}")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("connection", "close")
        h.end_headers()
        self.chunk({"role": "assistant", "content": ""})
        tool_index = 0
        for index, block in enumerate(self.blocks):
            if step.stream_error is not None and step.stream_error.after_blocks <= index:
                break
            if isinstance(block, Text):
                for piece in self.pieces(block.text):
                    self.delta({"content": piece})
            elif isinstance(block, Reasoning):
                for piece in self.pieces(block.text):
                    self.delta({"reasoning_content": piece})
            else:
                function = {"name": block.name, "arguments": ""}
                head = {
                    "index": tool_index,
                    "id": block.id,
                    "type": "function",
                    "function": function,
                }
                self.delta({"tool_calls": [head]})
                for piece in self.pieces(block.arguments_json):
                    args = {"index": tool_index, "function": {"arguments": piece}}
                    self.delta({"tool_calls": [args]})
                tool_index += 1
        if step.stream_error is not None:
            err = step.stream_error
            body = HttpError(0, err.message, err.error_type, err.code).body
            self.data(json.dumps(body))
        else:
            self.chunk({}, finish_reason=step.effective_finish_reason)
            if self.include_usage:
                self.data(
                    json.dumps(
                        {**self.envelope("chat.completion.chunk", []), "usage": self.usage()}
                    )
                )
            if not step.omit_done:
                self.data("[DONE]")
        h.wfile.write(b"0\r\n\r\n")

    def delta(self, delta: dict[str, Any]) -> None:
        if self.deltas_sent and not self.h._pause(self.step.delay_ms):
            raise _Abort
        self.chunk(delta)
        self.deltas_sent += 1
        if self.deltas_sent == 1:
            if self.step.close_midstream:
                raise _Abort
            stall = self.step.stall_after_first_delta_ms
            if stall and not self.h._pause(stall):
                raise _Abort

    def pieces(self, text: str) -> Iterator[str]:
        size = self.step.chunk_size
        return (text[i : i + size] for i in range(0, len(text), size))

    def envelope(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        self.data(json.dumps(self.envelope("chat.completion.chunk", [choice])))

    def data(self, payload: str) -> None:
        frame = f"data: {payload}\n\n".encode()
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))


def _block_json(block: Block) -> dict[str, Any]:
    if isinstance(block, ToolCall):
        function = {"name": block.name, "arguments": block.arguments_json}
        return {"id": block.id, "type": "function", "function": function}
    return {"text": block.text}


# --------------------------------------------------------------------------- public facade


class FakeOpenAIChat(FakeServer):
    """The fake server. Start with `start()` or ``with``; `url` is the root, `base_url` adds
    ``/v1`` (what an openai-compatible provider's ``baseURL`` needs; `opencode_env` takes either).

    Accessors taking `i` index the scripted model calls (`model_requests`: POST
    /v1/chat/completions minus side calls); `side_requests` has the side calls and `requests`
    everything (GET /v1/models, 404s, ...) in arrival order.
    """

    def __init__(
        self,
        *rules: Rule,
        default: Rule | Sequence[StepLike] | StepLike | None = None,
        side_calls: Mapping[str, StepLike] | None = None,
        max_lifetime: float = 15 * 60,
    ) -> None:
        super().__init__(_Handler, _make_script(rules, default), max_lifetime, "fake-openai-chat")
        self._side_answers = {**DEFAULT_SIDE_ANSWERS, **(side_calls or {})}

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- scripting

    def set_script(
        self,
        *rules: Rule,
        default: Rule | Sequence[StepLike] | StepLike | None = None,
        side_calls: Mapping[str, StepLike] | None = None,
    ) -> None:
        """Replace the whole script (thread-safe; requests in flight keep their old step).
        `side_calls` (if given) overrides answers to side calls by kind (see `SIDE_CALLS`)."""
        script = _make_script(rules, default)
        with self._lock:
            self._script = script
            if side_calls is not None:
                self._side_answers = {**DEFAULT_SIDE_ANSWERS, **side_calls}

    # -- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Scripted model calls (POST /v1/chat/completions answered by the script: side calls
        and malformed requests excluded)."""
        return [r for r in self.requests if r.rule is not None]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        """Side calls (title, summary, compaction), answered outside the script."""
        return [r for r in self.requests if r.side_call is not None]

    def messages(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].messages

    def system_text(self, i: int = -1) -> str:
        return self.model_requests[i].system_text

    def user_texts(self, i: int = -1) -> list[str]:
        return self.model_requests[i].user_texts

    def tool_results(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].tool_results

    def wait_for_requests(
        self,
        n: int,
        timeout: float = 10.0,
        *,
        route: str | None = COMPLETIONS_PATH,
        include_side_calls: bool = False,
    ) -> list[RecordedRequest]:
        """Block until `n` requests to `route` (None: any) arrived; return them. Side calls
        count only with `include_side_calls`."""

        def matching() -> list[RecordedRequest]:
            return [
                r
                for r in self._requests
                if (route is None or r.route == route)
                and (include_side_calls or r.side_call is None)
            ]

        with self._lock:
            if not self._lock.wait_for(lambda: len(matching()) >= n, timeout):
                seen = [f"{r.method} {r.path} {r.side_call or ''}" for r in self._requests]
                raise TimeoutError(f"expected {n} requests to {route} within {timeout}s: {seen}")
            return matching()

    # -- called by handler threads

    def _side_answer(self, kind: str) -> StepLike:
        with self._lock:
            return self._side_answers.get(kind, DEFAULT_SIDE_ANSWERS["summary"])


def _make_script(
    rules: Sequence[Rule], default: Rule | Sequence[StepLike] | StepLike | None
) -> _Script:
    if default is None:
        rule = DEFAULT_RULE
    elif isinstance(default, Rule):
        rule = default
    elif isinstance(default, list | tuple):
        rule = Rule("", default, name="default")
    else:
        rule = Rule("", [cast(StepLike, default)], name="default")
    return _Script(tuple(rules), rule)


# --------------------------------------------------------------------------- OpenCode set-up


def opencode_config(
    fake_url: str,
    *,
    model: str = MODEL,
    small_model: str = SMALL_MODEL,
    permission: Mapping[str, Any] | str | None = None,
    api_key: str = API_KEY,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The config `opencode_env` passes in OPENCODE_CONFIG_CONTENT: one provider, the fake,
    and only it (`enabled_providers` hides the bundled "opencode" Zen models)."""
    base_url = fake_url.rstrip("/")
    if not base_url.endswith("/v1"):
        base_url += "/v1"
    models = {m: {"name": m, "tool_call": True} for m in (model, small_model)}
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{small_model}",
        "enabled_providers": [PROVIDER],
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",  # bundled: nothing is installed
                "name": "Fake OpenAI Chat",
                "options": {"baseURL": base_url, "apiKey": api_key},
                "models": models,
            }
        },
    }
    if permission is not None:
        config["permission"] = permission
    config.update(extra or {})
    return config


def opencode_env(
    tmp_dir: Path,
    fake_url: str,
    *,
    model: str = MODEL,
    small_model: str = SMALL_MODEL,
    permission: Mapping[str, Any] | str | None = None,
    cwd: Path | None = None,
    api_key: str = API_KEY,
    extra_config: Mapping[str, Any] | None = None,
    name: str = "opencode",
) -> dict[str, str]:
    """A complete environment for running `opencode` against the fake (`fake_url`:
    `FakeOpenAIChat.url` or `.base_url`), contacting nothing else.

    Everything lives under ``tmp_dir/name`` (fresh HOME and XDG dirs: sessions, logs and
    snapshots stay there); the config travels in OPENCODE_CONFIG_CONTENT, so nothing is written
    into the project dir. `permission` becomes the config's ``permission`` (e.g.
    ``{"bash": "ask"}``). `cwd` sets PWD, which ``opencode run`` prefers over the real working
    directory: without it the agent works in whatever directory PWD names. Only PATH is
    inherited (the bash tool needs the usual binaries)."""
    root = tmp_dir / name
    dirs = {d: root / d for d in ("home", "config", "data", "cache", "state")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    _preseed_plugin(dirs["config"] / "opencode")
    config = opencode_config(
        fake_url,
        model=model,
        small_model=small_model,
        permission=permission,
        api_key=api_key,
        extra=extra_config,
    )
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": str(dirs["home"]),
        "XDG_CONFIG_HOME": str(dirs["config"]),
        "XDG_DATA_HOME": str(dirs["data"]),
        "XDG_CACHE_HOME": str(dirs["cache"]),
        "XDG_STATE_HOME": str(dirs["state"]),
        "OPENCODE_CONFIG_CONTENT": json.dumps(config),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # no models catalogue download
        "OPENCODE_DISABLE_AUTOUPDATE": "1",  # no update check
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        # Anything npm-based that still tries the registry fails fast and locally.
        "npm_config_registry": "http://127.0.0.1:9/",
    }
    if cwd is not None:
        env["PWD"] = str(cwd)
    return env


def _preseed_plugin(config_dir: Path) -> None:
    """Make OpenCode believe `@opencode-ai/plugin` is installed in its config dir, so it skips
    the background npm install it otherwise starts there (it only compares package.json with
    the lockfile's root when node_modules exists)."""
    deps = {"@opencode-ai/plugin": OPENCODE_VERSION}
    (config_dir / "node_modules").mkdir(parents=True, exist_ok=True)
    (config_dir / "package.json").write_text(json.dumps({"dependencies": deps}))
    lock = {"lockfileVersion": 3, "requires": True, "packages": {"": {"dependencies": deps}}}
    (config_dir / "package-lock.json").write_text(json.dumps(lock))
