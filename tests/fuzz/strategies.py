"""Hypothesis strategies for protocol input lines (`FuzzInput`).

Messages are built as plain dicts (`st.from_type` does not understand msgspec Structs) and
encoded here, so a strategy controls the exact bytes: requests for every client method with
valid and deliberately wrong params, odd ids and envelopes; byte-level mutations of valid lines;
invalid UTF-8; deep nesting; lines around and far beyond the size cap; batches; responses.

Placeholders (`@@THREAD@@`, `@@TURN@@`, `@@CWD@@`, `@@PAD@@`, `"@@REQ@@"`) are filled in by the
session, so a message can name the live thread, its last turn, the work directory or the id of
the last server→client request (an approval the fuzzer may answer before the harness does).
Turn prompts are mock scripts from a harmless set: no `/run` or `/write` can come out of the
fuzzer.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

from threadline.protocol.methods import CLIENT_METHODS

from .harness import CAP, SENTINEL_PREFIX, FuzzInput
from .mutate import mutants
from .oracle import IMAGE_DETAILS, params_properties

THREAD = "@@THREAD@@"
TURN = "@@TURN@@"
REQ = "@@REQ@@"  # rendered as the id (a number) of the last server→client request
CWD = "@@CWD@@"
PAD = "@@PAD@@"

METHODS = sorted(CLIENT_METHODS)
#: Not client methods: notification names, server methods, near-misses, JSON-RPC extensions.
OTHER_METHODS = [
    "initialized",
    "",
    "thread",
    "thread/",
    "/thread/list",
    "Thread/List",
    "thread/list ",
    "thread/list\u0000",
    "thread//list",
    "thread/goal/set",
    "rpc.discover",
    "$/cancelRequest",
    "__init__",
    "prepare",
    "turn/completed",
    "item/started",
    "item/commandExecution/requestApproval",
    "thread/start\u200b",
    "\uff54\uff48\uff52\uff45\uff41\uff44/list",  # full-width letters
]

ODD_STRINGS = [
    "",
    " ",
    "ünïcödé",
    "\u0000",
    "\u2028\u2029",
    "\ufeff",
    "\U0001f600",
    "\u202eevil",
    'a"b\\c',
    "\x7f\x1f",
    "fuzz-sentinel",
    "null",
    "0",
    "-1",
    "1e308",
    "../../etc/passwd",
    "x" * 2000,
]

SAFE_SCRIPTS = [
    "/text hello there",
    "/reason hmm\n/text done",
    "/plan read | edit | test",
    "/sleep 0.02\n/text late",
    "/fail broken on purpose",
    "/ask What is your name?",
    '/tool fetch {"url": "x"}',
    "/nonsense directive",
    "/sleep -1",
    "just words",
    "",
]

# -- JSON values -------------------------------------------------------------------------------

huge_ints = st.sampled_from(
    [2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64 + 1, -(2**63), -(2**63) - 1, 10**30]
)
ints = st.one_of(st.integers(), st.integers(-3, 3), huge_ints)
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1.0, -0.0, 0.5, 1e308, -1e308, 5e-324]
)
texts = st.text(max_size=12) | st.sampled_from(ODD_STRINGS)
scalars = st.none() | st.booleans() | ints | floats | texts
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)


def _not_sentinel(value: Any) -> bool:
    return not (isinstance(value, str) and value.startswith(SENTINEL_PREFIX))


good_ids = (ints | texts | st.just("@@REQ@@")).filter(_not_sentinel)
bad_ids = st.one_of(
    st.none(),
    st.booleans(),
    floats,
    st.lists(scalars, max_size=3),
    st.dictionaries(texts, scalars, max_size=2),
)
ABSENT = object()
ids = st.one_of(good_ids, good_ids, bad_ids, st.just(ABSENT))

# -- params --------------------------------------------------------------------------------------

uuid_like = st.uuids().map(str)
thread_ids = st.one_of(
    st.just(THREAD),
    st.just(THREAD),
    uuid_like,
    st.sampled_from(["", "..", "../x", "/etc/passwd", "01234567-89AB-7DEF-8123-456789ABCDEF"]),
    texts,
)
turn_ids = st.one_of(st.just(TURN), uuid_like, texts)
cwds = st.one_of(
    st.just(CWD), st.sampled_from(["relative/dir", "/nonexistent/dir", "", "/", "\u0000"]), texts
)
cursors = st.one_of(
    st.none(),
    st.integers(-5, 50).map(str),
    st.sampled_from(["²", "٣", "1e3", "0x10", " 1", "9" * 5000, "-0", "", "abc"]),
    texts,
)
limits = st.one_of(st.none(), st.integers(-5, 2000), huge_ints)
approval_policies = st.one_of(
    st.sampled_from(["never", "on-request", "untrusted", "on-failure", ""]),
    st.fixed_dictionaries({"granular": st.dictionaries(texts, scalars, max_size=2)}),
)
sandboxes = st.sampled_from(["read-only", "workspace-write", "danger-full-access", "bogus"])
providers = st.sampled_from(["mock", "mock", "bogus", "", "MOCK"])
backend_config = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["script", "bogus", ""]) | json_values,
        "maxTurns": ints | json_values,
        "allowedTools": st.lists(texts, max_size=3) | json_values,
        "approvalRules": json_values,
        "approvalTimeoutMs": ints | floats | json_values,
        "turnTimeoutMs": st.sampled_from([1, 10, 60_000]) | json_values,
        "permissionMode": texts,
    },
)
prompts = st.sampled_from(SAFE_SCRIPTS) | texts.map(lambda s: s.replace("/", "_"))
user_inputs = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": prompts}),
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": prompts},
        optional={"text_elements": json_values},
    ),
    # images as Codex accepts them (url or fileId, a known detail): threadline also takes others
    # and echoes them back, a documented leniency (oracle._codex_rejects_echo)
    st.fixed_dictionaries(
        {"type": st.just("image"), "url": texts},
        optional={"detail": st.sampled_from(IMAGE_DETAILS), "fileId": texts},
    ),
    st.fixed_dictionaries(
        {"type": st.just("localImage"), "path": texts},
        optional={"detail": st.sampled_from(IMAGE_DETAILS)},
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["skill", "mention"]), "name": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["audio", "", "TEXT"])}),
    json_values,
)
thread_settings = {
    "model": texts,
    "modelProvider": providers,
    "cwd": cwds,
    "approvalPolicy": approval_policies,
    "sandbox": sandboxes,
    "config": backend_config,
    "baseInstructions": texts,
    "developerInstructions": texts,
    "personality": texts,
}

VALID_PARAMS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "initialize": st.fixed_dictionaries(
        {"clientInfo": st.fixed_dictionaries({"name": texts, "version": texts})},
        optional={
            "capabilities": st.fixed_dictionaries(
                {},
                optional={
                    "experimentalApi": st.booleans(),
                    "optOutNotificationMethods": st.lists(
                        st.sampled_from(["item/agentMessage/delta", "x"])
                    ),
                },
            )
        },
    ),
    "thread/start": st.fixed_dictionaries(
        {}, optional={**thread_settings, "ephemeral": st.booleans(), "serviceName": texts}
    ),
    "thread/resume": st.fixed_dictionaries(
        {"threadId": thread_ids}, optional={**thread_settings, "excludeTurns": st.booleans()}
    ),
    "thread/list": st.fixed_dictionaries(
        {},
        optional={
            "cursor": cursors,
            "limit": limits,
            "sortKey": st.sampled_from(["created_at", "updated_at", "recency_at", "x"]),
            "sortDirection": st.sampled_from(["asc", "desc", "up"]),
            "archived": st.booleans() | st.none(),
            "cwd": cwds | st.lists(cwds, max_size=3),
            "modelProviders": st.lists(providers, max_size=3),
            "searchTerm": texts,
        },
    ),
    "thread/read": st.fixed_dictionaries(
        {"threadId": thread_ids}, optional={"includeTurns": st.booleans()}
    ),
    "thread/archive": st.fixed_dictionaries(
        {"threadId": st.one_of(uuid_like, uuid_like, texts, st.just(THREAD))}
    ),
    "thread/loaded/list": st.fixed_dictionaries({}, optional={"cursor": cursors, "limit": limits}),
    "turn/start": st.fixed_dictionaries(
        {"threadId": thread_ids, "input": st.lists(user_inputs, max_size=3)},
        optional={
            "approvalPolicy": approval_policies,
            "model": texts,
            "effort": texts,
            "cwd": cwds,
            "clientUserMessageId": texts,
            "outputSchema": json_values,
        },
    ),
    "turn/interrupt": st.fixed_dictionaries({"threadId": thread_ids, "turnId": turn_ids}),
    "turn/cancel": st.fixed_dictionaries({"threadId": thread_ids, "turnId": turn_ids}),
    "model/list": st.fixed_dictionaries(
        {},
        optional={
            "cursor": cursors,
            "limit": limits,
            "includeHidden": st.booleans() | st.none(),
            "modelProvider": providers | texts,
        },
    ),
}


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


@st.composite
def wrong_params(draw: st.DrawFn, method: str) -> Any:
    """`method`'s params with one or more deliberate faults (or not params at all)."""
    params = dict(draw(VALID_PARAMS[method]))
    fault = draw(st.sampled_from(["retype", "retype", "drop", "snake", "junk", "replace", "wrap"]))
    names = params_properties(method)
    if fault == "retype" and names:
        for _ in range(draw(st.integers(1, 3))):
            params[draw(st.sampled_from(names))] = draw(json_values)
    elif fault == "drop" and params:
        params.pop(draw(st.sampled_from(sorted(params))))
    elif fault == "snake":
        params = {_snake(k): v for k, v in params.items()}
    elif fault == "junk":
        params.update(draw(st.dictionaries(texts, json_values, min_size=1, max_size=3)))
    elif fault == "replace":
        return draw(json_values)
    elif fault == "wrap":
        return [params]
    return params


# -- messages ------------------------------------------------------------------------------------


@st.composite
def requests(draw: st.DrawFn, *, methods: list[str] | None = None) -> dict[str, Any]:
    """A request or notification: any method, valid or wrong params, any id, odd envelopes."""
    choices = methods or METHODS
    method: Any = draw(
        st.one_of(
            st.sampled_from(choices),
            st.sampled_from(choices),
            st.sampled_from(OTHER_METHODS),
            texts,
            json_values,
        )
    )
    message: dict[str, Any] = {}
    envelope = draw(st.sampled_from(["none", "none", "2.0", "other"]))
    if envelope == "2.0":
        message["jsonrpc"] = "2.0"
    elif envelope == "other":
        message["jsonrpc"] = draw(st.sampled_from(["1.0", "2", "2.0 ", 2.0, 2]) | json_values)
    rid = draw(ids)
    if rid is not ABSENT:
        message["id"] = rid
    message["method"] = method
    if isinstance(method, str) and method in VALID_PARAMS:
        how = draw(st.sampled_from(["valid", "valid", "wrong", "absent", "empty-list"]))
        if how == "valid":
            message["params"] = draw(VALID_PARAMS[method])
        elif how == "wrong":
            message["params"] = draw(wrong_params(method))
        elif how == "empty-list":
            message["params"] = []
    elif draw(st.booleans()):
        message["params"] = draw(json_values)
    if draw(st.integers(0, 9)) == 0:
        message.update(draw(st.dictionaries(st.sampled_from(["result", "error", "x"]), scalars)))
    if draw(st.integers(0, 9)) == 0:
        message.pop("method", None)
    return message


@st.composite
def responses(draw: st.DrawFn) -> dict[str, Any]:
    """What a client sends back: answers to ids issued or never issued, malformed answers."""
    rid = draw(
        st.one_of(
            st.just(REQ), st.just(REQ), st.integers(0, 12), good_ids, bad_ids, st.just(ABSENT)
        )
    )
    message: dict[str, Any] = {} if rid is ABSENT else {"id": rid}
    shape = draw(st.sampled_from(["result", "result", "error", "both", "bare", "null-method"]))
    decision = st.fixed_dictionaries(
        {"decision": st.sampled_from(["accept", "acceptForSession", "decline", "cancel", "x"])}
    )
    if shape in ("result", "both", "null-method"):
        message["result"] = draw(decision | json_values)
    if shape in ("error", "both"):
        message["error"] = draw(
            st.fixed_dictionaries({"code": ints, "message": texts}) | json_values
        )
    if shape == "null-method":
        message["method"] = None
    if draw(st.booleans()):
        message["jsonrpc"] = "2.0"
    return message


def encode(value: Any, draw: st.DrawFn) -> bytes:
    """JSON text on one line, compact or spaced, ASCII-escaped or raw UTF-8."""
    text = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " :")])),
    )
    line = text.encode("utf-8")
    around = draw(
        st.sampled_from([(b"", b""), (b"", b""), (b" \t", b""), (b"", b"\r"), (b"", b" ")])
    )
    return around[0] + line + around[1]


@st.composite
def request_lines(draw: st.DrawFn, *, methods: list[str] | None = None) -> FuzzInput:
    return FuzzInput(encode(draw(requests(methods=methods)), draw), "request")


@st.composite
def response_lines(draw: st.DrawFn) -> FuzzInput:
    return FuzzInput(encode(draw(responses()), draw), "response")


APPROVAL_SCRIPTS = [
    "/ask What is your name?",
    '/tool fetch {"url": "x"}',
    "/tool fetch {}\n/ask Really?\n/text done",
    "/sleep 0.05\n/ask Late question?",
]


@st.composite
def turn_lines(draw: st.DrawFn) -> FuzzInput:
    """A turn that starts (on the live thread) and asks the client for approvals or answers,
    or an interrupt of the last turn: the server→client requests the responses case answers."""
    if draw(st.integers(0, 3)) == 0:
        method = draw(st.sampled_from(["turn/interrupt", "turn/cancel"]))
        params: dict[str, Any] = {"threadId": THREAD, "turnId": TURN}
    else:
        method = "turn/start"
        script = draw(st.sampled_from(APPROVAL_SCRIPTS) | st.sampled_from(SAFE_SCRIPTS))
        params = {"threadId": THREAD, "input": [{"type": "text", "text": script}]}
        if draw(st.booleans()):
            params["approvalPolicy"] = draw(st.sampled_from(["on-request", "never", "untrusted"]))
    message: dict[str, Any] = {"method": method, "params": params}
    if draw(st.integers(0, 4)):
        message["id"] = draw(good_ids)
    return FuzzInput(encode(message, draw), "turn")


@st.composite
def pipelined_lines(draw: st.DrawFn) -> FuzzInput:
    """Two to five lines written at once, without waiting for answers (as clients do)."""
    parts = draw(
        st.lists(
            st.one_of(
                request_lines(), request_lines(), response_lines(), batch_lines(), turn_lines()
            ),
            min_size=2,
            max_size=5,
        )
    )
    return FuzzInput(b"\n".join(p.template for p in parts), "pipelined")


initialize_requests = st.builds(
    lambda rid, params, jsonrpc: {**jsonrpc, "id": rid, "method": "initialize", "params": params},
    good_ids,
    VALID_PARAMS["initialize"],
    st.sampled_from([{}, {"jsonrpc": "2.0"}]),
)


@st.composite
def handshake_lines(draw: st.DrawFn) -> FuzzInput:
    """A valid initialize: alone, inside a batch among other elements, or among pipelined
    lines (preceded by lines that do not initialize)."""
    init = draw(initialize_requests)
    shape = draw(st.sampled_from(["single", "batch", "pipelined"]))
    if shape == "single":
        return FuzzInput(encode(init, draw), "handshake")
    others = draw(st.lists(requests(methods=["thread/list", "model/list"]), max_size=3))
    at = draw(st.integers(0, len(others)))
    if shape == "batch":
        return FuzzInput(encode([*others[:at], init, *others[at:]], draw), "handshake")
    before = draw(st.lists(st.sampled_from([b"junk", b"[]", b'{"id":1}', b"[1]"]), max_size=2))
    lines = [*before, encode(init, draw), *(encode(m, draw) for m in others)]
    return FuzzInput(b"\n".join(lines), "handshake")


batch_elements = st.one_of(
    requests(),
    requests(),
    responses(),
    st.fixed_dictionaries({"method": st.sampled_from(["initialized", *METHODS])}),
    scalars,
    st.just([]),
    st.lists(scalars, max_size=3),
    st.just({}),
)


@st.composite
def batch_lines(draw: st.DrawFn) -> FuzzInput:
    kind = draw(
        st.sampled_from(["mixed"] * 12 + ["garbage"] * 3 + ["notifications"] * 3 + ["empty", "big"])
    )
    if kind == "empty":
        elements: list[Any] = []
    elif kind == "big":  # up to a hundred elements, few distinct ones (no thread/turn starts)
        pool = [
            e
            for e in draw(st.lists(batch_elements, min_size=1, max_size=4))
            if not (isinstance(e, dict) and e.get("method") in ("thread/start", "turn/start"))
        ] or [1]
        elements = [pool[i % len(pool)] for i in range(draw(st.integers(20, 120)))]
    elif kind == "garbage":
        elements = draw(st.lists(scalars | st.lists(scalars, max_size=2), min_size=1, max_size=6))
    elif kind == "notifications":
        elements = [
            {k: v for k, v in m.items() if k != "id"}
            for m in draw(st.lists(requests(), min_size=1, max_size=5))
        ]
    else:
        elements = draw(st.lists(batch_elements, min_size=1, max_size=8))
    return FuzzInput(encode(elements, draw), f"batch-{kind}")


# -- byte level ----------------------------------------------------------------------------------

INVALID_UTF8 = [
    b"\x80",
    b"\xbf",
    b"\xc0\x80",
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xf5\x80\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xfe",
    b"\xff",
    b"\xe2\x82",
    b"\xc3",
]
INTERESTING_BYTES = [
    *(bytes([b]) for b in b'"{}[],:\\ 0-e.'),
    b"\x00",
    b"\x0b",
    b"\x0c",
    b"\r",
    b"\t",
    b"\xff",
    b"\\u",
    b"\\ud800",
    b"null",
    b"true",
]


@st.composite
def mutated_lines(draw: st.DrawFn) -> FuzzInput:
    """A valid line with byte-level damage: flips, inserts, deletes, truncation, splices."""
    base = bytearray(
        encode(draw(requests() | responses() | st.lists(requests(), max_size=3)), draw)
    )
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "replace", "dup"]))
        pos = draw(st.integers(0, max(len(base), 1) - 1)) if base else 0
        if op == "flip" and base:
            base[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            base[pos:pos] = draw(
                st.sampled_from(INTERESTING_BYTES)
                | st.sampled_from(INVALID_UTF8)
                | st.binary(min_size=1, max_size=4)
            )
        elif op == "delete":
            del base[pos : pos + draw(st.integers(1, 8))]
        elif op == "truncate":
            del base[pos:]
        elif op == "replace" and base:
            base[pos : pos + 1] = draw(st.sampled_from(INTERESTING_BYTES))
        elif op == "dup" and base:
            end = min(len(base), pos + draw(st.integers(1, 16)))
            base[pos:pos] = base[pos:end]
    line = bytes(base).replace(b"\n", b"\x0b")  # an input is one line
    return FuzzInput(line, "mutated")


@st.composite
def invalid_utf8_lines(draw: st.DrawFn) -> FuzzInput:
    """Valid JSON structure with invalid UTF-8 inside a string, a key or between tokens."""
    where = draw(st.sampled_from(["string", "key", "method", "bare", "random"]))
    bad = b"".join(draw(st.lists(st.sampled_from(INVALID_UTF8), min_size=1, max_size=3)))
    if where == "string":
        line = b'{"id":1,"method":"thread/list","params":{"searchTerm":"a' + bad + b'"}}'
    elif where == "key":
        line = b'{"id":2,"method":"thread/list","params":{"' + bad + b'":1}}'
    elif where == "method":
        line = b'{"id":3,"method":"thread/' + bad + b'"}'
    elif where == "bare":
        line = bad
    else:
        line = draw(st.binary(min_size=1, max_size=64)) + bad
    return FuzzInput(line.replace(b"\n", b"\x0b"), "invalid-utf8")


DEPTHS = [1, 2, 50, 200, 800, 10_000, 20_000, 32_000, 100_000]


@st.composite
def deep_lines(draw: st.DrawFn) -> FuzzInput:
    """Deeply nested arrays/objects: bare, as params or a param value, as the id, in a batch."""
    depth = draw(st.sampled_from(DEPTHS))
    kind = draw(st.sampled_from(["array", "object", "mixed"]))
    if kind == "array":
        opener, closer = b"[", b"]"
    elif kind == "object":
        opener, closer = b'{"a":', b"}"
    else:
        opener, closer = b'[{"a":', b"}]"
        depth //= 2  # two levels per step
    leaf = draw(st.sampled_from([b"1", b"null", b'"x"', b"[]"]))
    nested = opener * depth + leaf + closer * depth
    if draw(st.integers(0, 5)) == 0:
        nested = nested[: draw(st.integers(0, len(nested) - 1))]  # unclosed
    where = draw(st.sampled_from(["bare", "params", "field", "id", "batch"]))
    if where == "bare":
        line = nested
    elif where == "params":
        line = b'{"id":7,"method":"thread/list","params":' + nested + b"}"
    elif where == "field":
        line = b'{"id":8,"method":"model/list","params":{"deep":' + nested + b"}}"
    elif where == "id":
        line = b'{"id":' + nested + b',"method":"thread/list"}'
    else:
        line = b'[{"id":9,"method":"thread/loaded/list"},' + nested + b"]"
    return FuzzInput(line, f"deep-{depth}")


@st.composite
def huge_lines(draw: st.DrawFn) -> FuzzInput:
    """Lines of exactly the cap ± a few bytes, and far beyond it (valid JSON or not)."""
    size = draw(
        st.one_of(
            st.sampled_from([CAP - 1, CAP, CAP + 1, CAP + 2, 2 * CAP, 10 * CAP]),
            st.integers(CAP - 64, CAP + 64),
            st.integers(CAP, 8 * CAP),
        )
    )
    shape = draw(st.sampled_from(["request", "request", "garbage", "invalid-utf8", "crlf"]))
    if shape == "request":
        method = draw(st.sampled_from(["thread/list", "model/list", "turn/start", "initialize"]))
        rid = draw(ints.filter(_not_sentinel))
        template = json.dumps(
            {"id": rid, "method": method, "params": {"pad": PAD}}, separators=(",", ":")
        ).encode()
    elif shape == "garbage":
        template = PAD.encode()
    elif shape == "invalid-utf8":
        template = b'{"id":1,"method":"thread/list","params":{"p":"\xff' + PAD.encode() + b'"}}'
    else:
        template = b'{"id":"crlf","method":"thread/list","params":{"p":"' + PAD.encode() + b'"}}\r'
    return FuzzInput(template, "huge", pad_to=size)


NUMBER_LITERALS = [
    b"18446744073709551617",  # 2**64 + 1
    b"-9223372036854775809",  # -2**63 - 1
    b"340282366920938463463374607431768211457",
    b"1" + b"0" * 4299,  # 4300 digits: the most any JSON decoder here accepts
    b"1" + b"0" * 4300,  # one digit more: unparsable
    b"1e308",
    b"-1e308",
    b"1.7976931348623159e308",  # overflows a double
    b"5e-324",
    b"1e-400",
    b"-0",
    b"-0.0",
    b"1.0",
    b"1E2",
    b"0",
    b"007",
    b"1.",
    b"NaN",
    b"Infinity",
    b"-Infinity",
]


@st.composite
def id_literal_lines(draw: st.DrawFn) -> FuzzInput:
    """Ids as raw number literals (huge, negative, float, overflowing, malformed), odd strings."""
    literal = draw(
        st.sampled_from(NUMBER_LITERALS)
        | st.sampled_from(ODD_STRINGS).map(lambda s: json.dumps(s).encode())
        | st.sampled_from([b'"\\ud800"', b'"\\udfff\\ud800"', b'"\\ud83d\\ude00"', b'"\\u0000"'])
    )
    method = draw(st.sampled_from(["thread/list", "nope", "initialize", ""]))
    shape = draw(st.sampled_from(["request", "response", "bare-id", "batch"]))
    if shape == "request":
        line = b'{"id":' + literal + b',"method":"' + method.encode() + b'","params":{}}'
    elif shape == "response":
        line = b'{"id":' + literal + b',"result":{"decision":"accept"}}'
    elif shape == "bare-id":
        line = b'{"id":' + literal + b"}"
    else:
        line = b'[{"id":' + literal + b',"method":"thread/loaded/list"},{"id":' + literal + b"}]"
    return FuzzInput(line, "id-literal")


edge_lines = st.one_of(invalid_utf8_lines(), deep_lines(), huge_lines(), id_literal_lines())
any_line = st.one_of(
    request_lines(),
    request_lines(),
    response_lines(),
    batch_lines(),
    mutated_lines(),
    edge_lines,
)


# -- cases: a drawn base and its seeded mutants ----------------------------------------------


@st.composite
def cases(
    draw: st.DrawFn, base: st.SearchStrategy[FuzzInput], derived: int, structural: float
) -> list[FuzzInput]:
    """One input drawn by hypothesis, then `derived` mutants of it from a drawn seed (see
    `mutate`): structural ones with probability `structural`, else byte-level."""
    first = draw(base)
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    lines = first.template.split(b"\n")
    derived_inputs = []
    for _ in range(derived):
        # pipelined lines: mutate one of them, keep the others
        at = rng.randrange(len(lines))
        [(line, kind)] = mutants(lines[at], rng, 1, structural)
        template = b"\n".join([*lines[:at], line, *lines[at + 1 :]])
        derived_inputs.append(FuzzInput(template, kind, pad_to=first.pad_to))
    return [first, *derived_inputs]
