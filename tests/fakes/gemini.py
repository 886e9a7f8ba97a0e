"""A scripted fake of the Gemini API (v1beta) for driving the real `gemini` CLI offline.

`gemini_home` writes a fresh HOME whose settings select API-key auth and contact nothing else;
`gemini_env` is the matching environment (``GOOGLE_GEMINI_BASE_URL`` points at the fake)::

    with FakeGemini(Rule("make it", [ShellCommand("touch x"), "Done."])) as fake:
        home = gemini_home(tmp_path, fake.url)
        # The prompt goes on stdin: the CLI prepends piped stdin to the (empty) -p text.
        subprocess.run([gemini, "-p", "", "-o", "stream-json", "-m", MODEL, "-y"],
                       input="make it", env=gemini_env(home, fake.url), cwd=work, ...)
        fake.function_responses(1)  # what the CLI sent back after running the command

Routes: ``POST /v1beta/models/{model}:streamGenerateContent`` (SSE; the CLI always adds
``?alt=sse``) carries every turn of the agent loop: these are the *model calls* the script
answers. ``:generateContent`` (non-streaming) is only used by the CLI's side calls (the `auto`
model router, session titles, next-speaker / loop checks, history summaries, edit
correction, ...); they get a fixed, harmless answer from `side_answer` and never consume
or see the script. ``:countTokens``, ``GET /v1beta/models[/{model}]`` are served too;
anything else gets Google's 404 ``NOT_FOUND`` error body.

Scripting (tests/fakes/_script.py): rules match the text of the latest *human* user content.
The CLI's own parts (``<session_context>``, ``<hook_context>``, the ``Please continue.``
continuation) are not human text, nor is a content carrying ``functionResponse`` parts. A
rule's step k answers the k-th model call since that human content, where k is the number of
function-response contents after it. An `HttpError` step fails every attempt.

Only stdlib; binds 127.0.0.1; serves from a background thread so it works next to trio tests and
subprocesses; closes itself after ``max_lifetime`` seconds so nothing can linger.
"""

from __future__ import annotations

import json
import math
import os
import re
import select
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeAlias, cast

from ._base import REDACTED, FakeHandler, Pace, RecordedBase, pieces
from ._script import ScriptedFake, ScriptRule, Shorthands, StepBase, answer_failure, scripted_step

__all__ = [
    "API_KEY",
    "MODEL",
    "REDACTED",
    "Block",
    "FakeGemini",
    "FunctionCall",
    "HttpError",
    "RecordedRequest",
    "Replace",
    "Rule",
    "ShellCommand",
    "Step",
    "StepLike",
    "Text",
    "Thought",
    "WriteFile",
    "gemini_env",
    "gemini_home",
    "side_answer",
]

MODEL = "gemini-2.5-flash"  # a known model: pass it with -m so the CLI skips its router call
API_KEY = "fake-gemini-key"
_MODEL_ROUTE = re.compile(r"^/(v1beta|v1alpha|v1)/models/([^/:]+):([A-Za-z]+)$")
_MODELS_ROUTE = re.compile(r"^/(v1beta|v1alpha|v1)/models(?:/([^/:]+))?$")
_RPCS = ("streamGenerateContent", "generateContent", "countTokens")
# Text parts the CLI writes itself (it skips the same prefixes when rebuilding history).
_INJECTED_PREFIXES = ("<session_context>", "<hook_context>")
_CONTINUATION = "Please continue."  # sent by the next-speaker check and the history hardener

# google.rpc status names and the API's usual messages per HTTP status.
_STATUS = {
    400: ("INVALID_ARGUMENT", "Request contains an invalid argument."),
    401: ("UNAUTHENTICATED", "API key not valid. Please pass a valid API key."),
    403: ("PERMISSION_DENIED", "The caller does not have permission"),
    404: ("NOT_FOUND", "Requested entity was not found."),
    429: ("RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota)."),
    500: ("INTERNAL", "Internal error encountered."),
    503: ("UNAVAILABLE", "The model is overloaded. Please try again later."),
    504: ("DEADLINE_EXCEEDED", "Deadline expired before operation could complete."),
}


# --------------------------------------------------------------------------- script types


@dataclass(frozen=True)
class Text:
    """A text part, streamed as several SSE events of `Step.chunk_size` characters."""

    text: str


@dataclass(frozen=True)
class Thought:
    """A thought part (``thought: true``), sent whole in one event: the CLI parses a leading
    ``**Subject**`` per part, so splitting it would garble the subject. Real models write
    ``**Subject**\\n\\ndescription``. Headless stream-json drops thoughts; ACP shows them."""

    text: str


@dataclass(frozen=True)
class FunctionCall:
    """A ``functionCall`` part, sent whole in one event. Without an `id` the CLI makes up its
    own call id (``<name>__<name>_<epoch ms>_<n>``)."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def part(self) -> dict[str, Any]:
        call: dict[str, Any] = {"name": self.name, "args": dict(self.args)}
        if self.id is not None:
            call["id"] = self.id
        return {"functionCall": call}


def _drop_none(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if v is not None}


@dataclass(frozen=True)
class ShellCommand:
    """The CLI's shell tool (``run_shell_command``). Offered to the model only under yolo, an
    allow-list or a policy (headless), or run after ``session/request_permission`` (ACP)."""

    command: str
    description: str | None = None
    dir_path: str | None = None  # relative to the workspace; None: the cwd
    is_background: bool | None = None
    id: str | None = None

    def call(self) -> FunctionCall:
        args = {
            "command": self.command,
            "description": self.description,
            "dir_path": self.dir_path,
            "is_background": self.is_background,
        }
        return FunctionCall("run_shell_command", _drop_none(args), self.id)


@dataclass(frozen=True)
class WriteFile:
    """``write_file``: create or overwrite `file_path` (relative to the cwd, or absolute)."""

    file_path: str
    content: str
    id: str | None = None

    def call(self) -> FunctionCall:
        return FunctionCall(
            "write_file", {"file_path": self.file_path, "content": self.content}, self.id
        )


@dataclass(frozen=True)
class Replace:
    """``replace``: swap `old_string` for `new_string` in `file_path` (exactly one match
    unless `allow_multiple`). The CLI requires `instruction`."""

    file_path: str
    old_string: str
    new_string: str
    instruction: str = "Apply the scripted edit."
    allow_multiple: bool | None = None
    id: str | None = None

    def call(self) -> FunctionCall:
        args = {
            "file_path": self.file_path,
            "instruction": self.instruction,
            "old_string": self.old_string,
            "new_string": self.new_string,
            "allow_multiple": self.allow_multiple,
        }
        return FunctionCall("replace", _drop_none(args), self.id)


Block: TypeAlias = Text | Thought | FunctionCall | ShellCommand | WriteFile | Replace
_BLOCK_TYPES = (Text, Thought, FunctionCall, ShellCommand, WriteFile, Replace)


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error and Google's error body
    (``{"error": {"code", "message", "status"}}``). The CLI retries 429/5xx up to
    ``general.maxAttempts`` times, not 400/401/403; headless json/stream-json then exits with
    ``status & 0xFF`` (401: 145, 403: 147, 500: 244) and ACP fails the prompt with
    JSON-RPC error code = status."""

    status: int
    message: str | None = None  # None: the API's usual text for `status`
    status_name: str | None = None  # None: the google.rpc code for `status`
    details: Sequence[Mapping[str, Any]] = ()
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        name, text = _STATUS.get(self.status, ("UNKNOWN", "Unknown error."))
        error: dict[str, Any] = {
            "code": self.status,
            "message": self.message if self.message is not None else text,
            "status": self.status_name or name,
        }
        if self.details:
            error["details"] = [dict(d) for d in self.details]
        return {"error": error}


@dataclass(frozen=True)
class Step(StepBase):
    """One model answer (pacing and failures: `StepBase`; an SSE event is a delta here).

    Text parts are split into `chunk_size`-character SSE events; thoughts and function calls
    take one event each; the last event carries `finish_reason` and ``usageMetadata``.
    `stall_after_first_chunk_ms` sends the first event, then stalls (interrupt tests; a client
    hang-up or the fake's shutdown cuts it short). ``finish_reason=None`` ends the stream
    cleanly without one. CLI 0.61.0 treats both cut-short streams alike: an `error` event
    "Model stream ended without a finish reason.", an error `result`, exit code 0; with
    ``maxAttempts`` > 1 it first retries, re-emitting the text already streamed as new deltas.
    """

    parts: Sequence[Block | str] = ()  # a str is a Text
    stall_after_first_chunk_ms: int = 0
    error: HttpError | None = None
    finish_reason: str | None = "STOP"  # Gemini says STOP after function calls too
    prompt_tokens: int | None = None  # None: ~len(request JSON) / 4
    output_tokens: int | None = None  # None: ~len(text and calls) / 4

    def __post_init__(self) -> None:
        super().__post_init__()
        parts = tuple(Text(p) if isinstance(p, str) else p for p in self.parts)
        object.__setattr__(self, "parts", parts)


StepLike: TypeAlias = Step | HttpError | Block | str | Sequence[Block | str]


#: Normalises the shorthands accepted in `Rule.steps` into a `Step`.
as_step = Shorthands(Step, Text, _BLOCK_TYPES, HttpError)


class Rule(ScriptRule[Step]):
    __doc__ = ScriptRule.__doc__
    shorthands = as_step


# --------------------------------------------------------------------------- conversation helpers


def _parts(content: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [p for p in content.get("parts") or () if isinstance(p, dict)]


def _texts(content: Mapping[str, Any]) -> list[str]:
    """Text parts that are not thoughts."""
    return [str(p["text"]) for p in _parts(content) if "text" in p and not p.get("thought")]


def _is_tool_response(content: Mapping[str, Any]) -> bool:
    return any("functionResponse" in p for p in _parts(content))


def _human_text(content: Mapping[str, Any]) -> str | None:
    """What a person wrote, or None if `content` is not a human user content."""
    if content.get("role", "user") != "user" or _is_tool_response(content):
        return None
    texts = [t for t in _texts(content) if not t.lstrip().startswith(_INJECTED_PREFIXES)]
    text = "\n".join(texts).strip()
    if text == _CONTINUATION:
        return None
    has_media = any("inlineData" in p or "fileData" in p for p in _parts(content))
    return text if text or has_media else None


def _locate(contents: list[dict[str, Any]]) -> tuple[str, int]:
    """(latest human text, model calls since it = function-response contents after it)."""
    human, text = -1, ""
    for i in range(len(contents) - 1, -1, -1):
        found = _human_text(contents[i])
        if found is not None:
            human, text = i, found
            break
    return text, sum(1 for c in contents[human + 1 :] if _is_tool_response(c))


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    if isinstance(system, dict):
        return "\n".join(_texts(system))
    return ""


# --------------------------------------------------------------------------- side calls


def _fill_schema(schema: Mapping[str, Any], name: str = "") -> Any:
    """A small value satisfying a JSON schema (both `responseJsonSchema` and the API's own
    upper-case `responseSchema` types)."""
    kind = str(schema.get("type", "object")).lower()
    if name == "next_speaker":
        return "user"  # the CLI's next-speaker check: let the user speak, end the turn
    if name == "complexity_score":
        return 1  # the `auto` router wants 1..100 (not in its schema); 1 picks the flash model
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _fill_schema(v, k) for k, v in props.items() if isinstance(v, Mapping)}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        return int(low) if kind == "integer" else low
    if kind == "boolean":
        return False
    return f"fake {name}".strip() if name else "fake"


def side_answer(body: Mapping[str, Any]) -> str:
    """The text answering a non-streaming ``generateContent`` side call: JSON built from the
    requested schema for JSON calls (router: complexity_score 1, the flash model; next
    speaker: "user"; loop check: confidence 0), else a short fixed text (session titles,
    summaries)."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        schema = config.get("responseJsonSchema") or config.get("responseSchema") or {}
        return json.dumps(_fill_schema(schema if isinstance(schema, Mapping) else {}))
    return "Fake summary."


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest(RecordedBase):
    """One request as the fake saw it (secret header and query values redacted; `path` is
    e.g. "/v1beta/models/m:streamGenerateContent?alt=sse")."""

    kind: str = "other"  # "model" | "side" | "count_tokens" | "models" | "other"

    @property
    def model(self) -> str | None:
        """The model named in the URL (the body has none)."""
        match = _MODEL_ROUTE.match(self.route) or _MODELS_ROUTE.match(self.route)
        return match.group(2) if match else None

    @property
    def rpc(self) -> str | None:
        """``streamGenerateContent``, ``generateContent``, ``countTokens``, ..."""
        match = _MODEL_ROUTE.match(self.route)
        return match.group(3) if match else None

    @property
    def contents(self) -> list[dict[str, Any]]:
        """The whole conversation (the CLI re-sends it on every call)."""
        return self.body_list("contents")

    def locate(self) -> tuple[str, int]:
        return _locate(self.contents)

    @property
    def system_text(self) -> str:
        return (
            _system_text(self.body.get("systemInstruction")) if isinstance(self.body, dict) else ""
        )

    @property
    def generation_config(self) -> dict[str, Any]:
        config = self.body.get("generationConfig") if isinstance(self.body, dict) else None
        return config if isinstance(config, dict) else {}

    @property
    def tool_names(self) -> list[str]:
        """Names of the function declarations offered to the model."""
        if not isinstance(self.body, dict):
            return []
        return [
            str(d.get("name"))
            for tool in self.body.get("tools") or ()
            if isinstance(tool, dict)
            for d in tool.get("functionDeclarations") or ()
            if isinstance(d, dict)
        ]

    @property
    def user_texts(self) -> list[str]:
        """Every text part of every user content, the CLI's own (``<session_context>``...)
        included; function responses are not text."""
        return [t for c in self.contents if c.get("role", "user") == "user" for t in _texts(c)]

    @property
    def function_responses(self) -> list[dict[str, Any]]:
        """``functionResponse`` values (``{id, name, response}``) of the whole conversation,
        oldest first."""
        return [
            p["functionResponse"]
            for c in self.contents
            for p in _parts(c)
            if isinstance(p.get("functionResponse"), dict)
        ]

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        """``functionCall`` values of the model contents, oldest first."""
        return [
            p["functionCall"]
            for c in self.contents
            if c.get("role") == "model"
            for p in _parts(c)
            if isinstance(p.get("functionCall"), dict)
        ]


# --------------------------------------------------------------------------- server


def _redact_path(path: str) -> str:
    # The SDK sends the key as a header, but the API also accepts ?key=...; never record it.
    return re.sub(r"([?&]key=)[^&]*", rf"\g<1>{REDACTED}", path)


class _Handler(FakeHandler):
    secret_headers = frozenset({"x-goog-api-key", "authorization"})
    request_id_header = None
    json_type = "application/json; charset=UTF-8"
    http_error = HttpError

    def answer(self, headers: dict[str, str], body: Any) -> None:
        fake = self.server.fake
        base = RecordedRequest(self.command, _redact_path(self.path), headers, body)
        route = base.route.rstrip("/")
        call, listing = _MODEL_ROUTE.match(route), _MODELS_ROUTE.match(route)
        rpc = call.group(3) if call else None
        if self.command == "GET" and listing:
            fake._record(replace(base, kind="models"))
            self._send_json(200, _models_payload(listing.group(2)))
            return
        if self._refused(base, body, self.command == "POST" and rpc in _RPCS):
            return
        if rpc == "countTokens":
            fake._record(replace(base, kind="count_tokens"))
            self._send_json(200, {"totalTokens": _estimate_prompt_tokens(body)})
        elif rpc == "generateContent":
            fake._record(replace(base, kind="side"))
            self._side(base, body)
        else:
            self._model(base, body)

    def _side(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        text = side_answer(body)
        candidate = {
            "content": {"role": "model", "parts": [{"text": text}]},
            "finishReason": "STOP",
            "index": 0,
        }
        prompt = _estimate_prompt_tokens(body)
        output = max(1, len(text) // 4)
        self._send_json(
            200,
            {
                "candidates": [candidate],
                "usageMetadata": _usage(prompt, output, 0),
                "modelVersion": base.model or MODEL,
                "responseId": _response_id(),
            },
        )

    def _model(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        step: Step = scripted_step(self, base, kind="model")
        if answer_failure(self, step):
            return
        _Stream(self, step, body, base.model or MODEL).run()

    def _pause(self, ms: int) -> bool:
        """Sleep `ms`; False if the fake shuts down or the client hangs up meanwhile, so an
        interrupted CLI does not leave a handler thread sleeping out a long stall."""
        deadline = time.monotonic() + ms / 1000
        while (left := deadline - time.monotonic()) > 0:
            if self.server.fake._stopping.wait(min(left, 0.05)):
                return False
            if self._client_gone():
                return False
        return True

    def _client_gone(self) -> bool:
        # The body was read in full and we send `connection: close`, so the only thing that
        # can make the socket readable is the client's EOF (or a reset).
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


def _response_id() -> str:
    return f"fake{uuid.uuid4().hex[:20]}"


def _usage(prompt: int, output: int, thoughts: int) -> dict[str, Any]:
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def _estimate_prompt_tokens(body: Mapping[str, Any]) -> int:
    prompt = [body.get("systemInstruction"), body.get("contents"), body.get("tools")]
    return max(1, len(json.dumps(prompt)) // 4)


def _models_payload(model: str | None) -> dict[str, Any]:
    def entry(name: str) -> dict[str, Any]:
        return {
            "name": f"models/{name}",
            "displayName": name,
            "inputTokenLimit": 1_048_576,
            "outputTokenLimit": 65_536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }

    return entry(model) if model else {"models": [entry(MODEL)]}


def _wire(block: Block) -> Text | Thought | FunctionCall:
    return block.call() if isinstance(block, ShellCommand | WriteFile | Replace) else block


class _Stream:
    """Writes one SSE response (chunked transfer encoding), ``data: {json}\\r\\n\\r\\n`` per
    event like the real API."""

    def __init__(self, handler: _Handler, step: Step, body: dict[str, Any], model: str) -> None:
        self.h, self.step, self.model = handler, step, model
        self.response_id = _response_id()
        self.events = self.plan([_wire(cast(Block, b)) for b in step.parts])
        out_chars = sum(len(json.dumps(p)) for ev in self.events for p in ev if "thought" not in p)
        thought_chars = sum(len(p["text"]) for ev in self.events for p in ev if "thought" in p)
        self.usage = _usage(
            step.prompt_tokens or _estimate_prompt_tokens(body),
            step.output_tokens or max(1, math.ceil(out_chars / 4)),
            math.ceil(thought_chars / 4),
        )

    def plan(self, blocks: list[Text | Thought | FunctionCall]) -> list[list[dict[str, Any]]]:
        """The parts of each event."""
        events: list[list[dict[str, Any]]] = []
        for block in blocks:
            if isinstance(block, Text):
                events.extend([{"text": c}] for c in self.chunks(block.text))
            elif isinstance(block, Thought):
                events.append([{"text": block.text, "thought": True}])
            else:
                events.append([block.part()])
        return events

    def run(self) -> None:
        h, step = self.h, self.step
        h._start_stream("text/event-stream")
        pace = Pace(h, step.delay_ms, step.close_midstream, step.stall_after_first_chunk_ms)
        events = self.events or [[]]  # an empty answer is still one (final) event
        for n, parts in enumerate(events):
            last = n == len(events) - 1
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            chunk: dict[str, Any] = {"candidates": [candidate]}
            if last and step.finish_reason is not None:
                candidate["finishReason"] = step.finish_reason
            if last:
                chunk["usageMetadata"] = self.usage
            chunk["modelVersion"] = self.model
            chunk["responseId"] = self.response_id
            pace.send(self.event, chunk, last=last)
        h._end_stream()

    def chunks(self, text: str) -> Iterator[str]:
        return pieces(text, self.step.chunk_size)

    def event(self, payload: dict[str, Any]) -> None:
        self.h._write_chunk(f"data: {json.dumps(payload)}\r\n\r\n".encode())


# --------------------------------------------------------------------------- public facade


class FakeGemini(ScriptedFake[Rule, RecordedRequest]):
    """The fake server. Start with `start()` or ``with``; `url` goes into
    ``GOOGLE_GEMINI_BASE_URL`` (the SDK appends ``/v1beta/...``).

    Accessors taking `i` index the model calls (`model_requests`: streamGenerateContent only);
    `side_requests` are the generateContent side calls; `requests` has everything in arrival
    order.
    """

    rule_type = Rule
    default_answer = "Hello from the fake Gemini API."
    handler_type = _Handler
    label = "fake-gemini"

    @property
    def model_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == "model"]

    @property
    def side_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == "side"]

    def contents(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].contents

    def system_text(self, i: int = -1) -> str:
        return self.model_requests[i].system_text

    def user_texts(self, i: int = -1) -> list[str]:
        return self.model_requests[i].user_texts

    def function_responses(self, i: int = -1) -> list[dict[str, Any]]:
        return self.model_requests[i].function_responses

    def tool_names(self, i: int = -1) -> list[str]:
        return self.model_requests[i].tool_names

    def wait_for_requests(
        self, n: int, timeout: float = 10.0, *, kind: str | None = "model"
    ) -> list[RecordedRequest]:
        """Block until `n` requests of `kind` (None: any) arrived; return them."""

        def match(r: RecordedRequest) -> bool:
            return kind is None or r.kind == kind

        return self._wait_for(n, timeout, match, f"{kind} requests")


# --------------------------------------------------------------------------- Gemini CLI set-up


def gemini_home(tmp_dir: Path, fake_url: str, *, max_attempts: int = 1, name: str = "home") -> Path:
    """Create ``tmp_dir/name`` as a fresh HOME for the CLI, with ``.gemini/settings.json``:

    * ``security.auth.selectedType: gemini-api-key``: mandatory. With a base URL set and no
      selected type the CLI picks "gateway" auth, which headless mode rejects (exit 41).
    * usage statistics and telemetry off: otherwise it contacts play.googleapis.com.
    * no auto-update (check), no IDE integration.
    * ``general.maxAttempts`` (1-10; the CLI's default 10 turns one HTTP 500 into minutes of
      backoff).
    * ``tools.shell.enableInteractiveShell: false``: ACP tool updates then carry the shell's
      output (with a PTY shell they are empty).

    It also writes ``.gemini/.env`` with ``GOOGLE_GEMINI_BASE_URL`` and ``GEMINI_API_KEY``.
    `gemini_env` reads the URL back from it, and the CLI itself falls back to it for variables
    missing from its environment, but only in a trusted workspace with no ``.env`` or
    ``.gemini/.env`` in the cwd or its parents: a safety net, not a replacement for the env.
    """
    if not 1 <= max_attempts <= 10:
        raise ValueError("max_attempts must be within 1..10 (the CLI's own bounds)")
    home = tmp_dir.resolve() / name  # a relative HOME breaks the CLI's auth set-up (exit 41)
    gemini_dir = home / ".gemini"
    gemini_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {
            "enableAutoUpdate": False,
            "enableAutoUpdateNotification": False,
            "maxAttempts": max_attempts,
        },
        "ide": {"enabled": False},
        "tools": {"shell": {"enableInteractiveShell": False}},
    }
    (gemini_dir / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    env_file = f"GOOGLE_GEMINI_BASE_URL={fake_url.rstrip('/')}\nGEMINI_API_KEY={API_KEY}\n"
    (gemini_dir / ".env").write_text(env_file)
    return home


def gemini_env(
    home: Path,
    fake_url: str | None = None,
    *,
    api_key: str = API_KEY,
    no_relaunch: bool = True,
    tmpdir: Path | None = None,
) -> dict[str, str]:
    """A minimal environment for running gemini with `home` (from `gemini_home`) against the
    fake at `fake_url` (None: the URL `gemini_home` wrote). Only PATH is inherited (the npm
    wrapper needs node; the shell tool needs the usual binaries).

    * ``GEMINI_CLI_TRUST_WORKSPACE=true``: headless refuses untrusted folders (exit 55).
    * ``TMPDIR``: a per-run dir (default ``home/tmp``); the CLI drops error reports and shell
      scratch dirs there.
    * ``GEMINI_CLI_NO_RELAUNCH=1`` (unless `no_relaunch` is False): the CLI otherwise re-runs
      itself as a child node process to raise node's memory limits (and to restart after
      some interactive settings changes). The reference ran the same scenarios both ways with
      the same output; without the relaunch a start is ~0.9 s faster and a signal to the
      spawned PID reaches the worker (with the relaunch it is ignored until the turn ends),
      so a test can always stop a stuck CLI. ``no_relaunch=False`` keeps the CLI's default.
    """
    if fake_url is None:
        env_file = (home / ".gemini" / ".env").read_text()
        fake_url = re.findall(r"^GOOGLE_GEMINI_BASE_URL=(.*)$", env_file, re.MULTILINE)[0]
    scratch = tmpdir if tmpdir is not None else home / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "TMPDIR": str(scratch),
        "NO_COLOR": "1",
        "GEMINI_API_KEY": api_key,
        "GOOGLE_GEMINI_BASE_URL": fake_url.rstrip("/"),
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    if no_relaunch:
        env["GEMINI_CLI_NO_RELAUNCH"] = "1"
    return env
