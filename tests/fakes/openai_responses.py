"""A scripted fake of the OpenAI Responses API for driving the real `codex` CLI offline.

Codex reaches it through a custom model provider (``wire_api = "responses"``); `codex_home`
writes that config and `codex_env` the matching environment::

    with FakeResponses(Rule("make it", [ExecCommand("touch x"), "Done."])) as fake:
        home = codex_home(tmp_path, fake.url)
        subprocess.run([codex, "exec", "--json", "--skip-git-repo-check", "-"],
                       input="make it", env=codex_env(home), ...)
        fake.function_outputs(1)  # what Codex sent back after running the command

Scripting (tests/fakes/_script.py): rules match the text of the latest *human* user message.
Codex also sends user-role messages of its own (``<environment_context>``, ``<turn_aborted>``,
AGENTS.md instructions); those are stripped and never count as human; developer messages never
do either. A rule's step k answers the k-th model call since that human message, where k is the
number of tool-output runs (``function_call_output``/``custom_tool_call_output`` ...) after it
(parallel calls in one answer count once). An `HttpError` step fails every retry too.

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
from typing import Any, TypeAlias
from urllib.parse import urlsplit

from ._base import REDACTED, FakeHandler, Pace, RecordedBase, pieces
from ._openai import HttpError, content_text, v1_url
from ._script import ScriptedFake, ScriptRule, Shorthands, StepBase, answer_failure, scripted_step

__all__ = [
    "ENV_KEY",
    "MODEL",
    "REDACTED",
    "ApplyPatch",
    "Block",
    "CustomToolCall",
    "ExecCommand",
    "FakeResponses",
    "FunctionCall",
    "HttpError",
    "Reasoning",
    "RecordedRequest",
    "ResponseFailed",
    "Rule",
    "Step",
    "StepLike",
    "Text",
    "codex_env",
    "codex_home",
]

RESPONSES_PATH = "/v1/responses"
MODELS_PATH = "/v1/models"
ENV_KEY = "FAKE_OPENAI_KEY"  # the provider's env_key: Codex sends it as a Bearer token
MODEL = "gpt-5.5"  # a bundled slug: unknown slugs add a warning item and change the tool set
# User-role messages Codex writes itself; they must not steer the script.
_INJECTED = re.compile(
    r"<environment_context>.*?</environment_context>"
    r"|<turn_aborted>.*?</turn_aborted>"
    r"|<user_instructions>.*?</user_instructions>"
    r"|# AGENTS\.md instructions for [^\n]*\s*<INSTRUCTIONS>.*?</INSTRUCTIONS>",
    re.DOTALL,
)

# --------------------------------------------------------------------------- script types


@dataclass(frozen=True)
class Text:
    """An assistant message, streamed as several ``response.output_text.delta``s."""

    text: str
    phase: str | None = None  # "commentary" | "final_answer"; None: no `phase` field


@dataclass(frozen=True)
class Reasoning:
    """A reasoning item with summary parts (``response.reasoning_summary_*`` events). Codex
    shows the summary as a `reasoning` item and sends the whole item back on the next call."""

    summary: str | Sequence[str]
    encrypted_content: str | None = "fake-encrypted-reasoning"

    @property
    def parts(self) -> tuple[str, ...]:
        return (self.summary,) if isinstance(self.summary, str) else tuple(self.summary)


@dataclass(frozen=True)
class FunctionCall:
    """A ``function_call`` item; `arguments` (JSON-encoded if a mapping) is streamed as
    ``response.function_call_arguments.delta`` chunks."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None  # None: a fresh ``call_…`` id per response
    #: The tool's namespace: Codex offers a server's MCP tools as namespace ``mcp__<server>``
    #: holding each tool by its own name.
    namespace: str | None = None

    @property
    def arguments_json(self) -> str:
        args = self.arguments
        return args if isinstance(args, str) else json.dumps(dict(args))


@dataclass(frozen=True)
class CustomToolCall:
    """A ``custom_tool_call`` item (a freeform tool such as Codex's `apply_patch`); `input` is
    streamed as ``response.custom_tool_call_input.delta`` chunks."""

    name: str
    input: str
    call_id: str | None = None


@dataclass(frozen=True)
class ExecCommand:
    """Codex's shell tool: a ``function_call`` to `exec_command`. Under read-only + on-request,
    ``sandbox_permissions="require_escalated"`` makes Codex ask for approval, with
    `justification` as the reason shown."""

    cmd: str
    workdir: str | None = None
    sandbox_permissions: str | None = None  # "use_default" | "require_escalated"
    justification: str | None = None
    login: bool | None = None  # None: Codex's default, a login shell (``bash -lc``)
    yield_time_ms: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # other exec_command arguments
    call_id: str | None = None

    def call(self) -> FunctionCall:
        args: dict[str, Any] = {"cmd": self.cmd}
        optional = {
            "workdir": self.workdir,
            "sandbox_permissions": self.sandbox_permissions,
            "justification": self.justification,
            "login": self.login,
            "yield_time_ms": self.yield_time_ms,
        }
        args.update({k: v for k, v in optional.items() if v is not None})
        args.update(self.extra)
        return FunctionCall("exec_command", args, self.call_id)


@dataclass(frozen=True)
class ApplyPatch:
    """A patch that adds file `path` (relative to the turn cwd) with `content`; Codex reports it
    as a `file_change` item. The file always ends with a newline.

    ``via="custom"`` (default) sends what real models send: a ``custom_tool_call`` to the
    freeform `apply_patch` tool. ``via="exec"`` sends an `exec_command` whose cmd is
    ``apply_patch <<'EOF' ...``, which Codex intercepts and also turns into a file change."""

    path: str
    content: str
    via: str = "custom"  # "custom" | "exec"
    call_id: str | None = None

    def __post_init__(self) -> None:
        if self.via not in ("custom", "exec"):
            raise ValueError("ApplyPatch.via must be 'custom' or 'exec'")

    @property
    def patch(self) -> str:
        lines = "".join(f"+{line}\n" for line in self.content.splitlines())
        return f"*** Begin Patch\n*** Add File: {self.path}\n{lines}*** End Patch\n"

    def call(self) -> FunctionCall | CustomToolCall:
        if self.via == "custom":
            return CustomToolCall("apply_patch", self.patch, self.call_id)
        # Every patch line starts with "+" or "***", so none can end the heredoc early.
        return ExecCommand(f"apply_patch <<'EOF'\n{self.patch}EOF\n", call_id=self.call_id).call()


Block: TypeAlias = Text | Reasoning | FunctionCall | CustomToolCall | ExecCommand | ApplyPatch
_Wire: TypeAlias = Text | Reasoning | FunctionCall | CustomToolCall  # what is actually streamed


@dataclass(frozen=True)
class ResponseFailed:
    """A ``response.failed`` event after `after_items` complete output items, ending the
    stream. Codex 0.169 retries it (stream retries) and then fails the turn with "stream
    disconnected before completion: <message>"; but ``context_length_exceeded`` and
    ``insufficient_quota`` fail at once with Codex's own texts."""

    message: str = "fake response.failed"
    code: str = "server_error"
    after_items: int = 0


@dataclass(frozen=True)
class Step(StepBase):
    """One model answer (pacing and failures: `StepBase`).

    `stall_after_first_delta_ms` sends the first delta, then stalls (interrupt tests; shutdown
    cuts the stall short). `close_before_completed` sends every item, then ends the body
    cleanly without ``response.completed``.
    """

    items: Sequence[Block] = ()
    stall_after_first_delta_ms: int = 0
    error: HttpError | None = None
    failed: ResponseFailed | None = None
    close_before_completed: bool = False
    input_tokens: int | None = None  # None: ~len(input JSON) / 4
    output_tokens: int | None = None  # None: ~len(output) / 4

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "items", tuple(self.items))


StepLike: TypeAlias = Step | HttpError | Block | str | Sequence[Block]
_BLOCK_TYPES = (Text, Reasoning, FunctionCall, CustomToolCall, ExecCommand, ApplyPatch)


#: Normalises the shorthands accepted in `Rule.steps` into a `Step`.
as_step = Shorthands(Step, Text, _BLOCK_TYPES, HttpError)


class Rule(ScriptRule[Step]):
    __doc__ = ScriptRule.__doc__
    shorthands = as_step


# --------------------------------------------------------------------------- conversation helpers


def _text(item: Mapping[str, Any]) -> str:
    """Text parts of a message item, joined by newlines."""
    return content_text(item.get("content"))


def _is_message(item: Mapping[str, Any], role: str) -> bool:
    return item.get("role") == role and item.get("type", "message") == "message"


def _human_text(item: Mapping[str, Any]) -> str | None:
    """The text a person typed, or None if `item` is not a human user message."""
    if not _is_message(item, "user"):
        return None
    text = _INJECTED.sub("", _text(item)).strip()
    content = item.get("content")
    has_image = isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "input_image" for p in content
    )
    return text if text or has_image else None


def _is_output(item: Mapping[str, Any]) -> bool:
    return str(item.get("type", "")).endswith("_output")  # function_call_output and kin


def _locate(items: list[dict[str, Any]]) -> tuple[str, int]:
    """(latest human text, model calls since it). Each run of tool outputs after the human
    message ends one model call that asked for tools."""
    human, text = -1, ""
    for i in range(len(items) - 1, -1, -1):
        found = _human_text(items[i])
        if found is not None:
            human, text = i, found
            break
    k, in_run = 0, False
    for item in items[human + 1 :]:
        out = _is_output(item)
        if out and not in_run:
            k += 1
        in_run = out
    return text, k


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest(RecordedBase):
    """One request as the fake saw it (secret header values redacted)."""

    @property
    def input(self) -> list[dict[str, Any]]:
        """The request's ``input`` items: the whole conversation (Codex re-sends it)."""
        return self.body_list("input")

    def locate(self) -> tuple[str, int]:
        return _locate(self.input)

    @property
    def developer_text(self) -> str:
        """Text of all developer messages (base instructions, developer_instructions, ...)."""
        return "\n".join(_text(i) for i in self.input if _is_message(i, "developer"))

    @property
    def user_texts(self) -> list[str]:
        """Raw text of every user message, Codex's own context messages included."""
        return [_text(i) for i in self.input if _is_message(i, "user")]

    @property
    def function_outputs(self) -> list[dict[str, Any]]:
        """Tool-output items (``function_call_output``, ``custom_tool_call_output``, ...) of
        the whole input, oldest first."""
        return [i for i in self.input if _is_output(i)]


# --------------------------------------------------------------------------- server


class _Handler(FakeHandler):
    secret_headers = frozenset({"authorization", "api-key", "openai-api-key"})
    http_error = HttpError

    def answer(self, headers: dict[str, str], body: Any) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        base = RecordedRequest(self.command, self.path, headers, body)
        if self.command == "GET" and route == MODELS_PATH:
            self.server.fake._record(base)
            # OpenAI's list shape plus the `models` key of Codex's own /models endpoint,
            # so either parser sees an empty catalog rather than an error.
            self._send_json(200, {"object": "list", "data": [], "models": []})
        elif not self._refused(base, body, self.command == "POST" and route == RESPONSES_PATH):
            self._respond(base, body)

    def _respond(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        step: Step = scripted_step(self, base)
        if answer_failure(self, step):
            return
        if body.get("stream") is False:
            msg = "fake: only streaming (stream: true) is implemented"
            self._send_json(400, HttpError(400, msg).body)
            return
        _Stream(self, step, body).run()


def _wire(block: Block) -> _Wire:
    """The streamed form of `block`, with fresh call ids where none were given."""
    if isinstance(block, ExecCommand | ApplyPatch):
        block = block.call()
    if isinstance(block, FunctionCall | CustomToolCall) and block.call_id is None:
        block = replace(block, call_id=f"call_fake{uuid.uuid4().hex[:20]}")
    return block


def _item_id(block: _Wire) -> str:
    prefix = {Text: "msg", Reasoning: "rs", FunctionCall: "fc", CustomToolCall: "ctc"}
    return f"{prefix[type(block)]}_fake{uuid.uuid4().hex[:20]}"


def _item(block: _Wire, item_id: str, *, done: bool) -> dict[str, Any]:
    """The output item as in ``output_item.added`` (done=False) or ``.done`` (done=True)."""
    status = "completed" if done else "in_progress"
    item: dict[str, Any]
    if isinstance(block, Text):
        content = [{"type": "output_text", "text": block.text, "annotations": []}]
        item = {"id": item_id, "type": "message", "status": status, "role": "assistant"}
        item["content"] = content if done else []
        if block.phase is not None:
            item["phase"] = block.phase
        return item
    if isinstance(block, Reasoning):
        summary = [{"type": "summary_text", "text": t} for t in block.parts] if done else []
        item = {"id": item_id, "type": "reasoning", "summary": summary}
        if done and block.encrypted_content is not None:
            item["encrypted_content"] = block.encrypted_content
        return item
    if isinstance(block, FunctionCall):
        item = {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "name": block.name,
            "call_id": block.call_id,
            "arguments": block.arguments_json if done else "",
        }
        if block.namespace is not None:
            item["namespace"] = block.namespace
        return item
    return {
        "id": item_id,
        "type": "custom_tool_call",
        "status": status,
        "name": block.name,
        "call_id": block.call_id,
        "input": block.input if done else "",
    }


class _Stream:
    """Writes one SSE response (chunked transfer encoding)."""

    def __init__(self, handler: _Handler, step: Step, body: dict[str, Any]) -> None:
        self.h, self.step = handler, step
        self.blocks = [_wire(b) for b in step.items]
        self.model = str(body.get("model") or MODEL)
        self.response_id = f"resp_fake{uuid.uuid4().hex[:20]}"
        self.created_at = int(time.time())
        self.input_tokens = step.input_tokens or max(1, len(json.dumps(body.get("input"))) // 4)
        self.sequence = 0
        self.pace = Pace(
            handler, step.delay_ms, step.close_midstream, step.stall_after_first_delta_ms
        )
        self.done_items: list[dict[str, Any]] = []

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "model": self.model,
            "output": list(self.done_items),
            "usage": None,
            "error": None,
            "incomplete_details": None,
            **extra,
        }

    def usage(self) -> dict[str, Any]:
        size = sum(len(json.dumps(i)) for i in self.done_items)
        output = self.step.output_tokens or max(1, math.ceil(size / 4))
        return {
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self.input_tokens + output,
        }

    def run(self) -> None:
        h, step = self.h, self.step
        h._start_stream()
        self.event("response.created", {"response": self.response("in_progress")})
        self.event("response.in_progress", {"response": self.response("in_progress")})
        for index, block in enumerate(self.blocks):
            if step.failed is not None and step.failed.after_items <= index:
                break
            self.item(index, block)
        if step.failed is not None:
            error = {"code": step.failed.code, "message": step.failed.message}
            self.event("response.failed", {"response": self.response("failed", error=error)})
        elif not step.close_before_completed:
            completed = self.response("completed", usage=self.usage())
            self.event("response.completed", {"response": completed})
        h._end_stream()

    def item(self, index: int, block: _Wire) -> None:
        item_id = _item_id(block)
        at = {"item_id": item_id, "output_index": index}
        self.event(
            "response.output_item.added",
            {"output_index": index, "item": _item(block, item_id, done=False)},
        )
        if isinstance(block, Text):
            part = {"type": "output_text", "text": "", "annotations": []}
            self.event("response.content_part.added", {**at, "content_index": 0, "part": part})
            for chunk in self.chunks(block.text):
                self.delta(
                    "response.output_text.delta",
                    {**at, "content_index": 0, "delta": chunk, "logprobs": []},
                )
            self.event(
                "response.output_text.done",
                {**at, "content_index": 0, "text": block.text, "logprobs": []},
            )
            part = {**part, "text": block.text}
            self.event("response.content_part.done", {**at, "content_index": 0, "part": part})
        elif isinstance(block, Reasoning):
            for n, text in enumerate(block.parts):
                part = {"type": "summary_text", "text": ""}
                where = {**at, "summary_index": n}
                self.event("response.reasoning_summary_part.added", {**where, "part": part})
                for chunk in self.chunks(text):
                    self.delta("response.reasoning_summary_text.delta", {**where, "delta": chunk})
                self.event("response.reasoning_summary_text.done", {**where, "text": text})
                part = {**part, "text": text}
                self.event("response.reasoning_summary_part.done", {**where, "part": part})
        elif isinstance(block, FunctionCall):
            args = block.arguments_json
            for chunk in self.chunks(args):
                self.delta("response.function_call_arguments.delta", {**at, "delta": chunk})
            self.event(
                "response.function_call_arguments.done",
                {**at, "name": block.name, "arguments": args},
            )
        else:
            for chunk in self.chunks(block.input):
                self.delta("response.custom_tool_call_input.delta", {**at, "delta": chunk})
            self.event("response.custom_tool_call_input.done", {**at, "input": block.input})
        done = _item(block, item_id, done=True)
        self.done_items.append(done)
        self.event("response.output_item.done", {"output_index": index, "item": done})

    def delta(self, name: str, payload: dict[str, Any]) -> None:
        self.pace.send(self.event, name, payload)

    def chunks(self, text: str) -> Iterator[str]:
        return pieces(text, self.step.chunk_size)

    def event(self, name: str, payload: dict[str, Any]) -> None:
        full = {"type": name, "sequence_number": self.sequence, **payload}
        self.sequence += 1
        self.h._write_chunk(f"event: {name}\ndata: {json.dumps(full)}\n\n".encode())


# --------------------------------------------------------------------------- public facade


class FakeResponses(ScriptedFake[Rule, RecordedRequest]):
    """The fake server. Start with `start()` or ``with``; `url` is the root (`base_url` adds
    ``/v1``, what a Codex provider's ``base_url`` needs; `codex_home` takes either).

    Accessors taking `i` index the model calls (`model_requests`, POST /v1/responses only);
    `requests` has everything (GET /v1/models, 404s, ...) in arrival order.
    """

    rule_type = Rule
    default_answer = "Hello from the fake OpenAI Responses API."
    handler_type = _Handler
    label = "fake-openai-responses"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def model_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and r.route == RESPONSES_PATH]

    def input(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].input

    def developer_text(self, i: int = -1) -> str:
        return self.model_requests[i].developer_text

    def user_texts(self, i: int = -1) -> list[str]:
        return self.model_requests[i].user_texts

    def function_outputs(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].function_outputs

    def wait_for_requests(
        self, n: int, timeout: float = 10.0, *, route: str | None = RESPONSES_PATH
    ) -> list[RecordedRequest]:
        """Block until `n` requests to `route` (None: any) arrived; return them."""

        def match(r: RecordedRequest) -> bool:
            return route is None or r.route == route

        return self._wait_for(n, timeout, match, f"requests to {route}")


# --------------------------------------------------------------------------- Codex set-up


def codex_home(
    tmp_dir: Path, fake_url: str, *, retries: int = 0, model: str = MODEL, name: str = "codex_home"
) -> Path:
    """Create ``tmp_dir/name`` as a fresh CODEX_HOME whose config.toml sends everything to the
    fake (`fake_url`: `FakeResponses.url` or `.base_url`) and contacts nothing else.

    `retries` bounds both request and stream retries (Codex's defaults, 4 and 5, turn one HTTP
    500 into 30 requests and ~25 s). `unbounded_connection_retries` is off because it would
    otherwise retry an unreachable fake (a closed one) forever."""
    base_url = v1_url(fake_url)
    home = tmp_dir / name
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"""\
model = {json.dumps(model)}
model_provider = "mock"

[model_providers.mock]
name = "Fake OpenAI Responses API"
base_url = {json.dumps(base_url)}
env_key = "{ENV_KEY}"
wire_api = "responses"
request_max_retries = {int(retries)}
stream_max_retries = {int(retries)}

# No lookups of the analytics host.
[analytics]
enabled = false

# plugins: no git ls-remote of the plugin marketplace, no github.com/chatgpt.com lookups.
[features]
plugins = false
unbounded_connection_retries = false
"""
    )
    return home


def codex_env(
    home: Path, *, scratch_home: Path | None = None, key: str = "fake-openai-key"
) -> dict[str, str]:
    """A minimal environment for running codex against `home` (from `codex_home`): CODEX_HOME,
    the provider key, and a scratch HOME (default: a ``home`` dir next to CODEX_HOME) so login
    shells and Codex's shell snapshot never read the user's rc files. Only PATH is inherited
    (the npm wrapper needs node; the shell tool needs the usual binaries)."""
    scratch = scratch_home if scratch_home is not None else home.parent / "home"
    scratch.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": str(scratch),
        "CODEX_HOME": str(home),
        ENV_KEY: key,
    }
