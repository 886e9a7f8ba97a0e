"""The base of every wire type: camelCase names, absent-when-default fields, keyword-only."""

from __future__ import annotations

import msgspec

__all__ = ["Base", "RequestId"]

#: JSON-RPC ids: string or integer, echoed unchanged.
RequestId = str | int


class Base(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """Wire struct base. Unknown input fields are ignored (msgspec's default), so clients
    pinned to other protocol versions keep working. `kw_only` is not inherited by msgspec:
    every subclass repeats it."""
