"""The Codex conformance checker (tests/support/codex_conformance.py) itself: it runs on the
schema the pinned binary generates, it covers exactly our methods, it accepts Codex's own output,
it rejects what Codex's schema rejects, and it tolerates only the documented deviations."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import inspect as mi

import threadline.protocol as protocol
from tests.support import codex_conformance as conformance
from tests.support.schema_check import methods

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "codex-conformance.md"
#: Recordings of the real `codex app-server` (scripts/record-transcripts).
TRANSCRIPTS = ROOT / "tests" / "transcripts" / "codex"

THREAD = "01a20274-b791-7783-9f5e-d851c0731d82"
TURN = "01a20274-b7bd-7c31-8d6e-6f1fa5b3c8a0"


@pytest.fixture(scope="module")
def checker() -> conformance.CodexChecker:
    """A checker of its own (so the e2e count is not mixed with these), on the schema the
    session generated with the pinned binary."""
    session = conformance.session_checker()
    if session is None:
        reason = f"Codex conformance cannot run: {conformance.unavailable_reason()}"
        if conformance.required():
            pytest.fail(reason + " (CI must run it)", pytrace=False)
        pytest.skip(reason)
    return conformance.CodexChecker(session.bundle_path, session.version)


def ok(checker: conformance.CodexChecker, message: Any, ids: dict[Any, str] | None = None) -> None:
    violations = checker.check(message, ids or {})
    assert not violations, "\n".join(map(str, violations))


def bad(checker: conformance.CodexChecker, message: Any, ids: dict[Any, str] | None = None) -> str:
    violations = checker.check(message, ids or {})
    assert violations, f"accepted: {message!r}"
    return "\n".join(map(str, violations))


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def delta(**change: Any) -> dict[str, Any]:
    params = {"threadId": THREAD, "turnId": TURN, "itemId": "i1", "delta": "hi "}
    params.update(change)
    return notification("item/agentMessage/delta", {k: v for k, v in params.items() if v != ...})


# -- the schema ----------------------------------------------------------------------------------


def test_the_schema_is_generated_by_the_pinned_binary(checker: conformance.CodexChecker) -> None:
    assert checker.version == conformance.PINNED_VERSION
    assert checker.bundle_path.name == conformance.BUNDLE
    assert not checker.bundle_path.is_relative_to(ROOT)  # generated in this session, not a copy
    # the unions the checker picks variants from
    assert len(checker.notifications) > 50
    assert "item/commandExecution/requestApproval" in checker.server_requests
    assert checker.response_def("thread/start") == "#/definitions/v2/ThreadStartResponse"
    assert checker.response_def("initialize") == "#/definitions/InitializeResponse"
    assert checker.response_def("turn/cancel") is None


def test_every_method_we_speak_is_codex_or_a_listed_addition(
    checker: conformance.CodexChecker,
) -> None:
    ours = methods()
    only = conformance.THREADLINE_ONLY
    for method in ours["clientRequests"]:
        if method in only["response"]:
            assert checker.response_def(method) is None, f"Codex now has {method}"
        else:
            assert checker.response_def(method), f"Codex has no {method}"
    for method in ours["notifications"]:
        assert (method in checker.notifications) != (method in only["notification"]), method
    for method in ours["serverRequests"]:
        assert (method in checker.server_requests) != (method in only["serverRequest"]), method
    listed = set().union(*only.values())
    spoken = set(ours["clientRequests"]) | set(ours["notifications"]) | set(ours["serverRequests"])
    assert listed <= spoken, f"listed as additions but not spoken: {listed - spoken}"


def test_the_doc_table_is_the_shared_subset(checker: conformance.CodexChecker) -> None:
    rows = re.findall(r"^\| `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|", DOC.read_text(), re.M)
    table = {(method, direction.strip()): codex.strip() for method, direction, codex in rows}
    ours = methods()
    expected = {}
    for method in ours["clientRequests"]:
        expected[method, "response"] = "no" if checker.response_def(method) is None else "yes"
    for method in ours["notifications"]:
        expected[method, "notification"] = "yes" if method in checker.notifications else "no"
    for method in ours["serverRequests"]:
        expected[method, "server request"] = "yes" if method in checker.server_requests else "no"
    assert {k: v.split()[0] for k, v in table.items()} == expected


# -- what is checked -----------------------------------------------------------------------------


def test_notifications(checker: conformance.CodexChecker) -> None:
    ok(checker, delta())
    ok(checker, {**delta(), "emittedAtMs": 1795337533326})  # Codex's envelope member
    assert "'delta' is a required property" in bad(checker, delta(delta=...))
    assert "is not of type 'string'" in bad(checker, delta(delta=5))
    assert "is not of type 'integer'" in bad(checker, {**delta(), "emittedAtMs": "now"})
    status = {"threadId": THREAD, "status": {"type": "idle"}}
    ok(checker, notification("thread/status/changed", status))
    bad(checker, notification("thread/status/changed", {**status, "status": {"type": "busy"}}))
    active = {"type": "active", "activeFlags": ["waitingOnApproval"]}
    ok(checker, notification("thread/status/changed", {**status, "status": active}))
    active["activeFlags"] = ["thinking"]  # not a Codex flag
    bad(checker, notification("thread/status/changed", {**status, "status": active}))


def test_unknown_methods_fail_and_listed_additions_are_skipped(
    checker: conformance.CodexChecker,
) -> None:
    assert "unknown to Codex" in bad(checker, notification("item/made/up", {}))
    request = {"jsonrpc": "2.0", "id": 3, "method": "item/made/up", "params": {}}
    assert "unknown to Codex" in bad(checker, request)
    ok(checker, notification("item/approval/autoDecided", {"anything": True}))
    ok(checker, {"jsonrpc": "2.0", "id": 4, "method": "item/tool/requestApproval", "params": {}})
    ok(checker, {"jsonrpc": "2.0", "id": 7, "result": {"anything": 1}}, {7: "turn/cancel"})
    assert checker.counts["skipped", "turn/cancel"] == 1


def test_server_requests(checker: conformance.CodexChecker) -> None:
    params = {
        "threadId": THREAD,
        "turnId": TURN,
        "itemId": "c1",
        "startedAtMs": 1795337533326,
        "command": "echo hi",
        "cwd": "/tmp",
        "reason": "wants to run",
    }
    request = {"jsonrpc": "2.0", "id": 0, "method": "item/commandExecution/requestApproval"}
    ok(checker, {**request, "params": params})
    assert "'itemId' is a required property" in bad(
        checker, {**request, "params": {k: v for k, v in params.items() if k != "itemId"}}
    )
    bad(checker, {**request, "params": {**params, "command": ["echo", "hi"]}})  # a string in v2


def test_responses_are_checked_by_their_request_method(
    checker: conformance.CodexChecker,
) -> None:
    ok(checker, {"jsonrpc": "2.0", "id": 1, "result": {}}, {1: "turn/interrupt"})
    # turn/start answers a Turn: an unknown status is caught
    turn = {"id": TURN, "items": [], "status": "inProgress", "error": None}
    ok(checker, {"id": 2, "result": {"turn": turn}}, {2: "turn/start"})
    assert "'running' is not one of" in bad(
        checker, {"id": 2, "result": {"turn": {**turn, "status": "running"}}}, {2: "turn/start"}
    )
    assert "'turn' is a required property" in bad(
        checker, {"id": 2, "result": {}}, {2: "turn/start"}
    )
    # an id the test did not register: the envelope only
    ok(checker, {"id": 9, "result": {"whatever": True}})
    assert "'result' is a required property" in bad(checker, {"id": 9})


def test_errors_and_batches(checker: conformance.CodexChecker) -> None:
    ok(checker, {"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "nope"}})
    bad(checker, {"id": 5, "error": {"code": "x", "message": "nope"}})
    bad(checker, {"id": 5, "error": {"message": "no code"}})
    good = {"jsonrpc": "2.0", "id": 1, "result": {}}
    ok(checker, [good, {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "x"}}])
    assert "'turn' is a required property" in bad(
        checker, [good, {"id": 2, "result": {}}], {1: "turn/interrupt", 2: "turn/start"}
    )


# -- the documented deviations, and only those ---------------------------------------------------


def test_jsonrpc_member_is_tolerated_only_as_2_0(checker: conformance.CodexChecker) -> None:
    ok(checker, {"jsonrpc": "2.0", "id": 1, "result": {}}, {1: "turn/interrupt"})
    # Codex's envelope schemas do not forbid other members, so any other value would pass its
    # schema too; our own schema check (schemas/) requires exactly "2.0".
    assert conformance._tolerate({"jsonrpc": "1.0", "id": 1}) == {"jsonrpc": "1.0", "id": 1}


def test_null_id_is_tolerated_only_on_unattributable_errors(
    checker: conformance.CodexChecker,
) -> None:
    for code in (-32700, -32600):
        ok(checker, {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": "x"}})
    assert "None is not valid" in bad(
        checker, {"jsonrpc": "2.0", "id": None, "error": {"code": -32601, "message": "x"}}
    )
    bad(checker, {"jsonrpc": "2.0", "id": None, "result": {}})
    # the rest of such an error is still checked
    bad(checker, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700}})


# -- Codex's own output passes -------------------------------------------------------------------


def test_codex_own_live_output_passes(checker: conformance.CodexChecker) -> None:
    """Every message the real Codex wrote in the recorded app-server sessions (handshake,
    turns, approvals, interrupts, errors) passes: the checker has no false positives there."""
    checked = 0
    paths = sorted(TRANSCRIPTS.glob("app-server-*.jsonl"))
    assert len(paths) == 3, paths
    for path in paths:
        ids: dict[Any, str] = {}
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            message = entry.get("msg")
            if not isinstance(message, dict):
                continue
            if entry["dir"] == "c2s" and "id" in message and "method" in message:
                # responses of params-less methods cannot be named: checked as envelopes
                if checker.response_def(message["method"]):
                    ids[message["id"]] = message["method"]
            elif entry["dir"] == "s2c":
                ok(checker, copy.deepcopy(message), ids)
                checked += 1
    assert checked > 250


# -- every shared wire type, including what no e2e test makes the mock emit -----------------------

#: Fields typed more loosely than Codex types them, because threadline writes a constant there or
#: echoes what the client sent (docs/codex-conformance.md, "Input leniency"): sampled with values
#: Codex allows. Whole structs by name, or (struct, wire field).
CODEX_VALUES: dict[Any, list[Any]] = {
    "ImageInput": [
        {"type": "image", "url": "x", "detail": "auto"},
        {"type": "image", "fileId": "x"},
    ],
    ("LocalImageInput", "detail"): ["high", None],
    ("Thread", "source"): ["appServer", {"custom": "x"}],
    ("GranularApproval", "granular"): [
        {"sandbox_approval": True, "rules": False, "mcp_elicitations": True}
    ],
}


def samples(t: mi.Type) -> list[Any]:
    """Wire values of one of our types: the first is canonical, each other one differs in one
    choice (a union member, a literal or enum value, an empty or absent value)."""
    match t:
        case mi.NoneType():
            return [None]
        case mi.BoolType():
            return [True]
        case mi.IntType():
            return [1]
        case mi.FloatType():
            return [1.5]
        case mi.StrType():
            return ["x"]
        case mi.LiteralType(values=values):
            return list(values)
        case mi.EnumType(cls=cls):
            return [member.value for member in cls]
        case mi.AnyType():
            return [{"k": "v"}]
        case mi.DictType(value_type=value):
            return [{"k": samples(value)[0]}, {}]
        case mi.ListType(item_type=item) | mi.VarTupleType(item_type=item):
            return [[v] for v in samples(item)] + [[]]
        case mi.UnionType(types=types):
            values = [v for m in types if not isinstance(m, mi.NoneType) for v in samples(m)]
            return values + [None] * any(isinstance(m, mi.NoneType) for m in types)
        case mi.StructType():
            return struct_samples(t)
    raise TypeError(f"no samples for {t}")


def struct_samples(t: mi.StructType) -> list[dict[str, Any]]:
    """All fields set; only the required ones (what `omit_defaults` leaves); then all fields set
    with one field varied at a time."""
    name = t.cls.__name__
    if name in CODEX_VALUES:
        return list(CODEX_VALUES[name])
    tag = {t.tag_field: t.tag} if t.tag_field else {}
    fields = {
        f.encode_name: CODEX_VALUES.get((name, f.encode_name)) or samples(f.type) for f in t.fields
    }
    full = {**tag, **{k: v[0] for k, v in fields.items()}}
    required = {f.encode_name for f in t.fields if f.required}
    out = [full, {**tag, **{k: v[0] for k, v in fields.items() if k in required}}]
    out += [{**full, k: v} for k, values in fields.items() for v in values[1:]]
    return out


def shared_types(checker: conformance.CodexChecker) -> list[tuple[str, str, Any]]:
    """(kind, method, our wire type) of every message type we share with Codex."""
    ours = methods()
    found = []
    for method, name in ours["notifications"].items():
        if method in checker.notifications:
            found.append(("notification", method, getattr(protocol, name)))
    for method, spec in ours["serverRequests"].items():
        if method in checker.server_requests:
            found.append(("serverRequest", method, getattr(protocol, spec["params"])))
    for method, spec in ours["clientRequests"].items():
        if checker.response_def(method):
            found.append(("response", method, getattr(protocol, spec["result"])))
    return found


def test_every_shared_wire_type_conforms(checker: conformance.CodexChecker) -> None:
    """Every type we share with Codex, built from its msgspec definition and encoded the way
    threadline encodes it (so `omit_defaults` drops what is optional): each union member, enum
    value and absent optional field, including the messages no e2e test gets the mock to write
    (warning, thread/closed, reasoning text, plan/file-change/MCP deltas, model/list, …)."""
    problems: dict[str, str] = {}
    checked = 0
    for kind, method, wire_type in shared_types(checker):
        for sample in struct_samples(mi.type_info(wire_type)):
            params = msgspec.json.decode(msgspec.json.encode(msgspec.convert(sample, wire_type)))
            if kind == "notification":
                message, ids = {"method": method, "params": params}, {}
            elif kind == "serverRequest":
                message, ids = {"id": 0, "method": method, "params": params}, {}
            else:
                message, ids = {"id": 1, "result": params}, {1: method}
            for violation in checker.check(message, ids):
                problems.setdefault(violation.detail.split("; message:")[0], str(violation))
            checked += 1
    assert not problems, "\n".join(list(problems.values())[:5])
    assert checked > 1000
