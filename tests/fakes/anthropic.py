"""A scripted fake of the Anthropic Messages API for driving the real `claude` CLI offline.

Point the CLI at it with ``ANTHROPIC_BASE_URL=fake.url`` and any ``ANTHROPIC_API_KEY``::

    with FakeAnthropic(Rule("list files", [ToolUse("Bash", {"command": "ls"}), "Listed."])) as fake:
        ...  # run claude; then inspect fake.requests / fake.tool_results(1)

Scripting (tests/fakes/_script.py): rules match the text of the latest *human* user message
(``<system-reminder>`` blocks stripped); a rule's step k answers the k-th model call since that
human message, k = assistant messages after it.

Only stdlib; binds 127.0.0.1; serves from a background thread so it works next to trio tests and
subprocesses; closes itself after ``max_lifetime`` seconds so nothing can linger.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from ._base import REDACTED, Abort, FakeHandler, Pace, RecordedBase, pieces
from ._script import ScriptedFake, ScriptRule, Shorthands, StepBase, answer_failure, scripted_step

__all__ = [
    "REDACTED",
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
class Step(StepBase):
    """One model answer (pacing and failures: `StepBase`).

    `stall_after_first_delta_ms` sends the first delta, then stalls (interrupt tests; shutdown
    cuts the stall short). For non-streaming requests: stall delays the answer,
    `close_midstream` is ignored (there is no first delta; and the CLI's non-streaming retry
    after a dropped stream then succeeds) and `sse_error` becomes an HTTP 529
    ``overloaded_error``.
    """

    blocks: Sequence[Block] = ()
    stall_after_first_delta_ms: int = 0
    error: HttpError | None = None
    sse_error: SseError | None = None
    stop_reason: str | None = None  # None: "tool_use" if any ToolUse else "end_turn"
    input_tokens: int | None = None  # None: ~len(request JSON) / 4
    output_tokens: int | None = None  # None: ~len(output) / 4

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "blocks", tuple(self.blocks))

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


StepLike: TypeAlias = Step | HttpError | Text | Thinking | ToolUse | str | Sequence[Block]


#: Normalises the shorthands accepted in `Rule.steps` into a `Step`.
as_step = Shorthands(Step, Text, (Text, Thinking, ToolUse), HttpError)


class Rule(ScriptRule[Step]):
    __doc__ = ScriptRule.__doc__
    shorthands = as_step


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
class RecordedRequest(RecordedBase):
    """One request as the fake saw it (secret header values redacted; `path` is e.g.
    "/v1/messages?beta=true")."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body_list("messages")

    def locate(self) -> tuple[str, int]:
        return _locate(self.messages)

    @property
    def system_text(self) -> str:
        return _system_text(self.body.get("system")) if isinstance(self.body, dict) else ""

    @property
    def last_user_text(self) -> str:
        """Text of the latest user message (reminders stripped; "" for tool_results only)."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return _user_text(users[-1]) if users else ""

    @property
    def user_texts(self) -> list[str]:
        """Every text block of the user messages, in order (reminders left in)."""
        return [
            b.get("text", "")
            for m in self.messages
            if m.get("role") == "user"
            for b in _blocks(m)
            if b.get("type") == "text"
        ]

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        """tool_result blocks of the latest user message."""
        users = [m for m in self.messages if m.get("role") == "user"]
        return [b for b in _blocks(users[-1]) if b.get("type") == "tool_result"] if users else []


# --------------------------------------------------------------------------- server


class _Handler(FakeHandler):
    secret_headers = frozenset({"x-api-key", "authorization"})
    request_id_header = "request-id"
    http_error = HttpError

    def answer(self, headers: dict[str, str], body: Any) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        base = RecordedRequest(self.command, self.path, headers, body)
        routed = self.command == "POST" and route in (MESSAGES_PATH, COUNT_TOKENS_PATH)
        if self._refused(base, body, routed):
            return
        if route == COUNT_TOKENS_PATH:
            self.server.fake._record(base)
            self._send_json(200, {"input_tokens": _estimate_input_tokens(body)})
        else:
            self._messages(base, body)

    def _messages(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        step: Step = scripted_step(self, base)
        extra = dict(step.error.headers) if step.error is not None else {}
        if step.error is not None and step.error.should_retry is not None:
            extra["x-should-retry"] = "true" if step.error.should_retry else "false"
        if answer_failure(self, step, extra):
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
            raise Abort
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
        self.pace = Pace(
            handler, step.delay_ms, step.close_midstream, step.stall_after_first_delta_ms
        )

    def run(self) -> None:
        h, step = self.h, self.step
        h._start_stream()
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
        h._end_stream()

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
            payload = {"type": "content_block_delta", "index": index, "delta": delta}
            self.pace.send(self.event, "content_block_delta", payload)
        self.event("content_block_stop", {"type": "content_block_stop", "index": index})

    def chunks(self, text: str) -> Iterator[str]:
        return pieces(text, self.step.chunk_size)

    def event(self, name: str, payload: dict[str, Any]) -> None:
        self.h._write_chunk(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())


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


class FakeAnthropic(ScriptedFake[Rule, RecordedRequest]):
    """The fake server. Start with `start()` or ``with``; `url` goes into ANTHROPIC_BASE_URL.

    Accessors taking `i` index the model calls (`model_requests`, POST /v1/messages only);
    `requests` has everything (count_tokens, 404s, ...) in arrival order.
    """

    rule_type = Rule
    default_answer = "Hello from the fake Anthropic API."
    handler_type = _Handler
    label = "fake-anthropic"

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

        def match(r: RecordedRequest) -> bool:
            return route is None or r.route == route

        return self._wait_for(n, timeout, match, f"requests to {route}")
