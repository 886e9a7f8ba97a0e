"""What threadline must answer to one input line: an independent model of the wire rules.

The model is written from the rules (JSON-RPC 2.0, README "Protocol in one screen",
docs/protocol-notes.md), not from the server's code paths:

- the line is decoded by a *reference* parser (strict UTF-8 and Python's `json`, with the
  JSON rules msgspec also enforces: no NaN/Infinity, no number that overflows a double, no lone
  surrogate escape); params are checked against the published JSON Schemas in `schemas/`
  (with `integer` meaning a JSON integer, never `1.0`), not with the server's msgspec types;
- a line longer than the cap → one `-32600` (id null); an unparsable line → one `-32700`
  (id null); a blank line (JSON whitespace only) → nothing;
- a message that is not an object, an empty batch, a bad id, a missing method, a bad
  `jsonrpc` or non-structured `params` → `-32600`; before `initialize` every request → `-32600`;
  an unknown method → `-32601`; params that do not fit the method's schema → `-32602`;
- notifications and responses (to ids issued or not) → nothing;
- a batch → one array with an entry per element that gets an answer, in order (nothing at all
  if no element does).

`expect_line` turns a line and the connection state into an `Expectation` (or `Skip`, where
the model makes no claim); `check_window` compares the expectations of an input's lines with
what the server wrote between the input and the next sentinel (for pipelined lines, in any
order, each answer matching a different line).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jsonschema
from referencing import Registry, Resource

from tests.support.schema_check import SCHEMAS, methods

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

RESULT = "result"

#: Errors a method may answer to params that fit its schema: state (unknown or unloaded
#: thread, a turn already running: -32600) and semantic checks the schema cannot express
#: (cwd must exist, known backend, config values, a numeric cursor: -32602).
APP_ERRORS: dict[str, frozenset[int]] = {
    "initialize": frozenset(),
    "thread/start": frozenset({INVALID_PARAMS}),
    "thread/resume": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/list": frozenset({INVALID_PARAMS}),
    "thread/read": frozenset({INVALID_REQUEST}),
    "thread/archive": frozenset({INVALID_REQUEST}),
    "thread/loaded/list": frozenset(),
    "turn/start": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "turn/interrupt": frozenset({INVALID_REQUEST}),
    "turn/cancel": frozenset({INVALID_REQUEST}),
    "model/list": frozenset(),
    "thread/fork": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/unarchive": frozenset({INVALID_REQUEST}),
    "thread/delete": frozenset({INVALID_REQUEST}),
    "thread/name/set": frozenset({INVALID_REQUEST}),
    "thread/metadata/update": frozenset({INVALID_REQUEST}),
    "thread/turns/list": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/items/list": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/inject_items": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/compact/start": frozenset({INVALID_REQUEST}),
    "turn/steer": frozenset({INVALID_REQUEST, INVALID_PARAMS}),
    "thread/unsubscribe": frozenset({INVALID_REQUEST}),
    "mailbox/send": frozenset({INVALID_REQUEST}),
    "mailbox/list": frozenset({INVALID_REQUEST}),
    "mailbox/read": frozenset({INVALID_REQUEST}),
    "mailbox/markRead": frozenset({INVALID_REQUEST}),
}

#: Server→client request ids this close above the last one seen may be in flight while a turn
#: runs; a bare `{"id": n}` for such an n may be taken as a (malformed) response.
IN_FLIGHT_SLACK = 4


# -- reference decoding ----------------------------------------------------------------------


class Unparsable(Exception):
    pass


def _no_constant(name: str) -> Any:
    raise Unparsable(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Unparsable(f"number out of range: {text[:40]}")
    return value


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())


def _has_lone_surrogate(text: str) -> bool:
    # Valid escaped pairs were combined by the decoder; what is left in D800-DFFF is lone.
    return any("\ud800" <= ch <= "\udfff" for ch in text)


#: Nesting the server must decode, and nesting it must refuse. msgspec stops at the recursion
#: limit (1000, less the decoder's own stack: ~990 here); in between the outcome depends on the
#: stack, so the model makes no claim (`Skip`) and such inputs are not sent.
MAX_DEPTH_DECODED = 900
MIN_DEPTH_REFUSED = 1000


class Skip(Exception):
    """The model makes no claim about this line (the reason is the message); it is not sent."""


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")


def nesting(line: bytes) -> int:
    """The deepest nesting of arrays/objects in `line` (brackets inside strings ignored)."""
    if line.count(b"[") + line.count(b"{") <= MAX_DEPTH_DECODED:
        return 0  # cheap bound: not deep enough to matter
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b"", line)):
        if match.group() in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def reference_decode(line: bytes) -> Any:
    """The JSON value of `line`, or Unparsable (or Skip: see MAX_DEPTH_DECODED)."""
    try:
        text = line.decode("utf-8")  # strict: no overlongs, no encoded surrogates
    except UnicodeDecodeError as exc:
        raise Unparsable(str(exc)) from None
    depth = nesting(line)
    if depth >= MIN_DEPTH_REFUSED:
        raise Unparsable(f"nested {depth} deep")
    if depth > MAX_DEPTH_DECODED:
        raise Skip("nesting at the decoder's limit")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int digit limit, depth
        raise Unparsable(str(exc)[:200]) from None
    if any(_has_lone_surrogate(s) for s in _strings(value)):
        raise Unparsable("lone surrogate escape")
    return value


def is_blank(line: bytes) -> bool:
    """Only JSON whitespace (RFC 8259: space, tab, CR, LF)."""
    return not line.strip(b" \t\r\n")


# -- params against the published schemas ------------------------------------------------------


def _is_integer(_checker: Any, instance: Any) -> bool:
    # A JSON integer: `1.0` is a number but not an integer on this wire (as for Codex/serde).
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@cache
def _bundle() -> dict[str, Any]:
    return json.loads((SCHEMAS / "threadline.schema.json").read_text())  # type: ignore[no-any-return]


def params_properties(method: str) -> list[str]:
    """The params fields `method`'s schema names."""
    params_def = methods()["clientRequests"][method]["params"]
    return sorted(_bundle()["$defs"][params_def].get("properties", {}))


@cache
def _params_validator(method: str) -> Any:
    registry: Registry[Any] = Registry().with_resource(
        "threadline.schema.json", Resource.from_contents(_bundle())
    )
    params_def = methods()["clientRequests"][method]["params"]
    schema = {"$ref": f"threadline.schema.json#/$defs/{params_def}"}
    return _StrictValidator(schema, registry=registry)


def params_fit(method: str, params: Any) -> bool:
    """Whether `params` (absent = {}) fit `method`'s params schema. A by-position array is
    accepted only empty (= no params)."""
    if isinstance(params, list):
        if params:
            return False
        params = {}
    return bool(_params_validator(method).is_valid(params))


# -- expectations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One expected response object."""

    id: Any  # the expected id (None: null)
    outcomes: frozenset[int | str]  # RESULT and/or error codes
    why: str
    method: str | None = None  # the method, when a result may come (for schema checks)
    optional: bool = False  # may be absent (ambiguous routing, see IN_FLIGHT_SLACK)


@dataclass
class State:
    """What the model knows about the connection."""

    initialized: bool = False
    #: Server→client requests seen so far; their ids are 0..issued-1.
    issued: int = 0
    #: Whether a turn may be issuing server requests right now.
    turns_possible: bool = False


@dataclass
class Expectation:
    """The answer to one line: nothing, one reply, or one batch answer (an array with these
    replies in order; absent when every entry is optional and none came)."""

    batch: bool
    replies: list[Reply] = field(default_factory=list)
    #: Whether this line initializes the connection.
    initializes: bool = False

    @property
    def answers_required(self) -> int:
        return 1 if any(not r.optional for r in self.replies) else 0

    @property
    def has_optional(self) -> bool:
        return any(r.optional for r in self.replies)

    def result_methods(self) -> dict[Any, str]:
        """id → method for the replies that may be results (ambiguous ids left out)."""
        found: dict[Any, str | None] = {}
        for reply in self.replies:
            if reply.method is None or reply.id is None:
                continue
            key = _id_key(reply.id)
            found[key] = reply.method if key not in found else None
        return {key[1]: m for key, m in found.items() if m is not None}

    def describe(self) -> str:
        kind = "batch" if self.batch else "single"
        if not self.replies:
            return f"{kind}: no answer"
        parts = [
            f"id={r.id!r} {sorted(map(str, r.outcomes))}{'?' if r.optional else ''} ({r.why})"
            for r in self.replies
        ]
        return f"{kind}: " + "; ".join(parts)


def _id_key(value: Any) -> tuple[str, Any]:
    """Ids compare by type too: 1, 1.0 and true are different ids."""
    return (type(value).__name__, value)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


IMAGE_DETAILS = ("auto", "low", "high", "original")


def _codex_rejects_echo(message: dict[str, Any]) -> bool:
    """A turn's input that threadline accepts and echoes in its userMessage item, but Codex
    0.169.0 rejects: an image without `url`/`fileId`, an image `detail` outside Codex's enum
    (docs/codex-conformance.md, "Input leniency"). The echo would fail the Codex schema check
    that ServerProcess runs, for a documented leniency rather than a wire bug."""
    params = message.get("params")
    items = params.get("input") if isinstance(params, dict) else None
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or item.get("type") not in ("image", "localImage"):
            continue
        if item.get("detail") is not None and item.get("detail") not in IMAGE_DETAILS:
            return True
        if item["type"] == "image" and not any(
            isinstance(item.get(k), str) for k in ("url", "fileId")
        ):
            return True
    return False


def expect_message(message: Any, state: State) -> Reply | None:
    """The answer to one decoded message (alone or in a batch); None: no answer. Updates
    `state.initialized` when the message initializes the connection."""
    if not isinstance(message, dict):
        return Reply(None, frozenset({INVALID_REQUEST}), "not an object")
    if message.get("method") == "turn/start" and _codex_rejects_echo(message):
        raise Skip("an input only threadline accepts (docs/codex-conformance.md)")
    has_id = "id" in message
    rid = message.get("id")
    method = message.get("method")
    maybe_routed = False
    if method is None and has_id:
        if "result" in message or "error" in message:
            return None  # a response (to an id issued or not): routed or logged, never answered
        if _is_int(rid) and 0 <= rid < state.issued:
            return None  # a malformed answer to our request: routed (and declined)
        maybe_routed = (
            state.turns_possible and _is_int(rid) and 0 <= rid - state.issued < IN_FLIGHT_SLACK
        )
    if has_id and not _valid_id(rid):
        return Reply(None, frozenset({INVALID_REQUEST}), "id must be a string or an integer")
    reply_id = rid if has_id else None
    if not isinstance(method, str):
        return Reply(
            reply_id, frozenset({INVALID_REQUEST}), "missing/non-string method", None, maybe_routed
        )
    if message.get("jsonrpc", "2.0") != "2.0":
        return Reply(reply_id, frozenset({INVALID_REQUEST}), "bad jsonrpc")
    if "params" in message and not isinstance(message["params"], dict | list):
        return Reply(reply_id, frozenset({INVALID_REQUEST}), "params not structured")
    params = message.get("params", {})
    if not has_id:
        return None  # a notification: never answered
    if method == "initialize":
        if state.initialized:
            return Reply(rid, frozenset({INVALID_REQUEST}), "already initialized")
        if not params_fit(method, params):
            return Reply(rid, frozenset({INVALID_PARAMS}), "bad initialize params")
        state.initialized = True
        return Reply(rid, frozenset({RESULT}), "initialize", method)
    if not state.initialized:
        return Reply(rid, frozenset({INVALID_REQUEST}), "not initialized")
    if method not in APP_ERRORS:
        return Reply(rid, frozenset({METHOD_NOT_FOUND}), "unknown method")
    if not params_fit(method, params):
        return Reply(rid, frozenset({INVALID_PARAMS}), f"params do not fit {method}")
    return Reply(rid, frozenset({RESULT}) | APP_ERRORS[method], f"valid {method}", method)


def expect_line(line: bytes, state: State, cap: int) -> Expectation:
    """The answer to one input line (without its newline). Updates `state.initialized`."""
    if len(line) > cap:
        return Expectation(False, [Reply(None, frozenset({INVALID_REQUEST}), "over the cap")])
    if is_blank(line):
        return Expectation(False)
    try:
        value = reference_decode(line)
    except Unparsable as exc:
        return Expectation(False, [Reply(None, frozenset({PARSE_ERROR}), f"unparsable: {exc}")])
    was = state.initialized
    if isinstance(value, list):
        if not value:
            return Expectation(False, [Reply(None, frozenset({INVALID_REQUEST}), "empty batch")])
        replies = [r for r in (expect_message(m, state) for m in value) if r is not None]
        return Expectation(True, replies, initializes=state.initialized and not was)
    reply = expect_message(value, state)
    return Expectation(
        False, [] if reply is None else [reply], initializes=state.initialized and not was
    )


# -- checking what came back ---------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def _check_reply(expected: Reply, actual: Any) -> str | None:
    """None if `actual` is an acceptable answer for `expected`, else why not."""
    if not isinstance(actual, dict):
        return f"not an object: {actual!r}"[:300]
    if "id" not in actual or _id_key(actual["id"]) != _id_key(expected.id):
        return f"id {actual.get('id', '<missing>')!r} instead of {expected.id!r}"[:300]
    if "error" in actual:
        error = actual["error"]
        code = error.get("code") if isinstance(error, dict) else None
        if code not in expected.outcomes:
            return f"error {error!r} instead of {sorted(map(str, expected.outcomes))}"[:500]
        message = error.get("message", "")
        if code == PARSE_ERROR and not message.startswith("Parse error"):
            return f"-32700 with message {message!r}"
        if (
            code == INVALID_REQUEST
            and expected.why == "over the cap"
            and "too large" not in message
        ):
            return f"oversized line answered with {message!r}"
        return None
    if "result" not in actual:
        return f"neither result nor error: {actual!r}"[:300]
    if RESULT not in expected.outcomes:
        return f"a result instead of {sorted(map(str, expected.outcomes))}"
    return None


def _match_batch(expected: list[Reply], actual: Any) -> str | None:
    if not isinstance(actual, list):
        return f"expected a batch answer (array), got {actual!r}"[:300]
    i = 0
    for reply in expected:
        if i < len(actual) and _check_reply(reply, actual[i]) is None:
            i += 1
            continue
        if reply.optional:
            continue
        got = actual[i] if i < len(actual) else "<nothing>"
        detail = _check_reply(reply, got) if i < len(actual) else "missing"
        return f"batch entry {i}: {detail} (expected {reply.why})"
    if i < len(actual):
        return f"batch answer has {len(actual) - i} extra entries: {actual[i:]!r}"[:500]
    return None


def _check_one(expected: Expectation, answers: list[Any]) -> None:
    problem: str | None = None
    if expected.batch:
        if not expected.replies:
            if answers:
                problem = f"an all-notification batch got an answer: {answers!r}"[:500]
        elif len(answers) > 1:
            problem = f"{len(answers)} answers to one batch: {answers!r}"[:800]
        elif not answers:
            if expected.answers_required:
                problem = "no answer to a batch"
        else:
            problem = _match_batch(expected.replies, answers[0])
    else:
        if len(answers) > 1:
            problem = f"{len(answers)} answers to one message: {answers!r}"[:800]
        elif not expected.replies:
            if answers:
                problem = f"expected no answer, got {answers[0]!r}"[:500]
        elif not answers:
            if expected.answers_required:
                problem = "no answer"
        elif isinstance(answers[0], list):
            problem = f"a batch answer to a single message: {answers[0]!r}"[:500]
        else:
            problem = _check_reply(expected.replies[0], answers[0])
    if problem is not None:
        raise Mismatch(f"{problem}\n  expected {expected.describe()}")


def _accepts(expected: Expectation, answer: Any) -> bool:
    if expected.batch:
        return bool(expected.replies) and _match_batch(expected.replies, answer) is None
    return (
        bool(expected.replies)
        and not isinstance(answer, list)
        and _check_reply(expected.replies[0], answer) is None
    )


def _assign(expectations: list[Expectation], answers: list[Any], taken: set[int]) -> bool:
    """Whether every answer can go to its own accepting expectation, leaving no required
    expectation without one (backtracking; a window holds a handful of lines)."""
    if not answers:
        return all(i in taken or not e.answers_required for i, e in enumerate(expectations))
    return any(
        i not in taken
        and _accepts(expected, answers[0])
        and _assign(expectations, answers[1:], taken | {i})
        for i, expected in enumerate(expectations)
    )


def check_window(expectations: list[Expectation], answers: list[Any]) -> None:
    """`answers`: every response/error/batch message the server wrote for the input's lines
    (between them and the sentinel's answer, or required ones arriving after it). One line:
    its answer, checked in detail. Pipelined lines: answers may come in any order (requests run
    concurrently), so each must match a different line's expectation."""
    if len(expectations) == 1:
        _check_one(expectations[0], answers)
    elif not _assign(expectations, answers, set()):
        raise Mismatch(
            f"answers {answers!r}"[:1500] + f" do not fit the lines:\n  {describe(expectations)}"
        )


def describe(expectations: list[Expectation]) -> str:
    return "\n  ".join(f"line {n}: {e.describe()}" for n, e in enumerate(expectations, 1))


def result_methods(expectations: list[Expectation]) -> dict[Any, str]:
    """id → method for the replies that may be results, over every line (ambiguous left out)."""
    found: dict[Any, str | None] = {}
    for expected in expectations:
        for key, method in expected.result_methods().items():
            found[key] = method if found.get(key, method) == method else None
    return {k: m for k, m in found.items() if m is not None}
