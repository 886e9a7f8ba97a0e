"""threadline: drive any coding-agent CLI through one Codex-shaped JSON-RPC protocol."""

__version__ = "0.1.0"

__all__ = ["__version__"]
