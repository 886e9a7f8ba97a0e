"""Check what threadline writes against the JSON Schema of the pinned Codex CLI itself.

`codex app-server generate-json-schema` of the pinned Codex (0.169.0, the version threadline
claims wire compatibility with) runs once per test session into a temporary directory; its
combined bundle `codex_app_server_protocol.schemas.json` (draft-07) is the reference. Every
message threadline writes in an e2e test goes through `CodexChecker.check`, called from
`ServerProcess._validate` right after the check against our own `schemas/`:

- a notification whose method Codex defines: that method's `ServerNotification` variant
  (the envelope, e.g. `emittedAtMs`, and `params`);
- a server→client request whose method Codex defines: that method's `ServerRequest` variant;
- a response to a request whose method Codex defines: `JSONRPCResponse`, with `result` checked
  against the method's response type (Codex names it after the params type: `ThreadStartParams`
  → `ThreadStartResponse`); a response whose request method the test did not register: the
  envelope only;
- an error response: `JSONRPCError`;
- a batch answer (a threadline addition): each element as above.

Threadline-only methods (`THREADLINE_ONLY`) are skipped; a method that is neither Codex's nor
listed there is a violation, so an addition must be documented first. The documented deviations
(`_tolerate`) are the only differences tolerated. Everything is listed in
docs/codex-conformance.md.

If the pinned binary is missing, `session_checker()` returns None and `unavailable_reason()`
says why: callers skip, except under `CI`, where they fail.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from threadline.backends.registry import SPECS

from .tools import find_cli

ROOT = Path(__file__).resolve().parents[2]
#: The Codex CLI version threadline is wire-compatible with: the catalog's pin.
PINNED_VERSION = str(SPECS["codex"].pinned_version)
BUNDLE = "codex_app_server_protocol.schemas.json"
_URI = "codex.schema.json"

#: Threadline's additions (docs/protocol-notes.md), by message kind: not checked against Codex.
THREADLINE_ONLY: dict[str, frozenset[str]] = {
    "response": frozenset(
        {"turn/cancel", "mailbox/send", "mailbox/list", "mailbox/read", "mailbox/markRead"}
    ),
    "serverRequest": frozenset({"item/tool/requestApproval"}),
    "notification": frozenset({"item/approval/autoDecided", "mailbox/messageReceived"}),
}

#: Error codes threadline answers with `id: null` when the request's id cannot be known.
NULL_ID_ERROR_CODES = frozenset({-32700, -32600})


def codex_version(binary: Path) -> str:
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    match = re.search(r"\d+\.\d+\.\d+\S*", out)
    if match is None:
        raise RuntimeError(f"cannot read a version from `{binary} --version`: {out!r}")
    return match.group(0)


def generate_schema(binary: Path, out: Path) -> Path:
    """Run the binary's own generator into `out/schema` (with a scratch CODEX_HOME, so nothing
    of the developer's Codex set-up is read or written); return the combined bundle."""
    home = out / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(binary), "app-server", "generate-json-schema", "--out", str(out / "schema")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "CODEX_HOME": str(home)},
    )
    return out / "schema" / BUNDLE


@dataclass(frozen=True)
class Violation:
    kind: str
    method: str | None
    detail: str

    def __str__(self) -> str:
        where = f" {self.method}" if self.method else ""
        return f"not Codex {PINNED_VERSION}-conformant: {self.kind}{where}: {self.detail}"


# -- documented deviations -----------------------------------------------------------------------


def _tolerate(message: dict[str, Any]) -> dict[str, Any]:
    """The message with exactly the documented deviations undone (docs/codex-conformance.md):

    1. `"jsonrpc":"2.0"` on every message: removed (only with exactly that value).
    2. `"id": null` on an error answering input whose id cannot be known (unparsable line,
       non-object, bad id, empty batch, over-long line; codes -32700/-32600): Codex answers
       such input with nothing, and its `RequestId` has no null. The id is replaced by 0, so
       the rest of the error is still checked as Codex's `JSONRPCError`.
    """
    if message.get("jsonrpc") == "2.0":
        message = {k: v for k, v in message.items() if k != "jsonrpc"}
    error = message.get("error")
    if (
        "id" in message
        and message["id"] is None
        and isinstance(error, dict)
        and error.get("code") in NULL_ID_ERROR_CODES
    ):
        message = {**message, "id": 0}
    return message


# -- the checker ---------------------------------------------------------------------------------


class CodexChecker:
    """Validators built from one generated bundle, once per definition and cached."""

    def __init__(self, bundle_path: Path, version: str) -> None:
        self.version = version
        self.bundle_path = bundle_path
        self._bundle: dict[str, Any] = json.loads(bundle_path.read_text())
        resource = Resource.from_contents(self._bundle, default_specification=DRAFT7)
        self._registry: Registry[Any] = Registry().with_resource(_URI, resource)
        defs = self._bundle["definitions"]
        self.notifications = _variants(defs["ServerNotification"], "ServerNotification")
        self.server_requests = _variants(defs["ServerRequest"], "ServerRequest")
        self.client_requests = _variants(defs["ClientRequest"], "ClientRequest")
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._response_defs: dict[str, str | None] = {}
        #: What this checker checked: `(kind, method)` → messages (kind "skipped": additions).
        self.counts: Counter[tuple[str, str]] = Counter()

    def response_def(self, method: str) -> str | None:
        """The JSON pointer of `method`'s response type; None if Codex has no such method, ""
        if its response type cannot be named from its params type."""
        if method not in self._response_defs:
            self._response_defs[method] = self._find_response_def(method)
        return self._response_defs[method]

    def _find_response_def(self, method: str) -> str | None:
        index = self.client_requests.get(method)
        if index is None:
            return None
        variant = self._bundle["definitions"]["ClientRequest"]["oneOf"][index]
        params = variant["properties"]["params"]
        refs = [p["$ref"] for p in [params, *params.get("anyOf", ())] if "$ref" in p]
        if len(refs) != 1 or not refs[0].endswith("Params"):
            return ""  # params-less methods (e.g. account/logout): no name to derive
        pointer: str = refs[0].removesuffix("Params") + "Response"
        node: Any = self._bundle
        for part in pointer.removeprefix("#/").split("/"):
            if part not in node:
                return ""
            node = node[part]
        return pointer

    def _validator(self, key: str, make: Any) -> jsonschema.protocols.Validator:
        validator = self._validators.get(key)
        if validator is None:
            validator = jsonschema.Draft7Validator(make(), registry=self._registry)
            self._validators[key] = validator
        return validator

    def _variant_validator(self, union: str, index: int) -> jsonschema.protocols.Validator:
        """The union's own top-level keywords (e.g. `emittedAtMs` of `ServerNotification`) plus
        the method's variant: what the union's `oneOf` accepts, since methods are disjoint."""

        def make() -> dict[str, Any]:
            envelope = self._bundle["definitions"][union]
            schema = {k: v for k, v in envelope.items() if k not in ("oneOf", "$schema")}
            schema["allOf"] = [{"$ref": f"{_URI}#/definitions/{union}/oneOf/{index}"}]
            return schema

        return self._validator(f"{union}/{index}", make)

    def _response_validator(self, result_pointer: str | None) -> jsonschema.protocols.Validator:
        def make() -> dict[str, Any]:
            schema: dict[str, Any] = {"allOf": [{"$ref": f"{_URI}#/definitions/JSONRPCResponse"}]}
            if result_pointer is not None:
                schema["properties"] = {"result": {"$ref": f"{_URI}{result_pointer}"}}
            return schema

        return self._validator(f"JSONRPCResponse {result_pointer}", make)

    def check(self, message: Any, request_methods: dict[Any, str]) -> list[Violation]:
        """Violations of Codex's schema in one outbound message. `request_methods` maps our
        request ids to their method (to pick a response's result type)."""
        if isinstance(message, list):  # a batch answer (threadline addition): per element
            return [v for element in message for v in self.check(element, request_methods)]
        if not isinstance(message, dict):
            return [Violation("message", None, f"not an object: {message!r}"[:300])]
        original, message = message, _tolerate(message)
        if "method" in message:
            kind = "serverRequest" if "id" in message else "notification"
            method = message["method"]
            union = "ServerRequest" if kind == "serverRequest" else "ServerNotification"
            index = (self.server_requests if kind == "serverRequest" else self.notifications).get(
                method
            )
            if index is None:
                return self._not_codex(kind, method)
            validator = self._variant_validator(union, index)
        elif "error" in message:
            kind, method = "error", None
            validator = self._validator(
                "JSONRPCError", lambda: {"$ref": f"{_URI}#/definitions/JSONRPCError"}
            )
        else:
            kind, method = "response", request_methods.get(message.get("id"))
            pointer = None if method is None else self.response_def(method)
            if method is not None and pointer is None:
                return self._not_codex(kind, method)
            if pointer == "":
                return [Violation(kind, method, "cannot name Codex's response type for it")]
            validator = self._response_validator(pointer)
        self.counts[kind, method or "-"] += 1
        errors = list(validator.iter_errors(message))
        if not errors:
            return []
        best = jsonschema.exceptions.best_match(errors)  # the deepest error of an anyOf
        assert best is not None
        detail = f"at {list(best.absolute_path)}: {best.message[:400]}; message: {original!r}"
        return [Violation(kind, method, detail[:3000])]

    def _not_codex(self, kind: str, method: str) -> list[Violation]:
        if method in THREADLINE_ONLY[kind]:
            self.counts["skipped", method] += 1
            return []
        return [Violation(kind, method, "method unknown to Codex and not a listed addition")]


def _variants(union: dict[str, Any], name: str) -> dict[str, int]:
    """method → index of its variant in the union's `oneOf` (each method in exactly one)."""
    found: dict[str, int] = {}
    for index, variant in enumerate(union["oneOf"]):
        for method in variant["properties"]["method"]["enum"]:
            if method in found:
                raise AssertionError(f"{name}: method {method} in two variants")
            found[method] = index
    return found


# -- once per session ----------------------------------------------------------------------------

_session: dict[str, Any] = {}


def session_checker() -> CodexChecker | None:
    """This test session's checker: the schema is generated on first use, once per binary and
    version. None if the pinned binary is not available (see `unavailable_reason()`)."""
    if "checker" not in _session:
        _session["checker"], _session["reason"] = _load()
    return _session["checker"]  # type: ignore[no-any-return]


def for_server() -> CodexChecker | None:
    """`session_checker()`, for a test server: marks the session as one that ran the check."""
    _session["used"] = True
    return session_checker()


def used() -> bool:
    """Whether a test server of this session asked for the checker."""
    return bool(_session.get("used"))


def unavailable_reason() -> str | None:
    session_checker()
    return _session["reason"]  # type: ignore[no-any-return]


def required() -> bool:
    """Under CI the conformance checks must run: an unavailable binary is a failure."""
    return bool(os.environ.get("CI"))


def _load() -> tuple[CodexChecker | None, str | None]:
    binary = find_cli("codex")
    if binary is None:
        return None, "the codex CLI is not installed (run scripts/install-clis, or put it on PATH)"
    try:
        version = codex_version(binary)
        if version != PINNED_VERSION:
            return None, (
                f"{binary} is codex {version}, but conformance is checked against the pinned "
                f"{PINNED_VERSION} (run scripts/install-clis)"
            )
        return _checker(str(binary), version), None
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        return None, f"cannot generate Codex's schema with {binary}: {exc}"


@cache
def _checker(binary: str, version: str) -> CodexChecker:
    out = tempfile.mkdtemp(prefix=f"threadline-codex-schema-{version}-")
    atexit.register(shutil.rmtree, out, True)
    return CodexChecker(generate_schema(Path(binary), Path(out)), version)
