"""Size limits of the protocol stream (no trio: read before the engine is loaded)."""

__all__ = ["DEFAULT_MAX_REQUEST"]

#: Default cap on one inbound protocol line (prompts of several MB are fine).
DEFAULT_MAX_REQUEST = 16 * 1024 * 1024
