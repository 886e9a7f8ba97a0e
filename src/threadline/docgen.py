"""Generated documentation pages. `threadline docs --out docs` writes

- `protocol.md`: the protocol reference, rendered from the committed JSON Schemas (`schemas/`,
  what clients validate against), with an example message for every method. The examples are
  captured from a scripted session against the real server, run in-process with the `mock`
  backend, then normalized (UUIDs → placeholders numbered in order of appearance, times, the
  temp paths, durations and the platform fixed), so the page is byte-for-byte deterministic.
  A message the mock session cannot produce gets an example synthesized from its schema,
  marked so.
- `backends.md`: the backend matrix, from what each backend's code reports (`modes`,
  `default_mode`, `capabilities(mode)`), never hand-kept claims.

`tests/unit/test_docs_fresh.py` regenerates both, fails when the committed pages are stale,
and validates every example against its schema definition.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
import types
import typing
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import trio

__all__ = [
    "GENERATED",
    "HEADER",
    "Docs",
    "Example",
    "build_docs",
    "render_backends",
    "write_docs",
]

#: The pages this module owns (relative to the docs directory).
GENERATED = ("protocol.md", "backends.md")
HEADER = "<!-- generated — do not edit; run `threadline docs --out docs` -->\n"

JSON = Any


class DocgenError(RuntimeError):
    """The scripted session did not go as the generator expects."""


# -- backends.md ---------------------------------------------------------------------------------


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_backends() -> str:
    """The backend matrix, from `create_backends()`: one row per backend and mode."""
    from .backends.registry import create_backends

    backends = create_backends()
    out = [
        HEADER,
        "# Backends",
        "",
        "Generated from what each backend's code reports (`Backend.modes`, `default_mode` and",
        "`capabilities(mode)`): the same data a client gets at runtime in the `initialize`",
        "result (`backends[].capabilities`, per mode) and that `threadline doctor` prints.",
        "Pick a backend with `thread/start.modelProvider` and a mode with",
        "`thread/start.config.mode` (omitted: the default mode). See",
        "[configuration.md](configuration.md) for options and credentials and",
        "[approvals.md](approvals.md) for how approvals reach the client.",
        "",
        "## Matrix",
        "",
        "| backend | mode | approvals | cancel | resume | streamed deltas | reasoning | images |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in backends.values():
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            mark = " (default)" if mode == backend.default_mode else ""
            out.append(
                f"| `{backend.id}` | `{mode}`{mark} "
                f"| {'interactive' if caps.approvals else 'policy only'} "
                f"| {'native interrupt' if caps.interrupt else 'kill process group'} "
                f"| {_yes(caps.resume)} | {_yes(caps.deltas)} | {_yes(caps.reasoning)} "
                f"| {_yes(caps.images)} |"
            )
    out += [
        "",
        "What the columns mean:",
        "",
        "- **approvals** — *interactive*: the CLI asks before it runs a command, edits a file or",
        "  uses another tool, and threadline turns each question into a server→client request",
        "  (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`,",
        "  `item/tool/requestApproval`, `item/tool/requestUserInput`) routed by the thread's",
        "  `approvalPolicy` and rules. *policy only*: the CLI cannot ask in this mode;",
        "  `approvalPolicy` is turned into the CLI's own flags and nothing reaches the client.",
        "- **cancel** — what `turn/interrupt` / `turn/cancel` does. *native interrupt*: the",
        "  CLI's own interrupt (the process, and the conversation, survive); if the turn has",
        "  not ended after the grace period (`THREADLINE_INTERRUPT_GRACE`, default 5 s), the",
        "  CLI's process group is killed. *kill process group*: the per-turn process is killed",
        "  at once. Either way the turn ends `interrupted` and every open item is completed.",
        "- **resume** — `thread/resume` continues the CLI's own conversation after a restart.",
        "- **streamed deltas** — agent text arrives as `item/agentMessage/delta` while it is",
        "  written; *no*: one delta with the whole text when the message is complete.",
        "- **reasoning** — the CLI's reasoning is reported as `reasoning` items.",
        "- **images** — image inputs (`image`, `localImage`) reach the model.",
        "",
        "## Invocation and role injection",
        "",
        "How threadline runs each CLI, and how a thread's role (`baseInstructions` /",
        "`developerInstructions` on `thread/start`) reaches the agent — once per thread, never",
        "repeated on resume.",
        "",
    ]
    for backend in backends.values():
        out += [f"### `{backend.id}` — {backend.display_name}", ""]
        out += ["| mode | invocation | role injection |", "|---|---|---|"]
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            mark = " (default)" if mode == backend.default_mode else ""
            out.append(
                f"| `{mode}`{mark} | {_cell(caps.invocation) or '—'} "
                f"| {_cell(caps.role_injection) or '—'} |"
            )
        out.append("")
    out += _versions_tested()
    return "\n".join(out).rstrip("\n") + "\n"


def _versions_tested() -> list[str]:
    """The CLI versions the tests run against, from the catalog's pins."""
    from .backends.registry import SPECS

    out = [
        "## Versions tested",
        "",
        "Each CLI comes from npm. The tests run against the pinned version",
        "(`scripts/install-clis` installs it into `.tools/`) and have passed on the oldest",
        "tested one too; `threadline doctor` and `initialize` flag an installed CLI older than",
        "that. `scripts/test-latest` runs the same real-CLI tests against the newest release of",
        "each CLI (installed into `.tools-latest/`).",
        "",
        "| backend | npm package | pinned | oldest tested |",
        "|---|---|---|---|",
    ]
    for spec in SPECS.values():
        if spec.npm_package:
            out.append(
                f"| `{spec.id}` | `{spec.npm_package}` | {spec.pinned_version} "
                f"| {spec.oldest_tested} |"
            )
    return out


# -- capturing a scripted session ------------------------------------------------------------------

#: Stand-ins for the temp directories of the capture. The project's is a directory every
#: system has, so a captured request (`thread/start`'s `cwd`) runs as shown.
PROJECT_DIR = "/tmp"
HOME_DIR = "/home/user/.local/share/threadline"
_FIXED_SECONDS = 1767225600  # 2026-01-01T00:00:00Z
_FIXED_MS = _FIXED_SECONDS * 1000
_FIXED_DURATION_MS = 1200
_SECONDS_KEYS = frozenset({"createdAt", "updatedAt", "startedAt", "completedAt"})
_MS_KEYS = frozenset({"startedAtMs", "completedAtMs", "emittedAtMs"})
_DURATION_KEYS = frozenset({"durationMs"})
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PLATFORM = re.compile(r"\([^)]*\)")
_TIMEOUT = 15.0
_SMALL_LIMIT = 1024

_TURN_1 = "\n".join(
    [
        "/reason Look at the project first, then write the greeting.",
        "/plan Look around | Write notes.txt | Report back",
        "/run echo hello from the agent",
        "/write notes.txt Hello, world!",
        '/tool fetch {"url": "https://example.com/style-guide"}',
        "/ask Formal or casual greeting?",
        "/text Done: notes.txt greets the world.",
    ]
)
_TURN_2 = "/run ls\n/write notes.txt Hello again!\n/text Updated notes.txt."
_TURN_FAIL = "/fail The model provider is overloaded (HTTP 503)"
_TURN_SLEEP = "/sleep 30"

#: Answers of the scripted client to the server's requests (turn 1).
_ANSWERS: dict[str, JSON] = {
    "item/commandExecution/requestApproval": {"decision": "accept"},
    "item/fileChange/requestApproval": {"decision": "acceptForSession"},
    "item/tool/requestApproval": {"decision": "decline"},
    "item/tool/requestUserInput": {"answers": {"q1": {"answers": ["Formal"]}}},
}


class _Described(str):
    """An example request shown as a description instead of its text."""

    __slots__ = ()


def _is_method(method: str) -> Callable[[JSON], bool]:
    return lambda m: isinstance(m, dict) and m.get("method") == method


def _turn_done(turn_id: str) -> Callable[[JSON], bool]:
    return lambda m: _is_method("turn/completed")(m) and m["params"]["turn"]["id"] == turn_id


class _Client:
    """A scripted client over an in-memory stream; records every line both ways."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        import trio

        self.stream = stream
        #: ("client" | "server", message) in the order written / received.
        self.transcript: list[tuple[str, JSON]] = []
        self._next_id = 0
        self._waiting: dict[Any, trio.MemorySendChannel[JSON]] = {}
        self._events_send, self._events = trio.open_memory_channel[JSON](math.inf)

    async def read(self) -> None:
        from .rpc.framing import LineReader

        reader = LineReader(self.stream)
        while (line := await reader.receive_line()) is not None:
            message = json.loads(line)
            self.transcript.append(("server", message))
            if isinstance(message, dict) and "method" not in message:
                waiter = self._waiting.pop(message.get("id"), None)
                if waiter is not None:
                    waiter.send_nowait(message)
                    continue
            self._events_send.send_nowait(message)

    async def send(self, message: JSON) -> None:
        self.transcript.append(("client", message))
        await self.stream.send_all(json.dumps(message).encode() + b"\n")

    async def send_raw(self, line: str) -> None:
        self.transcript.append(("client", line))
        await self.stream.send_all(line.encode() + b"\n")

    async def request(self, method: str, params: JSON) -> JSON:
        """Send a request; return the whole response (result or error)."""
        import trio

        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[JSON](1)
        self._waiting[rid] = send
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with trio.fail_after(_TIMEOUT):
            return await recv.receive()

    async def call(self, method: str, params: JSON) -> JSON:
        response = await self.request(method, params)
        if "error" in response:
            raise DocgenError(f"{method} failed: {response['error']}")
        return response["result"]

    async def fail(self, method: str, params: JSON) -> JSON:
        response = await self.request(method, params)
        if "error" not in response:
            raise DocgenError(f"{method} unexpectedly succeeded: {response}")
        return response

    async def until(
        self, pred: Callable[[JSON], bool], answers: dict[str, JSON] | None = None
    ) -> JSON:
        """Consume events until one matches; answer server requests from `answers`."""
        import trio

        with trio.fail_after(_TIMEOUT):
            while True:
                event = await self._events.receive()
                if isinstance(event, dict) and "method" in event and "id" in event:
                    method = event["method"]
                    if answers is None or method not in answers:
                        raise DocgenError(f"unexpected server request {method}")
                    await self.send(
                        {"jsonrpc": "2.0", "id": event["id"], "result": answers[method]}
                    )
                if pred(event):
                    return event

    async def turn(self, thread_id: str, text: str, answers: dict[str, JSON] | None = None) -> str:
        """Run one turn to its `turn/completed`; return the turn id."""
        result = await self.call(
            "turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]}
        )
        turn_id: str = result["turn"]["id"]
        await self.until(_turn_done(turn_id), answers)
        return turn_id


@asynccontextmanager
async def _serve(home: Path, max_request: int | None = None) -> AsyncIterator[_Client]:
    """The real server with the mock backend over an in-memory stream pair."""
    import trio
    import trio.testing

    from .backends.mock.backend import MockBackend
    from .server.app import Server
    from .server.config import ServerConfig
    from .store import ThreadStore

    config = ServerConfig(default_backend="mock", interrupt_grace=0.5)
    server = Server(config, ThreadStore(home), {"mock": MockBackend()})
    if max_request is not None:
        server.max_request = max_request
    client_stream, server_stream = trio.testing.memory_stream_pair()
    client = _Client(client_stream)
    async with trio.open_nursery() as nursery:
        done = trio.Event()

        async def serve() -> None:
            try:
                await server.serve(server_stream, server_stream)
            finally:
                done.set()

        nursery.start_soon(serve)
        nursery.start_soon(client.read)
        try:
            yield client
        finally:
            await client_stream.send_stream.aclose()
            with trio.move_on_after(_TIMEOUT):
                await done.wait()
            nursery.cancel_scope.cancel()


@dataclass
class _Capture:
    transcripts: list[list[tuple[str, JSON]]]
    #: method → (request, response) of its example call.
    calls: dict[str, tuple[JSON, JSON]] = field(default_factory=dict)
    #: (what went wrong, request, error response)
    errors: list[tuple[str, JSON, JSON]] = field(default_factory=list)
    #: (first, last) transcript index of the example turn, in transcripts[0]
    turn_span: tuple[int, int] = (0, 0)
    #: raw ids for synthesized examples (normalized like the rest)
    context: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)


def _pair(client: _Client, index: int) -> tuple[JSON, JSON]:
    """The request at transcript[index] and its response."""
    request = client.transcript[index][1]
    for side, message in client.transcript[index + 1 :]:
        if side == "server" and "method" not in message and message.get("id") == request["id"]:
            return request, message
    raise DocgenError(f"no response to {request}")


def _last_request(client: _Client, method: str) -> int:
    for i in range(len(client.transcript) - 1, -1, -1):
        side, message = client.transcript[i]
        if side == "client" and isinstance(message, dict) and message.get("method") == method:
            return i
    raise DocgenError(f"{method} was never sent")


async def _script(root: Path) -> _Capture:
    """The scripted session: every method, notification and server request the mock backend
    can produce, in two server lifetimes sharing one state directory."""
    home, project = root / "home", root / "project"
    home.mkdir()
    project.mkdir()
    capture = _Capture(transcripts=[])
    capture.paths = {str(project): PROJECT_DIR, str(home): HOME_DIR}
    for raw, fixed in list(capture.paths.items()):
        capture.paths[str(Path(raw).resolve())] = fixed

    def keep(client: _Client, method: str) -> None:
        capture.calls.setdefault(method, _pair(client, _last_request(client, method)))

    def error(client: _Client, what: str, method: str) -> None:
        request, response = _pair(client, _last_request(client, method))
        capture.errors.append((what, request, response))

    async with _serve(home) as c:
        capture.transcripts.append(c.transcript)
        await c.call(
            "initialize",
            {"clientInfo": {"name": "my-editor", "title": "My Editor", "version": "1.0.0"}},
        )
        keep(c, "initialize")
        result = await c.call(
            "thread/start",
            {
                "modelProvider": "mock",
                "model": "mock-1",
                "cwd": str(project),
                "approvalPolicy": "on-request",
                "config": {"approvalRules": [{"decision": "accept", "command": "ls*"}]},
            },
        )
        keep(c, "thread/start")
        thread_a: str = result["thread"]["id"]
        await c.until(_is_method("thread/started"))

        first = len(c.transcript)
        turn_1 = await c.turn(thread_a, _TURN_1, _ANSWERS)
        keep(c, "turn/start")
        capture.turn_span = (first, len(c.transcript))
        capture.context = {"threadId": thread_a, "turnId": turn_1}
        await c.turn(thread_a, _TURN_2)
        await c.turn(thread_a, _TURN_FAIL)

        for method in ("turn/interrupt", "turn/cancel"):
            started = await c.call(
                "turn/start",
                {"threadId": thread_a, "input": [{"type": "text", "text": _TURN_SLEEP}]},
            )
            turn_id = started["turn"]["id"]
            await c.until(
                lambda m: (
                    _is_method("item/completed")(m) and m["params"]["item"]["type"] == "userMessage"
                )
            )
            if method == "turn/interrupt":
                await c.fail(
                    "turn/start", {"threadId": thread_a, "input": [{"type": "text", "text": "hi"}]}
                )
                error(c, "`turn/start` while a turn is running", "turn/start")
            await c.call(method, {"threadId": thread_a, "turnId": turn_id})
            keep(c, method)
            await c.until(_turn_done(turn_id))

        await c.fail("thread/fork", {"threadId": thread_a})
        error(c, "unknown method", "thread/fork")
        await c.fail("turn/start", {"threadId": thread_a})
        error(c, "invalid params (`input` missing)", "turn/start")
        await c.fail("thread/read", {"threadId": "0199b5a4-0000-7000-8000-00000000dead"})
        error(c, "unknown thread", "thread/read")
        sent = len(c.transcript)
        await c.send_raw('{"jsonrpc": "2.0", "id": 99, "method": "thread/list", "params": ')
        parse_error = await c.until(lambda m: "error" in m and m.get("id") is None)
        capture.errors.append(
            ("unparsable line (answered with id `null`)", c.transcript[sent][1], parse_error)
        )

        result = await c.call("thread/start", {"modelProvider": "mock", "cwd": str(project)})
        thread_b: str = result["thread"]["id"]
        await c.until(_is_method("thread/started"))
        await c.turn(thread_b, "Summarize the README.")
        await c.call("model/list", {"modelProvider": "mock"})
        keep(c, "model/list")
        await c.call("thread/loaded/list", {})
        keep(c, "thread/loaded/list")

    # A second server lifetime on the same state directory (a restart), with a small
    # request size limit (THREADLINE_MAX_REQUEST_BYTES) for the oversized-line example.
    async with _serve(home, max_request=_SMALL_LIMIT) as c:
        capture.transcripts.append(c.transcript)
        await c.fail("thread/list", {})
        error(c, "a request before `initialize`", "thread/list")
        await c.call("initialize", {"clientInfo": {"name": "my-editor", "version": "1.0.0"}})
        await c.call("thread/list", {"limit": 10})
        keep(c, "thread/list")
        await c.call("thread/read", {"threadId": thread_b, "includeTurns": True})
        keep(c, "thread/read")
        await c.call("thread/resume", {"threadId": thread_b})
        keep(c, "thread/resume")
        await c.call("thread/archive", {"threadId": thread_b})
        keep(c, "thread/archive")
        await c.until(_is_method("thread/archived"))
        text = "x" * _SMALL_LIMIT
        line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 99,
                "method": "turn/start",
                "params": {"threadId": thread_a, "input": [{"type": "text", "text": text}]},
            }
        )
        await c.send_raw(line)
        too_long = await c.until(lambda m: "error" in m and m.get("id") is None)
        capture.errors.append(
            (
                f"a request line over the size limit (this server ran with "
                f"`THREADLINE_MAX_REQUEST_BYTES={_SMALL_LIMIT}`; the default is 16 MiB)",
                _Described(f"a {len(line)}-byte `turn/start` request line"),
                too_long,
            )
        )
    return capture


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The scripted errors (an unparsable line, ...) log warnings: keep them off stderr."""
    logger = logging.getLogger("threadline")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _capture() -> _Capture:
    import trio

    with tempfile.TemporaryDirectory(prefix="threadline-docs-") as tmp, _quiet_logs():
        return trio.run(_script, Path(tmp))


# -- normalization -------------------------------------------------------------------------------


class _Normalizer:
    """Makes captured messages deterministic: UUIDs become placeholders numbered in the order
    they are first rendered (still valid UUIDs, so examples can be replayed), times and
    durations a fixed value, temp paths stand-ins, the platform in `userAgent` fixed."""

    def __init__(self, paths: dict[str, str]) -> None:
        self._paths = sorted(paths.items(), key=lambda kv: (-len(kv[0]), kv[0]))
        self._ids: dict[str, str] = {}

    def _placeholder(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        if raw not in self._ids:
            self._ids[raw] = f"00000000-0000-7000-8000-{len(self._ids) + 1:012d}"
        return self._ids[raw]

    def text(self, value: str) -> str:
        for raw, fixed in self._paths:
            value = value.replace(raw, fixed)
        return _UUID.sub(self._placeholder, value)

    def __call__(self, value: JSON, key: str | None = None) -> JSON:
        if isinstance(value, dict):
            return {k: self(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, key) for v in value]
        if isinstance(value, str):
            if key == "userAgent":
                value = _PLATFORM.sub("(Linux 6.8.0; x86_64)", value)
            elif key == "platformFamily":
                value = "unix"
            elif key == "platformOs":
                value = "linux"
            return self.text(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if key in _SECONDS_KEYS:
                return _FIXED_SECONDS
            if key in _MS_KEYS:
                return _FIXED_MS
            if key in _DURATION_KEYS:
                return _FIXED_DURATION_MS
        return value


# -- schema helpers --------------------------------------------------------------------------------


def _load_schemas(schemas: Path | None) -> tuple[dict[str, JSON], dict[str, JSON]]:
    """The committed bundle and method index; generated in memory when `schemas` has none
    (e.g. an installed package run outside the repository: same content when fresh)."""
    from .schema import METHODS_FILE, SCHEMA_FILE, build_bundle, build_method_index

    if schemas is not None and (schemas / SCHEMA_FILE).is_file():
        bundle = json.loads((schemas / SCHEMA_FILE).read_text(encoding="utf-8"))
        index = json.loads((schemas / METHODS_FILE).read_text(encoding="utf-8"))
        return bundle, index
    return (
        json.loads(json.dumps(build_bundle(), sort_keys=True)),
        json.loads(json.dumps(build_method_index(), sort_keys=True)),
    )


def _ref_name(schema: JSON) -> str | None:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _anchor(name: str) -> str:
    return "t-" + name.lower()


def _method_anchor(method: str) -> str:
    return method.lower().replace("/", "-")


def _union_names() -> dict[frozenset[str], str]:
    """Names for the schema's anonymous unions of structs (`ThreadItem`, `UserInput`, ...).
    Only their names come from the Python aliases: the members come from the schema."""
    import msgspec

    from .protocol import common, inputs, items, methods, notifications, server_requests

    names: dict[frozenset[str], str] = {}
    for module in (items, inputs, common, methods, notifications, server_requests):
        for name, value in sorted(vars(module).items()):
            if name.startswith("_"):
                continue
            if not isinstance(value, types.UnionType) and typing.get_origin(value) is not (
                typing.Union
            ):
                continue
            args = typing.get_args(value)
            if len(args) >= 2 and all(
                isinstance(a, type) and issubclass(a, msgspec.Struct) for a in args
            ):
                names.setdefault(frozenset(a.__name__ for a in args), name)
    return names


class _Schema:
    def __init__(self, bundle: dict[str, JSON], index: dict[str, JSON]) -> None:
        self.defs: dict[str, JSON] = bundle["$defs"]
        self.index = index
        self.unions = _union_names()
        #: union name → member def names (schema order), for every named union in use
        self.union_members: dict[str, list[str]] = {}
        self.discriminators: dict[str, str] = {}

    def envelopes(self, group: str) -> dict[str, str]:
        """method → envelope def name, in the schema's order (`ClientRequest`, ...)."""
        out = {}
        for branch in self.defs[group]["anyOf"]:
            name = _ref_name(branch)
            assert name is not None
            out[self.defs[name]["properties"]["method"]["const"]] = name
        return out

    def union_of(self, schema: JSON) -> str | None:
        members = [_ref_name(b) for b in schema.get("anyOf", [])]
        if len(members) < 2 or any(m is None for m in members):
            return None
        names = [m for m in members if m is not None]
        union = self.unions.get(frozenset(names))
        if union is not None:
            self.union_members.setdefault(union, names)
            prop = schema.get("discriminator", {}).get("propertyName")
            if prop:
                self.discriminators.setdefault(union, prop)
        return union

    def type(self, schema: JSON) -> str:
        """A readable type: links for refs, `"a" | "b"` for enums, `T[]`, `T | null`."""
        if not isinstance(schema, dict) or not schema:
            return "any"
        name = _ref_name(schema)
        if name is not None:
            return f"[{name}](#{_anchor(name)})"
        if "const" in schema:
            return f"`{json.dumps(schema['const'])}`"
        if "enum" in schema:
            return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
        if "anyOf" in schema:
            union = self.union_of(schema)
            if union is not None:
                return f"[{union}](#{_anchor(union)})"
            return " | ".join(self.type(b) for b in schema["anyOf"])
        kind = schema.get("type")
        if kind == "array":
            inner = self.type(schema.get("items", {}))
            return f"({inner})[]" if " | " in inner else f"{inner}[]"
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return f"{{string: {self.type(extra)}}}"
            return "object"
        if isinstance(kind, str):
            return kind
        return "any"

    def refs(self, schema: JSON) -> Iterator[str]:
        """Every def name referenced from `schema`, recursively into nested schemas."""
        if isinstance(schema, dict):
            name = _ref_name(schema)
            if name is not None:
                yield name
            for value in schema.values():
                yield from self.refs(value)
        elif isinstance(schema, list):
            for value in schema:
                yield from self.refs(value)

    def reachable(self, roots: list[str]) -> list[str]:
        seen: list[str] = []
        todo = list(roots)
        while todo:
            name = todo.pop(0)
            if name in seen:
                continue
            seen.append(name)
            todo += list(self.refs(self.defs[name]))
        return seen

    def fields(self, name: str) -> list[str]:
        """A def's field table (or a note when it has none)."""
        schema = self.defs[name]
        props: dict[str, JSON] = schema.get("properties", {})
        lines = []
        if schema.get("description"):
            lines += [" ".join(str(schema["description"]).split()), ""]
        if not props:
            return [*lines, "No fields (`{}`)."]
        required = list(schema.get("required", []))
        order = [p for p in required if p in props] + sorted(p for p in props if p not in required)
        rows = []
        for prop in order:
            spec = props[prop]
            notes = []
            if isinstance(spec, dict) and spec.get("description"):
                notes.append(" ".join(str(spec["description"]).split()))
            if isinstance(spec, dict) and spec.get("default") not in (None, [], {}):
                notes.append(f"default `{json.dumps(spec['default'])}`")
            rows.append(
                [
                    f"`{prop}`",
                    _cell(self.type(spec)),
                    "required" if prop in required else "optional",
                    _cell("; ".join(notes)),
                ]
            )
        header = ["field", "type", "required", "notes"]
        if not any(row[3] for row in rows):
            header, rows = header[:3], [row[:3] for row in rows]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return lines


def _synthesize(
    schema: JSON, defs: dict[str, JSON], context: dict[str, str], key: str | None = None
) -> JSON:
    """A minimal value for `schema`: required fields only, first enum value / branch."""
    if not isinstance(schema, dict) or not schema:
        return {}
    name = _ref_name(schema)
    if name is not None:
        return _synthesize(defs[name], defs, context, key)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        return _synthesize(branches[0], defs, context, key)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {p: _synthesize(props[p], defs, context, p) for p in schema.get("required", [])}
    if kind == "array":
        return [_synthesize(schema.get("items", {}), defs, context, key)]
    if kind == "string":
        if key in context:
            return context[key]
        if key is not None and (key == "id" or key.endswith("Id")):
            from .ids import new_id

            return new_id()  # a fresh UUID: the normalizer numbers it like a captured one
        return {"delta": "Checking the tests", "message": "Working on it"}.get(key or "", "text")
    if kind == "integer":
        return 0
    if kind == "number":
        return 0.0
    if kind == "boolean":
        return False
    return None


# -- protocol.md -----------------------------------------------------------------------------------

_SUMMARY = {
    "initialize": "The handshake; the first request on every connection (anything before it "
    "is answered `-32600 Not initialized`, a second one `-32600 Already initialized`). The "
    "result adds threadline's `serverInfo` and `backends[]`: availability, version, path, "
    "modes and capabilities per mode of every backend.",
    "thread/start": "Create a thread on a backend (`modelProvider`: `claude`, `codex`, "
    "`gemini`, `opencode`, `mock`; default `AGENT_BACKEND`) in `cwd` (absolute, an existing "
    "directory). Backend options go in `config`. Answered at once; `thread/started` follows.",
    "thread/resume": "Load a stored thread (e.g. after a restart) and continue the CLI's own "
    "conversation; from the thread's original `cwd` only. The result carries its turns unless "
    "`excludeTurns`. On a loaded thread it only updates `approvalPolicy`.",
    "thread/list": "Stored and loaded threads, newest first (`sortKey`, `sortDirection`), "
    "filtered by `archived`, `cwd`, `modelProviders`, `searchTerm`; paged with `limit` and "
    "`cursor` (`nextCursor`).",
    "thread/read": "One thread, loaded or not; `includeTurns` adds its turns and their items "
    "from the thread's log.",
    "thread/archive": "Stop the thread's CLI, unload it and mark it archived (hidden from "
    "`thread/list` unless `archived: true`; cannot be resumed). `thread/archived` follows.",
    "thread/loaded/list": "The ids of the threads loaded in this server process.",
    "turn/start": "Start a turn on a loaded thread. Answered at once with `status: "
    "inProgress`; the turn is then reported by notifications and ends with exactly one "
    "`turn/completed`. `approvalPolicy` and `model` given here stick for later turns. A "
    "second `turn/start` while one runs is refused.",
    "turn/interrupt": "Stop the running turn; it ends with `turn/completed` `interrupted` (a "
    "pending approval is withdrawn and its tool never runs). Interrupting a turn that already "
    "finished is a harmless `{}`.",
    "turn/cancel": "threadline's alias of `turn/interrupt`: same params, same effect.",
    "model/list": "The models each backend offers (`modelProvider` filters to one backend).",
    "thread/started": "A thread was created (sent after the `thread/start` response).",
    "thread/status/changed": "The thread's status: `idle`, `active` (with `activeFlags`: "
    "`waitingOnApproval`, `waitingOnUserInput`) or `notLoaded`.",
    "thread/archived": "A thread was archived.",
    "thread/closed": "Codex's notice that a thread was unloaded; in the schema for Codex "
    "clients, not sent by threadline today.",
    "turn/started": "A turn began (after the `turn/start` response).",
    "turn/completed": "The turn ended: `completed`, `interrupted` or `failed` (with `error`). "
    "Exactly one per turn, after every item was completed. A completed turn carries its final "
    "agent message as a summary (`itemsView: summary`).",
    "item/started": "An item began: the `userMessage` first in every turn, then agent "
    "messages, reasoning, commands, file changes, tool calls.",
    "item/completed": "An item's final state. Every `item/started` gets exactly one, also "
    "when the turn is interrupted or fails.",
    "item/agentMessage/delta": "Agent text as it is written; the deltas of an item "
    "concatenate to its completed `text`.",
    "item/plan/delta": "Text of a `plan` item as it is written.",
    "item/reasoning/summaryTextDelta": "Reasoning summary text (section `summaryIndex`).",
    "item/reasoning/summaryPartAdded": "A new reasoning summary section begins.",
    "item/reasoning/textDelta": "Raw reasoning text (part `contentIndex`).",
    "item/commandExecution/outputDelta": "Output of a running command.",
    "item/fileChange/outputDelta": "Output of a file change being applied.",
    "item/mcpToolCall/progress": "Progress message of a running MCP tool call.",
    "turn/plan/updated": "The agent's plan (its todo list) changed.",
    "turn/diff/updated": "The turn's aggregated diff changed.",
    "thread/tokenUsage/updated": "Token usage of the last request and the thread's total.",
    "error": "The turn failed (sent before its `turn/completed`); `willRetry` is always "
    "`false`. The thread stays usable.",
    "warning": "Something the client should know that does not end the turn.",
    "serverRequest/resolved": "A server→client request was answered or withdrawn "
    "(timeout, interrupt, turn end).",
    "item/approval/autoDecided": "threadline extension: an approval decided without asking "
    "the client — `reason` `policy` (`approvalPolicy: never`), `rule` (an approval rule or "
    "an earlier `acceptForSession`; `rule` names it), `timeout` or `noClient`.",
    "item/commandExecution/requestApproval": "May the agent run this command? Answer `{decision}`.",
    "item/fileChange/requestApproval": "May the agent apply this file change (announced by "
    "its `fileChange` item)? Answer `{decision}`.",
    "item/tool/requestUserInput": "The agent asks the user questions. Answer `{answers: "
    "{<question id>: {answers: [...]}}}`; anything else leaves them unanswered.",
    "item/tool/requestApproval": "threadline extension: may the agent use this tool (neither "
    "a command nor a file change)? Answer `{decision}`.",
}

#: Messages preferred as the example of a method (else: its first occurrence).
_PREFER: dict[str, Callable[[JSON], bool]] = {
    "item/started": lambda p: p["item"]["type"] == "commandExecution",
    "item/completed": lambda p: p["item"]["type"] == "commandExecution",
    "thread/status/changed": lambda p: p["status"].get("activeFlags") == ["waitingOnApproval"],
}


@dataclass
class Example:
    """One rendered example: the messages, each with the schema defs it must satisfy."""

    kind: str  # "request" | "notification" | "serverRequest" | "error"
    method: str
    captured: bool
    checks: list[tuple[str, JSON]]


@dataclass
class Docs:
    pages: dict[str, str]
    examples: list[Example]

    @property
    def checks(self) -> list[tuple[str, JSON]]:
        return [check for example in self.examples for check in example.checks]


def _json_block(message: JSON) -> list[str]:
    """One message on one line, as on the wire; `captured` tells tests/e2e/test_docs_examples.py
    that `threadline docs` ran it (tests/unit/test_docs_fresh.py keeps it current)."""
    line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return ["```json captured", line, "```"]


def _text_block(why: str, lines: list[str]) -> list[str]:
    """A block of text that is not a command, marked so for tests/e2e/test_docs_examples.py."""
    return [f"<!-- not-run: {why} -->", "```text", *lines, "```"]


def _find(
    transcripts: list[list[tuple[str, JSON]]], side: str, method: str
) -> tuple[list[tuple[str, JSON]], int] | None:
    """(transcript, index) of the example message for `method` sent by `side`: the first
    one `_PREFER` likes, else the first one."""
    prefer = _PREFER.get(method)
    for wanted in ((prefer,) if prefer else ()) + (None,):
        for transcript in transcripts:
            for i, (s, message) in enumerate(transcript):
                if s != side or not isinstance(message, dict):
                    continue
                if message.get("method") != method or "params" not in message:
                    continue
                if wanted is None or wanted(message["params"]):
                    return transcript, i
    return None


def _overview(capture: _Capture) -> list[str]:
    """The example turn as a list of messages, consecutive deltas folded."""
    first, last = capture.turn_span
    rows: list[list[Any]] = []
    for side, message in capture.transcripts[0][first:last]:
        arrow = "→" if side == "client" else "←"
        if "method" in message:
            method = message["method"]
            params = message.get("params") or {}
            detail = ""
            if "item" in params and isinstance(params["item"], dict):
                detail = params["item"]["type"]
                status = params["item"].get("status")
                detail += f" ({status})" if status and method == "item/completed" else ""
            elif method == "thread/status/changed":
                status = params["status"]
                detail = status["type"] + "".join(
                    f" [{f}]" for f in status.get("activeFlags") or []
                )
            elif method in ("turn/completed", "turn/started"):
                detail = params["turn"]["status"]
            elif method == "item/approval/autoDecided":
                detail = f"{params['decision']} ({params['reason']})"
            text = f"{arrow} {method}" + (f"  {detail}" if detail else "")
            text += "  (request)" if "id" in message and side == "server" else ""
        elif "result" in message:
            decision = message["result"].get("decision") if side == "client" else None
            text = f"{arrow} response" + (f"  {decision}" if decision else "")
        else:
            text = f"{arrow} error"
        if rows and rows[-1][0] == text and text.lower().endswith("delta"):
            rows[-1][1] += 1
        else:
            rows.append([text, 1])
    lines = [text + (f"  ({count} times)" if count > 1 else "") for text, count in rows]
    return _text_block("a summary of the captured turn, one line per message", lines)


def render_protocol(
    bundle: dict[str, JSON], index: dict[str, JSON], capture: _Capture
) -> tuple[str, list[Example]]:
    from . import __version__

    schema = _Schema(bundle, index)
    norm = _Normalizer(capture.paths)
    examples: list[Example] = []
    requests = schema.envelopes("ClientRequest")
    notifications = schema.envelopes("ServerNotification")
    server_requests = schema.envelopes("ServerRequest")
    anchored: set[str] = set()

    def table(title: str, def_name: str) -> list[str]:
        head = f"**{title}** — `{def_name}`"
        if def_name not in anchored:
            anchored.add(def_name)
            head = f'<a id="{_anchor(def_name)}"></a>{head}'
        return [head, "", *schema.fields(def_name), ""]

    def toc(methods: dict[str, str]) -> list[str]:
        return [", ".join(f"[`{m}`](#{_method_anchor(m)})" for m in methods), ""]

    out = [
        HEADER,
        "# Protocol reference",
        "",
        f"threadline {__version__} speaks newline-delimited JSON-RPC 2.0 on stdin/stdout,",
        "wire-compatible with the core of the Codex app-server v2 protocol (differences and",
        "additions: [protocol-notes.md](protocol-notes.md)). This page is generated from the",
        "JSON Schemas in `schemas/` (`threadline.schema.json`, draft 2020-12, and",
        "`methods.json`) — the types a client can validate against.",
        "",
        "- One JSON message per line, UTF-8. Every example below is one line too, exactly as",
        "  it goes over the wire.",
        '- Requests may omit `"jsonrpc": "2.0"`; every message threadline writes carries it.',
        "  Ids are strings or integers. Unknown fields are ignored.",
        "- `initialize` first. Requests are answered in any order (each runs in its own task);",
        "  match responses by id.",
        "- Notifications carry `emittedAtMs` (server clock, ms) next to `params`.",
        "- Server→client requests (approvals, questions) must be answered with a response",
        "  carrying the same id; see [approvals.md](approvals.md).",
        "",
        "The examples were captured from a scripted session against the real server with the",
        "offline `mock` backend (its server was started with only that backend, so",
        "`initialize` lists just `mock`), then normalized: UUIDs are replaced by placeholders",
        "numbered in order of appearance (still valid UUIDs), times by 2026-01-01T00:00:00Z",
        f"(`{_FIXED_SECONDS}` s, `{_FIXED_MS}` ms), durations by `{_FIXED_DURATION_MS}` ms,",
        f"the project directory by `{PROJECT_DIR}` (so a captured `thread/start` runs as shown)",
        f"and the state directory by `{HOME_DIR}`.",
        "Examples the mock backend cannot produce are synthesized from the schema and marked so.",
        "",
        "## Contents",
        "",
        "- [A turn on the wire](#a-turn-on-the-wire)",
        "- [Client requests](#client-requests): " + toc(requests)[0],
        "- [Notifications](#notifications): " + toc(notifications)[0],
        "- [Server requests](#server-requests): " + toc(server_requests)[0],
        "- [Errors](#errors)",
        "- [Types](#types)",
        "",
        "## A turn on the wire",
        "",
        "The first turn of the captured session (→ client to server, ← server to client):",
        "reasoning, a plan, a command, a file change, another tool and a question, each",
        "approval answered by the client, then the final answer. Its prompt:",
        "",
        *_text_block("the mock prompt of the captured turn, not a command", [_TURN_1]),
        "",
        *_overview(capture),
        "",
        "## Client requests",
        "",
    ]

    transcripts = capture.transcripts
    for method, envelope in requests.items():
        entry = index["clientRequests"][method]
        out += [f'<a id="{_method_anchor(method)}"></a>', "", f"### `{method}`", ""]
        if method in _SUMMARY:
            out += [_SUMMARY[method], ""]
        out += table("Params", entry["params"]) + table("Result", entry["result"])
        if method in capture.calls:
            request, response = (norm(m) for m in capture.calls[method])
            captured = True
        else:
            params = _synthesize({"$ref": f"#/$defs/{entry['params']}"}, schema.defs, {})
            result = _synthesize({"$ref": f"#/$defs/{entry['result']}"}, schema.defs, {})
            request = norm({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            response = norm({"jsonrpc": "2.0", "id": 1, "result": result})
            captured = False
        out += ["**Example**" + ("" if captured else " (synthesized from the schema)"), ""]
        out += ["→ request", "", *_json_block(request), "", "← response", ""]
        out += [*_json_block(response), ""]
        examples.append(
            Example(
                "request",
                method,
                captured,
                [
                    (envelope, request),
                    (entry["params"], request.get("params", {})),
                    ("JSONRPCResponse", response),
                    (entry["result"], response["result"]),
                ],
            )
        )

    out += ["## Notifications", ""]
    for method, envelope in notifications.items():
        params_def = index["notifications"][method]
        out += [f'<a id="{_method_anchor(method)}"></a>', "", f"### `{method}`", ""]
        if method in _SUMMARY:
            out += [_SUMMARY[method], ""]
        out += table("Params", params_def)
        found = _find(transcripts, "server", method)
        if found is not None:
            message = norm(found[0][found[1]][1])
        else:
            params = _synthesize({"$ref": f"#/$defs/{params_def}"}, schema.defs, capture.context)
            message = norm({"jsonrpc": "2.0", "method": method, "params": params, "emittedAtMs": 0})
        captured = found is not None
        out += ["**Example**" + ("" if captured else " (synthesized from the schema)"), ""]
        out += [*_json_block(message), ""]
        examples.append(
            Example(
                "notification",
                method,
                captured,
                [(envelope, message), (params_def, message["params"])],
            )
        )

    out += [
        "## Server requests",
        "",
        "Requests threadline sends to the client. Each must be answered (a response with the",
        "same id); until then the thread's status is `active` with `waitingOnApproval` or",
        "`waitingOnUserInput`. An error response, a malformed answer, a timeout or a client",
        "that went away counts as `decline`. See [approvals.md](approvals.md).",
        "",
    ]
    for method, envelope in server_requests.items():
        entry = index["serverRequests"][method]
        out += [f'<a id="{_method_anchor(method)}"></a>', "", f"### `{method}`", ""]
        if method in _SUMMARY:
            out += [_SUMMARY[method], ""]
        out += table("Params", entry["params"]) + table("Answer (result)", entry["result"])
        found = _find(transcripts, "server", method)
        if found is None:
            raise DocgenError(f"the scripted session never produced {method}")
        transcript, at = found
        request = transcript[at][1]
        answer = next(
            m
            for side, m in transcript[at:]
            if side == "client" and "method" not in m and m.get("id") == request["id"]
        )
        request, answer = norm(request), norm(answer)
        out += ["**Example**", "", "← request", "", *_json_block(request), ""]
        out += ["→ answer", "", *_json_block(answer), ""]
        examples.append(
            Example(
                "serverRequest",
                method,
                True,
                [
                    (envelope, request),
                    (entry["params"], request["params"]),
                    (entry["result"], answer["result"]),
                ],
            )
        )

    out += [
        "## Errors",
        "",
        "Errors are JSON-RPC error responses (`JSONRPCError`); the server keeps serving after",
        "every one of them. Codes: `-32700` unparsable line (id `null`), `-32600` invalid",
        "request or state (not initialized, unknown thread, a turn already running, ...),",
        "`-32601` unknown method, `-32602` invalid params (the message names the field),",
        "`-32603` internal error. A turn that fails is not an error response: `turn/start`",
        "succeeded, and the failure arrives as an `error` notification and a `failed`",
        "`turn/completed`.",
        "",
    ]
    for what, request, response in capture.errors:
        if not isinstance(request, _Described):
            request = norm(request)
        response = norm(response)
        out += [f"**{what[:1].upper() + what[1:]}**", ""]
        if isinstance(request, _Described):
            out += [f"→ {request}", ""]
        elif isinstance(request, str):
            out += ["→ the line", "", *_text_block("the broken line itself", [request]), ""]
        else:
            out += ["→", "", *_json_block(request), ""]
        out += ["←", "", *_json_block(response), ""]
        examples.append(Example("error", what, True, [("JSONRPCError", response)]))

    # Shared types: every def the methods reach that is not a method's own params/result.
    owned = set()
    for entry in index["clientRequests"].values():
        owned |= {entry["params"], entry["result"]}
    owned |= set(index["notifications"].values())
    for entry in index["serverRequests"].values():
        owned |= {entry["params"], entry["result"]}
    shared = [n for n in schema.reachable(sorted(owned)) if n not in owned]
    for name in shared:  # registers the named unions they use (method tables did already)
        schema.fields(name)
    in_union = {m for members in schema.union_members.values() for m in members}
    entries = sorted(
        [(u, True) for u in schema.union_members]
        + [(n, False) for n in shared if n not in in_union]
    )
    out += [
        "## Types",
        "",
        "Types shared by the methods above, once each. A union (`ThreadItem`, `UserInput`,",
        "...) is an object whose discriminator field (`type`) selects the variant.",
        "",
        ", ".join(f"[`{n}`](#{_anchor(n)})" for n, _ in entries),
        "",
    ]
    for name, is_union in entries:
        if not is_union:
            out += [f'<a id="{_anchor(name)}"></a>', "", f"### `{name}`", ""]
            out += [*schema.fields(name), ""]
            continue
        members = schema.union_members[name]
        prop = schema.discriminators.get(name, "type")
        out += [f'<a id="{_anchor(name)}"></a>', "", f"### `{name}`", ""]
        out += [f"One of (by `{prop}`):", ""]
        for member in members:
            tag = schema.defs[member].get("properties", {}).get(prop, {}).get("enum", ["?"])[0]
            out.append(f"- `{json.dumps(tag)}` → [`{member}`](#{_anchor(member)})")
        out.append("")
        for member in members:
            out += [f'<a id="{_anchor(member)}"></a>', "", f"#### `{member}`", ""]
            out += [*schema.fields(member), ""]
    return "\n".join(out).rstrip("\n") + "\n", examples


# -- entry points ---------------------------------------------------------------------------------


def build_docs(schemas: Path | None = None) -> Docs:
    """Render every generated page (runs the scripted session; about a second)."""
    bundle, index = _load_schemas(schemas)
    capture = _capture()
    protocol, examples = render_protocol(bundle, index, capture)
    return Docs(
        pages={"protocol.md": protocol, "backends.md": render_backends()}, examples=examples
    )


def write_docs(out: Path, schemas: Path | None = None) -> list[Path]:
    """Write every generated page into `out`; return the paths written. `schemas` is the
    directory of the committed JSON Schemas the protocol reference is rendered from."""
    docs = build_docs(schemas)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in GENERATED:
        path = out / name
        path.write_text(docs.pages[name], encoding="utf-8")
        written.append(path)
    return written
