"""Token usage totals of a thread, from the usage each turn (or model step) reports."""

from __future__ import annotations

from ...protocol import ThreadTokenUsage, TokenUsageBreakdown

__all__ = ["UsageTotals", "add_usage"]


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
