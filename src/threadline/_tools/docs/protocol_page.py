"""`protocol.md`: the protocol reference, rendered from the committed JSON Schemas with an
example message for every method, taken from the scripted session (`session.py`) and
normalized (`normalise.py`). A message the session cannot produce gets an example
synthesized from its schema, marked so."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ... import __version__
from .markdown import HEADER, anchor, json_block, method_anchor, text_block
from .normalise import Normaliser
from .prose import (
    ERRORS_INTRO,
    SERVER_REQUESTS_INTRO,
    TURN_INTRO,
    TYPES_INTRO,
    method_summaries,
    protocol_intro,
)
from .schema_view import SchemaView, synthesize
from .session import TURN_1, Capture, Described, SessionError, Transcript

__all__ = ["Example", "render_protocol"]

JSON = Any


@dataclass
class Example:
    """One rendered example: the messages, each with the schema defs it must satisfy."""

    kind: str  # "request" | "notification" | "serverRequest" | "error"
    method: str
    captured: bool
    checks: list[tuple[str, JSON]]


#: Messages preferred as the example of a method (else: its first occurrence).
_PREFER: dict[str, Callable[[JSON], bool]] = {
    "item/started": lambda p: p["item"]["type"] == "commandExecution",
    "item/completed": lambda p: p["item"]["type"] == "commandExecution",
    "thread/status/changed": lambda p: p["status"].get("activeFlags") == ["waitingOnApproval"],
}


def render_protocol(
    bundle: dict[str, JSON], index: dict[str, JSON], capture: Capture
) -> tuple[str, list[Example]]:
    """The page, and the examples on it (for tests to validate against the schema)."""
    page = _Page(SchemaView(bundle, index), index, capture)
    out = [HEADER, *protocol_intro(__version__), "", *page.contents(), ""]
    out += ["## A turn on the wire", "", *TURN_INTRO, ""]
    out += [*text_block("the mock prompt of the captured turn, not a command", [TURN_1]), ""]
    out += [*_overview(capture), ""]
    out += ["## Client requests", "", *page.client_requests()]
    out += ["## Notifications", "", *page.notifications()]
    out += ["## Server requests", "", *SERVER_REQUESTS_INTRO, "", *page.server_requests()]
    out += ["## Errors", "", *ERRORS_INTRO, "", *page.errors()]
    out += ["## Types", "", *TYPES_INTRO, "", *page.types()]
    return "\n".join(out).rstrip("\n") + "\n", page.examples


class _Page:
    """The sections of the page; each records the examples it renders."""

    def __init__(self, schema: SchemaView, index: dict[str, JSON], capture: Capture) -> None:
        self.schema = schema
        self.index = index
        self.capture = capture
        self.norm = Normaliser(capture.paths)
        self.summaries = method_summaries()
        self.examples: list[Example] = []
        self.requests = schema.envelopes("ClientRequest")
        self.notes = schema.envelopes("ServerNotification")
        self.server_reqs = schema.envelopes("ServerRequest")
        self._anchored: set[str] = set()

    def contents(self) -> list[str]:
        def toc(methods: dict[str, str]) -> str:
            return ", ".join(f"[`{m}`](#{method_anchor(m)})" for m in methods)

        return [
            "## Contents",
            "",
            "- [A turn on the wire](#a-turn-on-the-wire)",
            "- [Client requests](#client-requests): " + toc(self.requests),
            "- [Notifications](#notifications): " + toc(self.notes),
            "- [Server requests](#server-requests): " + toc(self.server_reqs),
            "- [Errors](#errors)",
            "- [Types](#types)",
        ]

    def _table(self, title: str, def_name: str) -> list[str]:
        """A def's field table; the first one of a def carries its anchor."""
        head = f"**{title}** — `{def_name}`"
        if def_name not in self._anchored:
            self._anchored.add(def_name)
            head = f'<a id="{anchor(def_name)}"></a>{head}'
        return [head, "", *self.schema.fields(def_name), ""]

    def _heading(self, method: str) -> list[str]:
        out = [f'<a id="{method_anchor(method)}"></a>', "", f"### `{method}`", ""]
        if method in self.summaries:
            out += [self.summaries[method], ""]
        return out

    def _synthesized(self, def_name: str, context: dict[str, str]) -> JSON:
        return synthesize({"$ref": f"#/$defs/{def_name}"}, self.schema.defs, context)

    def client_requests(self) -> list[str]:
        return [line for m, env in self.requests.items() for line in self._client_request(m, env)]

    def notifications(self) -> list[str]:
        return [line for m, env in self.notes.items() for line in self._notification(m, env)]

    def server_requests(self) -> list[str]:
        return [
            line for m, env in self.server_reqs.items() for line in self._server_request(m, env)
        ]

    def _client_request(self, method: str, envelope: str) -> list[str]:
        entry = self.index["clientRequests"][method]
        out = self._heading(method)
        out += self._table("Params", entry["params"]) + self._table("Result", entry["result"])
        captured = method in self.capture.calls
        if captured:
            request, response = (self.norm(m) for m in self.capture.calls[method])
        else:
            params = self._synthesized(entry["params"], {})
            result = self._synthesized(entry["result"], {})
            request = self.norm({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            response = self.norm({"jsonrpc": "2.0", "id": 1, "result": result})
        out += _example_label(captured)
        out += ["→ request", "", *json_block(request), "", "← response", ""]
        out += [*json_block(response), ""]
        checks = [(envelope, request), (entry["params"], request.get("params", {}))]
        checks += [("JSONRPCResponse", response), (entry["result"], response["result"])]
        self.examples.append(Example("request", method, captured, checks))
        return out

    def _notification(self, method: str, envelope: str) -> list[str]:
        params_def = self.index["notifications"][method]
        out = self._heading(method) + self._table("Params", params_def)
        found = _find(self.capture.transcripts, "server", method)
        if found is not None:
            message = self.norm(found[0][found[1]][1])
        else:
            params = self._synthesized(params_def, self.capture.context)
            message = self.norm(
                {"jsonrpc": "2.0", "method": method, "params": params, "emittedAtMs": 0}
            )
        captured = found is not None
        checks = [(envelope, message), (params_def, message["params"])]
        self.examples.append(Example("notification", method, captured, checks))
        return [*out, *_example_label(captured), *json_block(message), ""]

    def _server_request(self, method: str, envelope: str) -> list[str]:
        """Always captured: the session answers every kind of server request."""
        entry = self.index["serverRequests"][method]
        out = self._heading(method) + self._table("Params", entry["params"])
        out += self._table("Answer (result)", entry["result"])
        found = _find(self.capture.transcripts, "server", method)
        if found is None:
            raise SessionError(f"the scripted session never produced {method}")
        transcript, at = found
        request = transcript[at][1]
        answer = next(
            m
            for side, m in transcript[at:]
            if side == "client" and "method" not in m and m.get("id") == request["id"]
        )
        request, answer = self.norm(request), self.norm(answer)
        out += ["**Example**", "", "← request", "", *json_block(request), ""]
        out += ["→ answer", "", *json_block(answer), ""]
        checks = [(envelope, request), (entry["params"], request["params"])]
        checks += [(entry["result"], answer["result"])]
        self.examples.append(Example("serverRequest", method, True, checks))
        return out

    def errors(self) -> list[str]:
        out = []
        for what, request, response in self.capture.errors:
            if not isinstance(request, Described):
                request = self.norm(request)
            response = self.norm(response)
            out += [f"**{what[:1].upper() + what[1:]}**", ""]
            if isinstance(request, Described):
                out += [f"→ {request}", ""]
            elif isinstance(request, str):
                out += ["→ the line", "", *text_block("the broken line itself", [request]), ""]
            else:
                out += ["→", "", *json_block(request), ""]
            out += ["←", "", *json_block(response), ""]
            self.examples.append(Example("error", what, True, [("JSONRPCError", response)]))
        return out

    def types(self) -> list[str]:
        """Every def the methods reach that is not a method's own params/result, once."""
        schema = self.schema
        owned = self._owned()
        shared = [n for n in schema.reachable(sorted(owned)) if n not in owned]
        for name in shared:  # registers the named unions they use (method tables did already)
            schema.fields(name)
        in_union = {m for members in schema.union_members.values() for m in members}
        entries = sorted(
            [(u, True) for u in schema.union_members]
            + [(n, False) for n in shared if n not in in_union]
        )
        out = [", ".join(f"[`{n}`](#{anchor(n)})" for n, _ in entries), ""]
        for name, is_union in entries:
            out += [f'<a id="{anchor(name)}"></a>', "", f"### `{name}`", ""]
            out += self._union(name) if is_union else [*schema.fields(name), ""]
        return out

    def _owned(self) -> set[str]:
        owned = set(self.index["notifications"].values())
        for group in ("clientRequests", "serverRequests"):
            for entry in self.index[group].values():
                owned |= {entry["params"], entry["result"]}
        return owned

    def _union(self, name: str) -> list[str]:
        schema = self.schema
        members = schema.union_members[name]
        prop = schema.discriminators.get(name, "type")
        out = [f"One of (by `{prop}`):", ""]
        for member in members:
            tag = schema.defs[member].get("properties", {}).get(prop, {}).get("enum", ["?"])[0]
            out.append(f"- `{json.dumps(tag)}` → [`{member}`](#{anchor(member)})")
        out.append("")
        for member in members:
            out += [f'<a id="{anchor(member)}"></a>', "", f"#### `{member}`", ""]
            out += [*schema.fields(member), ""]
        return out


def _example_label(captured: bool) -> list[str]:
    return ["**Example**" + ("" if captured else " (synthesized from the schema)"), ""]


def _find(transcripts: list[Transcript], side: str, method: str) -> tuple[Transcript, int] | None:
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


def _overview_line(side: str, message: JSON) -> str:
    """One message of the example turn: its method and what it is about."""
    arrow = "→" if side == "client" else "←"
    if "result" in message:
        decision = message["result"].get("decision") if side == "client" else None
        return f"{arrow} response" + (f"  {decision}" if decision else "")
    if "method" not in message:
        return f"{arrow} error"
    method = message["method"]
    params = message.get("params") or {}
    detail = ""
    if "item" in params and isinstance(params["item"], dict):
        detail = params["item"]["type"]
        status = params["item"].get("status")
        detail += f" ({status})" if status and method == "item/completed" else ""
    elif method == "thread/status/changed":
        status = params["status"]
        detail = status["type"] + "".join(f" [{f}]" for f in status.get("activeFlags") or [])
    elif method in ("turn/completed", "turn/started"):
        detail = params["turn"]["status"]
    elif method == "item/approval/autoDecided":
        detail = f"{params['decision']} ({params['reason']})"
    text = f"{arrow} {method}" + (f"  {detail}" if detail else "")
    return text + ("  (request)" if "id" in message and side == "server" else "")


def _overview(capture: Capture) -> list[str]:
    """The example turn as a list of messages, consecutive deltas folded."""
    first, last = capture.turn_span
    rows: list[list[Any]] = []
    for side, message in capture.transcripts[0][first:last]:
        text = _overview_line(side, message)
        if rows and rows[-1][0] == text and text.lower().endswith("delta"):
            rows[-1][1] += 1
        else:
            rows.append([text, 1])
    lines = [text + (f"  ({count} times)" if count > 1 else "") for text, count in rows]
    return text_block("a summary of the captured turn, one line per message", lines)
