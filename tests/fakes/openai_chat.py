"""A scripted fake of the OpenAI Chat Completions API for driving the real `opencode` CLI offline.

OpenCode reaches it through a custom provider (``"npm": "@ai-sdk/openai-compatible"``, bundled in
the binary); `opencode_env` builds the whole environment for that::

    with FakeOpenAIChat(Rule("make it", [bash_call("touch x"), "Done."])) as fake:
        env = opencode_env(tmp_path, fake.url, cwd=work)
        subprocess.run([opencode, "run", "--format", "json"], input="make it", cwd=work, env=env,
                       ...)
        fake.tool_results(1)  # what OpenCode sent back after running the command

Scripting (tests/fakes/_script.py): rules match the text of the latest *human* user message
(``<system-reminder>`` blocks stripped; system messages and ``role: "tool"`` results never
count); a rule's step k answers the k-th model call since that human message, k = assistant
messages after it.

Side calls: besides the agent loop OpenCode calls the model for a session title (observed with
1.18.33: once per new session, not on ``--session`` continuations, in parallel with the first
answer, with the `small_model`, no tools, system prompt "You are a title generator", the
prompt as the last user message) and, in some flows, for a summary or a context compaction.
They are recognised by their system prompt (`SIDE_CALLS`), answered from ``side_calls`` (a
fixed title/summary by default; the title answer becomes the session title), never consume
scripted steps, and are kept out of `model_requests` (see `side_requests`).

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

from ._base import REDACTED, Abort, FakeHandler, Pace, RecordedBase, pieces
from ._openai import HttpError, content_text, v1_url
from ._script import ScriptedFake, ScriptRule, Shorthands, StepBase, answer_failure, scripted_step

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
PROVIDER = "fake"  # the provider id in OpenCode's config: models are "fake/<model>"
MODEL = "fake-model"
SMALL_MODEL = "fake-small"  # OpenCode's `small_model`: what title generation uses
API_KEY = "sk-fake-opencode"
OPENCODE_VERSION = "1.18.33"  # for the plugin pre-seed in `opencode_env`
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)

# Side calls by a marker in their system prompt (OpenCode 1.18.33's hidden agents `title`,
# `summary` and `compaction`).
SIDE_CALLS: Mapping[str, str] = {
    "title": "You are a title generator",
    "summary": "Summarize what was done in this conversation",
    "compaction": "You are a context summarization agent",
}

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
class Step(StepBase):
    """One model answer (pacing and failures: `StepBase`).

    `stall_after_first_delta_ms` sends the first delta, then stalls (interrupt tests; shutdown
    cuts the stall short). OpenCode retries a `close_midstream` for ~70 s before "Cannot
    connect to API: The socket connection was closed unexpectedly". `omit_done` ends the body
    cleanly without ``data: [DONE]``. For non-streaming requests the stall delays the whole
    answer, `close_midstream` drops it and `stream_error` becomes an HTTP 500.
    """

    blocks: Sequence[Block] = ()
    stall_after_first_delta_ms: int = 0
    error: HttpError | None = None
    stream_error: StreamError | None = None
    omit_done: bool = False
    finish_reason: str | None = None  # None: "tool_calls" if any ToolCall else "stop"
    prompt_tokens: int | None = None  # None: ~len(request JSON) / 4
    completion_tokens: int | None = None  # None: ~len(output) / 4

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "blocks", tuple(self.blocks))

    @property
    def effective_finish_reason(self) -> str:
        if self.finish_reason is not None:
            return self.finish_reason
        return "tool_calls" if any(isinstance(b, ToolCall) for b in self.blocks) else "stop"


StepLike: TypeAlias = Step | HttpError | Block | str | Sequence[Block]


#: Normalises the shorthands accepted in `Rule.steps` into a `Step`.
as_step = Shorthands(Step, Text, (Text, Reasoning, ToolCall), HttpError)


class Rule(ScriptRule[Step]):
    __doc__ = ScriptRule.__doc__
    shorthands = as_step


DEFAULT_SIDE_ANSWERS: Mapping[str, StepLike] = {
    "title": "Fake session title",
    "summary": "Fake summary of the conversation.",
    "compaction": "Fake compacted context.",
}


# --------------------------------------------------------------------------- conversation helpers


def _human_text(message: Mapping[str, Any]) -> str | None:
    """The text a person typed, or None if `message` is not a human user message."""
    if message.get("role") != "user":
        return None
    content = message.get("content")
    text = _REMINDER.sub("", content_text(content)).strip()
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
    return "\n".join(content_text(m.get("content")) for m in messages if m.get("role") == "system")


def _side_call(messages: list[dict[str, Any]]) -> str | None:
    system = _system_text(messages)
    return next((kind for kind, marker in SIDE_CALLS.items() if marker in system), None)


# --------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest(RecordedBase):
    """One request as the fake saw it (secret header values redacted; `rule` is set on
    scripted model calls only)."""

    side_call: str | None = None  # "title" | "summary" | "compaction" for side calls

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body_list("messages")

    def locate(self) -> tuple[str, int]:
        return _locate(self.messages)

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
        return [content_text(m.get("content")) for m in self.messages if m.get("role") == "user"]

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


class _Handler(FakeHandler):
    secret_headers = frozenset({"authorization", "api-key", "openai-api-key", "x-api-key"})
    http_error = HttpError

    def answer(self, headers: dict[str, str], body: Any) -> None:
        route = urlsplit(self.path).path.rstrip("/")
        base = RecordedRequest(self.command, self.path, headers, body)
        if self.command == "GET" and route == MODELS_PATH:
            self.server.fake._record(base)
            models = [MODEL, SMALL_MODEL]
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in models]
            self._send_json(200, {"object": "list", "data": data})
        elif not self._refused(base, body, self.command == "POST" and route == COMPLETIONS_PATH):
            self._respond(base, body)

    def _respond(self, base: RecordedRequest, body: dict[str, Any]) -> None:
        fake = cast("FakeOpenAIChat", self.server.fake)
        side = _side_call(base.messages)
        step: Step
        if side is not None:
            step = as_step(fake._side_answer(side))
            fake._record(replace(base, side_call=side))
        else:
            step = scripted_step(self, base)
        if answer_failure(self, step):
            return
        answer = _Answer(self, step, body)
        if body.get("stream"):
            answer.stream()
        else:
            answer.whole()


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
        self.pace = Pace(
            handler, step.delay_ms, step.close_midstream, step.stall_after_first_delta_ms
        )

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
            raise Abort
        if step.close_midstream:
            raise Abort
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
        h._start_stream()
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
        h._end_stream()

    def delta(self, delta: dict[str, Any]) -> None:
        self.pace.send(self.chunk, delta)

    def pieces(self, text: str) -> Iterator[str]:
        return pieces(text, self.step.chunk_size)

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
        self.h._write_chunk(f"data: {payload}\n\n".encode())


def _block_json(block: Block) -> dict[str, Any]:
    if isinstance(block, ToolCall):
        function = {"name": block.name, "arguments": block.arguments_json}
        return {"id": block.id, "type": "function", "function": function}
    return {"text": block.text}


# --------------------------------------------------------------------------- public facade


class FakeOpenAIChat(ScriptedFake[Rule, RecordedRequest]):
    """The fake server. Start with `start()` or ``with``; `url` is the root, `base_url` adds
    ``/v1`` (what an openai-compatible provider's ``baseURL`` needs; `opencode_env` takes either).

    Accessors taking `i` index the scripted model calls (`model_requests`: POST
    /v1/chat/completions minus side calls); `side_requests` has the side calls and `requests`
    everything (GET /v1/models, 404s, ...) in arrival order.
    """

    rule_type = Rule
    default_answer = "Hello from the fake OpenAI Chat Completions API."
    handler_type = _Handler
    label = "fake-openai-chat"

    def __init__(
        self,
        *rules: Rule,
        default: Rule | Sequence[StepLike] | StepLike | None = None,
        side_calls: Mapping[str, StepLike] | None = None,
        max_lifetime: float = 15 * 60,
    ) -> None:
        super().__init__(*rules, default=default, max_lifetime=max_lifetime)
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
        with self._lock:
            super().set_script(*rules, default=default)
            if side_calls is not None:
                self._side_answers = {**DEFAULT_SIDE_ANSWERS, **side_calls}

    # -- inspection

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

        def match(r: RecordedRequest) -> bool:
            return (route is None or r.route == route) and (
                include_side_calls or r.side_call is None
            )

        return self._wait_for(n, timeout, match, f"requests to {route}")

    def _describe(self, request: RecordedRequest) -> str:
        return f"{request.method} {request.path} {request.side_call or ''}"

    # -- called by handler threads

    def _side_answer(self, kind: str) -> StepLike:
        with self._lock:
            return self._side_answers.get(kind, DEFAULT_SIDE_ANSWERS["summary"])


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
    base_url = v1_url(fake_url)
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
