"""The base of every wire type: camelCase names, absent-when-default fields, keyword-only;
and the id groups that turn- and item-scoped messages share."""

from __future__ import annotations

import msgspec

__all__ = ["Base", "RequestId"]

#: JSON-RPC ids: string or integer, echoed unchanged.
RequestId = str | int


class Base(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """Wire struct base. Unknown input fields are ignored (msgspec's default), so clients
    pinned to other protocol versions keep working. `kw_only` is not inherited by msgspec:
    every subclass repeats it."""


# The bases below are not wire types of their own (not exported, no schema). A subclass's
# fields follow the inherited ones on the wire and in the schemas.


class TypeTagged(Base, tag_field="type", kw_only=True):
    # A variant of a tagged union: its `tag` is the value of the `type` field that selects it.
    pass


class TurnScoped(Base, kw_only=True):
    # A message about one turn of one thread.
    thread_id: str
    turn_id: str


class ItemScoped(TurnScoped, kw_only=True):
    # A message about one item of a turn.
    item_id: str
