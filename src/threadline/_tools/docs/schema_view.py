"""Reading the committed JSON Schemas for the protocol page: readable types, field tables,
the named unions, and minimal values for messages the scripted session cannot produce."""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from ...ids import new_id
from ...protocol import common, inputs, items, methods, notifications, server_requests
from ..schema import METHODS_FILE, SCHEMA_FILE, build_bundle, build_method_index
from .markdown import anchor, cell

__all__ = ["SchemaView", "load_schemas", "ref_name", "synthesize"]

JSON = Any


def load_schemas(schemas: Path | None) -> tuple[dict[str, JSON], dict[str, JSON]]:
    """The committed bundle and method index; generated in memory when `schemas` has none
    (e.g. an installed package run outside the repository: same content when fresh)."""
    if schemas is not None and (schemas / SCHEMA_FILE).is_file():
        bundle = json.loads((schemas / SCHEMA_FILE).read_text(encoding="utf-8"))
        index = json.loads((schemas / METHODS_FILE).read_text(encoding="utf-8"))
        return bundle, index
    return (
        json.loads(json.dumps(build_bundle(), sort_keys=True)),
        json.loads(json.dumps(build_method_index(), sort_keys=True)),
    )


def ref_name(schema: JSON) -> str | None:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _union_names() -> dict[frozenset[str], str]:
    """Names for the schema's anonymous unions of structs (`ThreadItem`, `UserInput`, ...).
    Only their names come from the Python aliases: the members come from the schema."""
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


class SchemaView:
    """The bundle's `$defs`, rendered for the page."""

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
            name = ref_name(branch)
            assert name is not None
            out[self.defs[name]["properties"]["method"]["const"]] = name
        return out

    def union_of(self, schema: JSON) -> str | None:
        members = [ref_name(b) for b in schema.get("anyOf", [])]
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
        name = ref_name(schema)
        if name is not None:
            return f"[{name}](#{anchor(name)})"
        if "const" in schema:
            return f"`{json.dumps(schema['const'])}`"
        if "enum" in schema:
            return " | ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
        if "anyOf" in schema:
            union = self.union_of(schema)
            if union is not None:
                return f"[{union}](#{anchor(union)})"
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
            name = ref_name(schema)
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
                    cell(self.type(spec)),
                    "required" if prop in required else "optional",
                    cell("; ".join(notes)),
                ]
            )
        header = ["field", "type", "required", "notes"]
        if not any(row[3] for row in rows):
            header, rows = header[:3], [row[:3] for row in rows]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return lines


def synthesize(
    schema: JSON, defs: dict[str, JSON], context: dict[str, str], key: str | None = None
) -> JSON:
    """A minimal value for `schema`: required fields only, first enum value / branch."""
    if not isinstance(schema, dict) or not schema:
        return {}
    name = ref_name(schema)
    if name is not None:
        return synthesize(defs[name], defs, context, key)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        return synthesize(branches[0], defs, context, key)
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        return {p: synthesize(props[p], defs, context, p) for p in schema.get("required", [])}
    if kind == "array":
        return [synthesize(schema.get("items", {}), defs, context, key)]
    if kind == "string":
        if key in context:
            return context[key]
        if key is not None and (key == "id" or key.endswith("Id")):
            return new_id()  # a fresh UUID: the normalizer numbers it like a captured one
        return {"delta": "Checking the tests", "message": "Working on it"}.get(key or "", "text")
    if kind == "integer":
        return 0
    if kind == "number":
        return 0.0
    if kind == "boolean":
        return False
    return None
