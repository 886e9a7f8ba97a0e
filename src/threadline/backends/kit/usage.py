"""Token usage totals of a thread, from the usage each turn (or model step) reports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...protocol import ThreadTokenUsage, TokenUsageBreakdown

__all__ = ["UsageFields", "UsageTotals", "add_usage", "read_usage"]


@dataclass(frozen=True)
class UsageFields:
    """Where a CLI's usage report keeps each count ("a.b" looks inside "a"; "" means the
    report has no such count)."""

    input: str
    output: str
    total: str = ""
    cached: str = ""
    reasoning: str = ""
    cache_write: str = ""
    #: Reported apart from `input` but part of what the model read (claude's cache reads).
    more_input: tuple[str, ...] = ()


def _count(raw: Mapping[str, Any], key: str) -> int:
    value: Any = raw
    for part in key.split(".") if key else ():
        value = value.get(part) if isinstance(value, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def read_usage(raw: Any, fields: UsageFields) -> TokenUsageBreakdown | None:
    """A usage report (a JSON object) as threadline's breakdown; None when it is not one."""
    if not isinstance(raw, Mapping):
        return None
    inp = _count(raw, fields.input) + sum(_count(raw, key) for key in fields.more_input)
    out = _count(raw, fields.output)
    return TokenUsageBreakdown(
        total_tokens=_count(raw, fields.total) or inp + out,
        input_tokens=inp,
        cached_input_tokens=_count(raw, fields.cached),
        output_tokens=out,
        reasoning_output_tokens=_count(raw, fields.reasoning),
        cache_write_input_tokens=_count(raw, fields.cache_write) if fields.cache_write else None,
    )


def add_usage(a: TokenUsageBreakdown, c: TokenUsageBreakdown) -> TokenUsageBreakdown:
    """Field by field sum (cache writes stay unknown when neither side knows them)."""
    writes = (
        None
        if a.cache_write_input_tokens is None and c.cache_write_input_tokens is None
        else (a.cache_write_input_tokens or 0) + (c.cache_write_input_tokens or 0)
    )
    return TokenUsageBreakdown(
        total_tokens=a.total_tokens + c.total_tokens,
        input_tokens=a.input_tokens + c.input_tokens,
        cached_input_tokens=a.cached_input_tokens + c.cached_input_tokens,
        output_tokens=a.output_tokens + c.output_tokens,
        reasoning_output_tokens=a.reasoning_output_tokens + c.reasoning_output_tokens,
        cache_write_input_tokens=writes,
    )


class UsageTotals:
    """The running total of a thread whose CLI reports each turn's usage on its own."""

    def __init__(self) -> None:
        self.total: TokenUsageBreakdown | None = None

    def add(self, last: TokenUsageBreakdown) -> ThreadTokenUsage:
        """Count one more turn; the `thread/tokenUsage/updated` payload."""
        self.total = last if self.total is None else add_usage(self.total, last)
        return ThreadTokenUsage(total=self.total, last=last)
