"""A scripted fake of the Anthropic Messages API for driving the real `claude` CLI offline.

Point the CLI at it with ``ANTHROPIC_BASE_URL=fake.url`` and any ``ANTHROPIC_API_KEY``::

    with FakeAnthropic(Rule("list files", [ToolUse("Bash", {"command": "ls"}), "Listed."])) as fake:
        ...  # run claude; then inspect fake.requests / fake.tool_results(1)

Scripting: rules are tried in order against the text of the latest *human* user message
(case-insensitive substring; ``<system-reminder>`` blocks stripped); the first match wins, else
the default rule. A rule's step k answers the k-th model call since that human message (k =
assistant messages after it), so step 0 is the first answer, step 1 the answer after the first
tool_result, ...; the last step repeats.

A step is a `Step`, or shorthand: a `str` (one text block), one block, a list of blocks, or an
`HttpError`. Lists passed as ``steps``/``default`` are always lists of *steps*.

Only stdlib; binds 127.0.0.1; serves from a background thread so it works next to trio tests and
subprocesses; closes itself after ``max_lifetime`` seconds so nothing can linger.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeAlias, cast
from urllib.parse import urlsplit

from ._base import FakeHandler, FakeServer

__all__ = [
    "Block",
    "FakeAnthropic",
    "HttpError",
    "RecordedRequest",
    "Rule",
    "SseError",
    "Step",
    "StepLike",
    "Text",
    "Thinking",
    "ToolUse",
]

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
REDACTED = "<redacted>"
_SECRET_HEADERS = frozenset({"x-api-key", "authorization"})
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)

# Error `type`s the real API uses for each status (the CLI maps some of them to its own texts).
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- script types


@dataclass(frozen=True)
class Text:
    """A text block, streamed as several ``text_delta``s."""

    text: str


@dataclass(frozen=True)
class Thinking:
    """A thinking block: ``thinking_delta``s then one ``signature_delta``."""

    thinking: str
    signature: str = "fake-signature"


@dataclass(frozen=True)
class ToolUse:
    """A tool call; `input` is streamed as ``input_json_delta`` chunks. Its presence makes
    the default stop_reason ``tool_use``."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None  # None: a fresh ``toolu_…`` id per response


Block: TypeAlias = Text | Thinking | ToolUse


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error and the API's error body. `should_retry` sets the
    ``x-should-retry`` header the CLI honours (None: no header); `headers` are sent too."""

    status: int
    message: str = "fake error"
    error_type: str | None = None  # None: the API's type for `status`
    should_retry: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "1"}

    @property
    def body(self) -> dict[str, Any]:
        etype = self.error_type or _ERROR_TYPES.get(self.status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": self.message}}


@dataclass(frozen=True)
class SseError:
    """An SSE ``event: error`` sent after `after_blocks` complete blocks; the stream then ends
    without ``message_delta``/``message_stop`` (as when the real API overloads mid-stream)."""

    after_blocks: int = 0
    error_type: str = "overloaded_error"
    message: str = "Overloaded"


@dataclass(frozen=True)
class Step:
    """One model answer.

    `delay_ms` sleeps between deltas. `stall_after_first_delta_ms` sends the first delta, then
    stalls (interrupt tests; shutdown cuts the stall short). `close_midstream` drops the
    connection after the first delta (an incomplete chunked body, i.e. a transport error).
    For non-streaming requests: stall delays the answer, `close_midstream` is ignored (there is
    no first delta; and the CLI's non-streaming retry after a dropped stream then succeeds) and
    `sse_error` becomes an HTTP 529 ``overloaded_error``.
    """

    blocks: Sequence[Block] = ()
    delay_ms: int = 0
    chunk_size: int = 16
    stall_after_first_delta_ms: int = 0
    error: HttpError | None = None
    sse_error: SseError | None = None
    close_midstream: bool = False
    drop_connection: bool = False  # close without any answer (streaming or not)
    stop_reason: str | None = None  # None: "tool_use" if any ToolUse else "end_turn"
    input_tokens: int | None = None  # None: ~len(request JSON) / 4
    output_tokens: int | None = None  # None: ~len(output) / 4

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        if self.chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


StepLike: TypeAlias = Step | HttpError | Text | Thinking | ToolUse | str | Sequence[Block]


def as_step(step: StepLike) -> Step:
    """Normalise the shorthands accepted in `Rule.steps` into a `Step`."""
    if isinstance(step, Step):
        return step
    if isinstance(step, HttpError):
        return Step(error=step)
    if isinstance(step, str):
        return Step([Text(step)])
    if isinstance(step, Text | Thinking | ToolUse):
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


DEFAULT_RULE = Rule("", ["Hello from the fake Anthropic API."], name="default")


@dataclass(frozen=True)
class _Script:
    rules: tuple[Rule, ...]
    default: Rule

    def pick(self, human_text: str) -> Rule:
        lowered = human_text.lower()
        return next((r for r in self.rules if r.match.lower() in lowered), self.default)


# --------------------------------------------------------------------------- conversation helpers


def _strip_reminders(text: str) -> str:
    return _REMINDER.sub("", text).strip()


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, dict)]


def _user_text(message: dict[str, Any]) -> str:
    """Text blocks of a message, reminders stripped (tool_result contents are not included)."""
    texts = (_strip_reminders(str(b.get("text", ""))) for b in _blocks(message))
    return "\n".join(t for t in texts if t)


def _is_human(message: dict[str, Any]) -> bool:
    """A user message carrying something besides tool_results and system reminders."""
    if message.get("role") != "user":
        return False
    for block in _blocks(message):
        if block.get("type") == "text":
            if _strip_reminders(str(block.get("text", ""))):
                return True
        elif block.get("type") != "tool_result":
            return True  # e.g. an image
    return False


def _locate(messages: list[dict[str, Any]]) -> tuple[str, int]:
    """(latest human text, assistant messages since it). The CLI also interleaves
    ``role: "system"`` messages; they count as neither."""
    human = next((i for i in range(len(messages) - 1, -1, -1) if _is_human(messages[i])), -1)
    text = _user_text(messages[human]) if human >= 0 else ""
    k = sum(1 for m in messages[human + 1 :] if m.get("role") == "assistant")
    return text, k


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake saw it (secret header values redacted)."""

    method: str
    path: str  # with query string, e.g. "/v1/messages?beta=true"
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    rule: str | None = None  # label of the rule that answered (model calls only)
    step: int | None = None  # step index k within that rule

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        if not isinstance(self.body, dict):
            return []
        return [m for m in self.body.get("messages") or () if isinstance(m, dict)]

    @property
    def system_text(self) -> str:
        return _system_text(self.body.get("system")) if isinstance(self.body, dict) else ""

    @property
    def last_user_text(self) -> str:
        """Text of the latest user message (reminders stripped; "" for tool_results only)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return _user_text(users[-1]) if users else ""

    @property
    def human_text(self) -> str:
        """Text of the latest human user message: what rules are matched against."""
        return _locate(self.messages)[0]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """tool_result blocks of the latest user message."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return [b for b in _blocks(users[-1]) if b.get("type") == "tool_result"] if users else []


# --------------------------------------------------------------------------- server


class _Abort(Exception):
    """Stop writing this response and drop the connection."""


class _Handler(FakeHandler):
    # -- dispatch

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
            body = None
        headers = {
            k.lower(): (REDACTED if k.lower() in _SECRET_HEADERS else v)
            for k, v in self.headers.items()
        }
        route = urlsplit(self.path).path.rstrip("/")
        base = RecordedRequest(self.command, self.path, headers, body)
        try:
            if self.command != "POST" or route not in (MESSAGES_PATH, COUNT_TOKENS_PATH):
                fake._record(base)
                msg = f"fake: no route for {self.command} {self.path}"
                self._send_json(404, HttpError(404, msg).body)
            elif not isinstance(body, dict):
                fake._record(base)
                self._send_json(400, HttpError(400, "fake: body must be a JSON object").body)
            elif route == COUNT_TOKENS_PATH:
                fake._record(base)
                self._send_json(200, {"input_tokens": _estimate_input_tokens(body)})
            else:
                self._messages(base, body)
        except _Abort:
            self._drop()

    def _messages(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        fake = self.server.fake
        human_text, k = _locate(base.messages)
        rule = fake._current_script().pick(human_text)
        step = rule.step(k)
        fake._record(replace(base, rule=rule.label, step=k))
        if step.drop_connection:
            raise _Abort
        if step.error is not None:
            extra = dict(step.error.headers)
            if step.error.should_retry is not None:
                extra["x-should-retry"] = "true" if step.error.should_retry else "false"
            self._send_json(step.error.status, step.error.body, extra)
            return
        msg_id = f"msg_fake{uuid.uuid4().hex[:20]}"
        model = str(body.get("model") or "claude-fake")
        blocks = [_with_id(b) for b in step.blocks]
        usage = {
            "input_tokens": step.input_tokens or _estimate_input_tokens(body),
            "output_tokens": step.output_tokens or _estimate_output_tokens(blocks),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        if body.get("stream"):
            _Stream(self, step, blocks, msg_id, model, usage).run()
        else:
            self._nonstreaming(step, blocks, msg_id, model, usage)

    def _nonstreaming(
        self, step: Step, blocks: list[Block], msg_id: str, model: str, usage: dict[str, int]
    ) -> None:
        if step.stall_after_first_delta_ms and not self._pause(step.stall_after_first_delta_ms):
            raise _Abort
        if step.sse_error is not None:
            err = HttpError(529, step.sse_error.message, step.sse_error.error_type)
            self._send_json(529, err.body)
            return
        self._send_json(
            200,
            {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [_full_block(b) for b in blocks],
                "stop_reason": step.effective_stop_reason,
                "stop_sequence": None,
                "usage": usage,
            },
        )

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

    def _send_json(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake{uuid.uuid4().hex[:20]}")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


class _Stream:
    """Writes one SSE response (chunked transfer encoding)."""

    def __init__(
        self,
        handler: _Handler,
        step: Step,
        blocks: list[Block],
        msg_id: str,
        model: str,
        usage: dict[str, int],
    ) -> None:
        self.h, self.step, self.blocks = handler, step, blocks
        self.msg_id, self.model, self.usage = msg_id, model, usage
        self.deltas_sent = 0

    def run(self) -> None:
        h, step = self.h, self.step
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("cache-control", "no-cache")
        h.send_header("request-id", f"req_fake{uuid.uuid4().hex[:20]}")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("connection", "close")
        h.end_headers()
        start_usage = {**self.usage, "output_tokens": 1}
        self.event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": self.msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        )
        self.event("ping", {"type": "ping"})
        for index, block in enumerate(self.blocks):
            if step.sse_error is not None and step.sse_error.after_blocks <= index:
                break
            self.block(index, block)
        if step.sse_error is not None:
            err = HttpError(0, step.sse_error.message, step.sse_error.error_type)
            self.event("error", err.body)
        else:
            self.event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": step.effective_stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": self.usage["output_tokens"]},
                },
            )
            self.event("message_stop", {"type": "message_stop"})
        h.wfile.write(b"0\r\n\r\n")

    def block(self, index: int, block: Block) -> None:
        start: dict[str, Any]
        deltas: list[dict[str, Any]]
        if isinstance(block, Text):
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in self.chunks(block.text)]
        elif isinstance(block, Thinking):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c} for c in self.chunks(block.thinking)
            ]
            deltas.append({"type": "signature_delta", "signature": block.signature})
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            raw = json.dumps(block.input)
            deltas = [{"type": "input_json_delta", "partial_json": c} for c in self.chunks(raw)]
        self.event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            if self.deltas_sent and not self.h._pause(self.step.delay_ms):
                raise _Abort
            self.event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            self.deltas_sent += 1
            if self.deltas_sent == 1:
                self.after_first_delta()
        self.event("content_block_stop", {"type": "content_block_stop", "index": index})

    def after_first_delta(self) -> None:
        if self.step.close_midstream:
            raise _Abort
        stall = self.step.stall_after_first_delta_ms
        if stall and not self.h._pause(stall):
            raise _Abort

    def chunks(self, text: str) -> Iterator[str]:
        size = self.step.chunk_size
        return (text[i : i + size] for i in range(0, len(text), size))

    def event(self, name: str, payload: dict[str, Any]) -> None:
        data = f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()
        self.h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


def _with_id(block: Block) -> Block:
    if isinstance(block, ToolUse) and block.id is None:
        return ToolUse(block.name, block.input, f"toolu_fake{uuid.uuid4().hex[:20]}")
    return block


def _full_block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _estimate_input_tokens(body: dict[str, Any]) -> int:
    prompt = [body.get("system"), body.get("messages"), body.get("tools")]
    return max(1, len(json.dumps(prompt)) // 4)


def _estimate_output_tokens(blocks: Sequence[Block]) -> int:
    size = sum(len(json.dumps(_full_block(b))) for b in blocks)
    return max(1, math.ceil(size / 4))


# --------------------------------------------------------------------------- public facade


class FakeAnthropic(FakeServer):
    """The fake server. Start with `start()` or ``with``; `url` goes into ANTHROPIC_BASE_URL.

    Accessors taking `i` index the model calls (`model_requests`, POST /v1/messages only);
    `requests` has everything (count_tokens, 404s, ...) in arrival order.
    """

    def __init__(
        self,
        *rules: Rule,
        default: Rule | Sequence[StepLike] | StepLike | None = None,
        max_lifetime: float = 15 * 60,
    ) -> None:
        super().__init__(_Handler, _make_script(rules, default), max_lifetime, "fake-anthropic")

    # -- scripting

    def set_script(
        self, *rules: Rule, default: Rule | Sequence[StepLike] | StepLike | None = None
    ) -> None:
        """Replace the whole script (thread-safe; requests in flight keep their old step)."""
        script = _make_script(rules, default)
        with self._lock:
            self._script = script

    # -- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.route == MESSAGES_PATH]

    def system_text(self, i: int = -1) -> str:
        return self.model_requests[i].system_text

    def messages(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].messages

    def last_user_text(self, i: int = -1) -> str:
        return self.model_requests[i].last_user_text

    def tool_results(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].tool_results

    def wait_for_requests(
        self, n: int, timeout: float = 10.0, *, route: str | None = MESSAGES_PATH
    ) -> list[RecordedRequest]:
        """Block until `n` requests to `route` (None: any) arrived; return them."""

        def matching() -> list[RecordedRequest]:
            return [r for r in self._requests if route is None or r.route == route]

        with self._lock:
            if not self._lock.wait_for(lambda: len(matching()) >= n, timeout):
                seen = [f"{r.method} {r.path}" for r in self._requests]
                raise TimeoutError(f"expected {n} requests to {route} within {timeout}s: {seen}")
            return matching()


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
