"""Validate every message threadline writes against the committed `schemas/` bundle."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@cache
def _bundle() -> dict[str, Any]:
    return json.loads((SCHEMAS / "threadline.schema.json").read_text())  # type: ignore[no-any-return]


@cache
def methods() -> dict[str, Any]:
    return json.loads((SCHEMAS / "methods.json").read_text())  # type: ignore[no-any-return]


@cache
def _validator(def_name: str) -> jsonschema.protocols.Validator:
    bundle = _bundle()
    registry: Registry[Any] = Registry().with_resource(
        "threadline.schema.json", Resource.from_contents(bundle)
    )
    schema = {"$ref": f"threadline.schema.json#/$defs/{def_name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_def(def_name: str, value: Any) -> None:
    errors = sorted(_validator(def_name).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        detail = "; ".join(f"{list(e.path)}: {e.message[:300]}" for e in errors[:5])
        raise AssertionError(f"message does not match {def_name}: {detail}\n{value!r}"[:4000])


def validate_outbound(message: Any, request_methods: dict[Any, str]) -> None:
    """`request_methods` maps our client request ids to their method, so a response can be
    checked against that method's result type. A list is a batch answer: checked as a whole and
    element by element. (Each branch checks the specific envelope `ServerMessage` would pick;
    validating against the whole `ServerMessage` anyOf costs ~4x more per message.)"""
    if isinstance(message, list):
        validate_def("JSONRPCBatchResponse", message)
        for element in message:
            validate_outbound(element, request_methods)
        return
    if not isinstance(message, dict):
        raise AssertionError(f"outbound non-object: {message!r}")
    assert message.get("jsonrpc") == "2.0", f"missing jsonrpc member: {message!r}"
    if "method" in message and "id" in message:
        validate_def("ServerRequest", message)
        params_def = methods()["serverRequests"][message["method"]]["params"]
        validate_def(params_def, message["params"])
    elif "method" in message:
        validate_def("ServerNotification", message)
        validate_def(methods()["notifications"][message["method"]], message["params"])
    elif "error" in message:
        validate_def("JSONRPCError", message)
    else:
        validate_def("JSONRPCResponse", message)
        method = request_methods.get(message["id"])
        if method is not None:
            validate_def(methods()["clientRequests"][method]["result"], message["result"])
