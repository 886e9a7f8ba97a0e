"""Cheap seeded mutators: from one hypothesis-drawn input, derive more inputs with
`random.Random(seed)` (the seed is drawn by hypothesis, so a case replays exactly).

Hypothesis spends ~0.15 ms per choice it draws; a fully drawn request costs ~10 ms, far more
than the ~3 ms the server needs to answer it. Deriving several mutants per drawn base keeps the
fuzzer's time on the server: structural mutants (a field retyped or dropped, another id,
method or envelope, wrapped in a batch) and byte-level mutants (flips, inserts, deletes,
truncation, invalid UTF-8).
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from threadline.protocol.methods import CLIENT_METHODS

from .oracle import Skip, Unparsable, params_properties, reference_decode

#: Values a mutated field may get: every JSON type, edge numbers, odd strings, placeholders.
VALUE_POOL: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**64 + 1,
    -(2**63) - 1,
    10**30,
    0.5,
    1.0,
    -0.0,
    1e308,
    5e-324,
    "",
    " ",
    "x",
    "0",
    "²",
    "9" * 5000,
    "\u0000",
    "\u2028",
    "\U0001f600",
    "ünïcödé",
    "../../etc/passwd",
    "/",
    "@@THREAD@@",
    "@@TURN@@",
    "@@CWD@@",
    "mock",
    "never",
    "text",
    [],
    [1, "a"],
    [{"type": "text", "text": "/text hi"}],
    [{"type": "image", "url": "https://example.com/x.png"}],
    [[]],
    {},
    {"a": 1},
    {"type": "text"},
    {"name": "n", "version": "v"},
    {"granular": {}},
    {"mode": "script", "maxTurns": 0},
    {"decision": "accept"},
    {"code": 1, "message": "m"},
]
ID_POOL: list[Any] = [
    0,
    1,
    -1,
    2**63 - 1,
    2**64 + 1,
    -(2**63) - 1,
    10**30,
    "a",
    "",
    "\u0000",
    "\u202e",
    "\U0001f600",
    1.5,
    1.0,
    1e308,
    True,
    False,
    None,
    [],
    [1],
    {},
    {"id": 1},
]
ENVELOPE_KEYS = ["id", "method", "params", "jsonrpc", "result", "error"]
METHOD_POOL = [
    *sorted(CLIENT_METHODS),
    "initialized",
    "",
    "nope",
    "thread/list ",
    "Thread/List",
    None,
    7,
    ["thread/list"],
]
JSONRPC_POOL: list[Any] = ["2.0", "1.0", "2", 2.0, None, "", {"v": 2}]
INTERESTING_BYTES = [
    *(bytes([b]) for b in b'"{}[],:\\ 0-e.'),
    b"\x00",
    b"\x0b",
    b"\x0c",
    b"\r",
    b"\t",
    b"\\u",
    b"\\ud800",
    b"null",
    b"true",
    b"\x80",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xff",
    b"\xe2\x82",
]


def encode(value: Any, rng: random.Random) -> bytes:
    text = json.dumps(
        value,
        ensure_ascii=rng.random() < 0.5,
        separators=rng.choice([(",", ":"), (", ", ": ")]),
    )
    return text.encode("utf-8")


def _pick(pool: list[Any], rng: random.Random) -> Any:
    """A copy: a pooled list or dict put into a message must not be mutated later (or end up
    inside itself)."""
    return copy.deepcopy(rng.choice(pool))


def _containers(value: Any, depth: int = 0) -> list[Any]:
    found = []
    if isinstance(value, dict | list) and depth < 5:
        found.append(value)
        children = value.values() if isinstance(value, dict) else value
        for child in children:
            found.extend(_containers(child, depth + 1))
    return found


def _keys_for(message: Any) -> list[str]:
    method = message.get("method") if isinstance(message, dict) else None
    names = (
        params_properties(method) if isinstance(method, str) and method in CLIENT_METHODS else []
    )
    return [*names, "threadId", "input", "cursor", "limit", "x", ""]


def mutate_value(value: Any, rng: random.Random) -> Any:
    """One or two structural changes to a decoded message (or batch)."""
    value = json.loads(json.dumps(value))  # a private copy
    for _ in range(rng.randint(1, 2)):
        top = value
        if isinstance(top, list) and top and rng.random() < 0.7:
            top = rng.choice(top)  # mutate inside one element of a batch
        op = rng.choice(["field", "field", "drop", "id", "method", "envelope", "params", "batch"])
        if op == "batch":
            value = rng.choice(
                [[value], [value, {"method": "initialized"}], [value, value], [value, 1]]
            )
            continue
        if not isinstance(top, dict):
            value = rng.choice([[value], {"id": 1, "method": "thread/list", "params": value}])
            continue
        if op == "field":
            containers = _containers(top)
            target = rng.choice(containers)
            if isinstance(target, dict):
                key = rng.choice([*target.keys(), *_keys_for(top)] or ["x"])
                target[key] = _pick(VALUE_POOL, rng)
            elif target and rng.random() < 0.5:
                target[rng.randrange(len(target))] = _pick(VALUE_POOL, rng)
            else:
                target.append(_pick(VALUE_POOL, rng))
        elif op == "drop":
            containers = [c for c in _containers(top) if isinstance(c, dict) and c]
            if containers:
                target = rng.choice(containers)
                del target[rng.choice(list(target))]
        elif op == "id":
            if "id" in top and rng.random() < 0.2:
                del top["id"]
            else:
                top["id"] = _pick(ID_POOL, rng)
        elif op == "method":
            top["method"] = rng.choice(METHOD_POOL)
        elif op == "envelope":
            key = rng.choice(ENVELOPE_KEYS)
            pool = JSONRPC_POOL if key == "jsonrpc" else VALUE_POOL
            top[key] = _pick(pool, rng)
        elif op == "params":
            top["params"] = _pick(VALUE_POOL, rng)
    return value


def mutate_bytes(line: bytes, rng: random.Random) -> bytes:
    """One to four byte-level changes."""
    data = bytearray(line)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["flip", "insert", "delete", "truncate", "replace", "dup"])
        pos = rng.randrange(len(data)) if data else 0
        if op == "flip" and data:
            data[pos] ^= 1 << rng.randrange(8)
        elif op == "insert":
            data[pos:pos] = rng.choice(INTERESTING_BYTES)
        elif op == "delete":
            del data[pos : pos + rng.randint(1, 8)]
        elif op == "truncate":
            del data[pos:]
        elif op == "replace" and data:
            data[pos : pos + 1] = rng.choice(INTERESTING_BYTES)
        elif op == "dup" and data:
            data[pos:pos] = data[pos : pos + rng.randint(1, 16)]
    return bytes(data).replace(b"\n", b"\x0b")  # an input is one line


def mutants(
    line: bytes, rng: random.Random, count: int, structural: float
) -> list[tuple[bytes, str]]:
    """`count` (line, kind) derived from `line`: structural with probability `structural` (when
    the line is JSON), else byte-level."""
    try:
        value: Any = reference_decode(line)
        decodable = True
    except (Unparsable, Skip):
        decodable = False
    out = []
    for _ in range(count):
        if decodable and rng.random() < structural:
            out.append((encode(mutate_value(value, rng), rng), "structural-mutant"))
        else:
            out.append((mutate_bytes(line, rng), "byte-mutant"))
    return out
