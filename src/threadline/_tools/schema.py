"""JSON Schema (draft 2020-12) generation from the protocol Structs.

`threadline schema --out DIR` writes:
- `threadline.schema.json`: one bundle whose `$defs` hold every params, result, notification
  and server-request type plus the JSON-RPC envelopes (`ClientRequest`, `ServerNotification`,
  `ServerRequest`, `JSONRPCResponse`, `JSONRPCError`);
- `methods.json`: method name → the `$defs` names of its params and result, for code generators
  and for tests that validate a response against its method's result type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from .. import __version__
from ..protocol import CLIENT_METHODS, NOTIFICATIONS, SERVER_REQUESTS

__all__ = ["SCHEMA_FILE", "build_bundle", "build_method_index", "write_schemas"]

SCHEMA_FILE = "threadline.schema.json"
METHODS_FILE = "methods.json"
_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_JSONRPC = {"const": "2.0"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/$defs/{name}"}


def _envelope_name(method: str, suffix: str) -> str:
    parts = [p for chunk in method.split("/") for p in chunk.split("_")]
    return "".join(p[:1].upper() + p[1:] for p in parts) + suffix


def build_bundle() -> dict[str, Any]:
    defs = _payload_defs()
    defs["RequestId"] = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    defs.update(_request_defs())
    defs.update(_notification_defs())
    defs.update(_response_defs())
    return {
        "$schema": _DRAFT,
        "$id": SCHEMA_FILE,
        "title": "threadline protocol",
        "description": (
            "threadline JSON-RPC over stdio (Codex app-server v2 core, wire-compatible). "
            f"Generated from threadline {__version__}'s protocol types; do not edit."
        ),
        "anyOf": [_ref("ClientRequest"), _ref("ServerMessage")],
        "$defs": dict(sorted(defs.items())),
    }


def _payload_defs() -> dict[str, Any]:
    """The params, result and notification types, and every type they use."""
    types: list[Any] = []
    for params, result in CLIENT_METHODS.values():
        types += [params, result]
    types += list(NOTIFICATIONS.values())
    for params, result in SERVER_REQUESTS.values():
        types += [params, result]
    unique = list(dict.fromkeys(types))
    _, defs = msgspec.json.schema_components(unique, ref_template="#/$defs/{name}")
    return dict(defs)


def _request_defs() -> dict[str, Any]:
    """One envelope per request method, and their unions `ClientRequest` (what clients send:
    `jsonrpc` and `params` optional) and `ServerRequest` (what threadline sends: complete)."""
    defs: dict[str, Any] = {}
    for union, suffix, methods, required in (
        ("ClientRequest", "Request", CLIENT_METHODS, ["id", "method"]),
        ("ServerRequest", "ServerRequest", SERVER_REQUESTS, ["jsonrpc", "id", "method", "params"]),
    ):
        branches = []
        for method, (params, _result) in methods.items():
            name = _envelope_name(method, suffix)
            defs[name] = {
                "type": "object",
                "properties": {
                    "jsonrpc": _JSONRPC,
                    "id": _ref("RequestId"),
                    "method": {"const": method},
                    "params": _ref(params.__name__),
                },
                "required": required,
            }
            if union == "ServerRequest":  # threadline's own messages are exactly these
                defs[name]["additionalProperties"] = False
            branches.append(_ref(name))
        defs[union] = {"anyOf": branches}
    return defs


def _notification_defs() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    branches = []
    for method, params in NOTIFICATIONS.items():
        name = _envelope_name(method, "Message")
        defs[name] = {
            "type": "object",
            "properties": {
                "jsonrpc": _JSONRPC,
                "method": {"const": method},
                "params": _ref(params.__name__),
                "emittedAtMs": {"type": "integer"},
            },
            "required": ["jsonrpc", "method", "params"],
            "additionalProperties": False,
        }
        branches.append(_ref(name))
    defs["ServerNotification"] = {"anyOf": branches}
    return defs


def _response_defs() -> dict[str, Any]:
    """Responses, errors, batch answers, and `ServerMessage`: any line threadline writes."""
    defs: dict[str, Any] = {}
    defs["JSONRPCResponse"] = {
        "type": "object",
        "properties": {"jsonrpc": _JSONRPC, "id": _ref("RequestId"), "result": {}},
        "required": ["jsonrpc", "id", "result"],
        "additionalProperties": False,
    }
    defs["JSONRPCErrorObject"] = {
        "type": "object",
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "data": {},
        },
        "required": ["code", "message"],
        "additionalProperties": False,
    }
    defs["JSONRPCError"] = {
        "type": "object",
        "properties": {
            "jsonrpc": _JSONRPC,
            "id": {"anyOf": [_ref("RequestId"), {"type": "null"}]},
            "error": _ref("JSONRPCErrorObject"),
        },
        "required": ["jsonrpc", "id", "error"],
        "additionalProperties": False,
    }
    # The answer to a JSON-RPC batch (a request line holding an array) is one line holding an
    # array of responses.
    defs["JSONRPCBatchResponse"] = {
        "description": "The answer to a batch request: one response or error per request.",
        "type": "array",
        "minItems": 1,
        "items": {"anyOf": [_ref("JSONRPCResponse"), _ref("JSONRPCError")]},
    }
    defs["ServerMessage"] = {
        "description": "Any line threadline writes to stdout.",
        "anyOf": [
            _ref("ServerNotification"),
            _ref("ServerRequest"),
            _ref("JSONRPCResponse"),
            _ref("JSONRPCError"),
            _ref("JSONRPCBatchResponse"),
        ],
    }
    return defs


def build_method_index() -> dict[str, Any]:
    return {
        "clientRequests": {
            m: {"params": p.__name__, "result": r.__name__} for m, (p, r) in CLIENT_METHODS.items()
        },
        "notifications": {m: p.__name__ for m, p in NOTIFICATIONS.items()},
        "serverRequests": {
            m: {"params": p.__name__, "result": r.__name__} for m, (p, r) in SERVER_REQUESTS.items()
        },
    }


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, obj in ((SCHEMA_FILE, build_bundle()), (METHODS_FILE, build_method_index())):
        path = out / name
        path.write_text(_dump(obj), encoding="utf-8")
        written.append(path)
    return written
