"""What OpenAI's APIs (Responses, Chat Completions) share on the wire: the error body, the
text of a message's content, and the ``/v1`` base URL a client is given."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HttpError", "content_text", "v1_url"]

# Error `code`s the real API sends for some statuses (the rest send null).
_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def _error_type(status: int) -> str:
    if status == 429:
        return "requests"
    return "invalid_request_error" if status < 500 else "server_error"


@dataclass(frozen=True)
class HttpError:
    """Answer with an HTTP error and the API's error body (``{"error": {...}}``).

    OpenCode retries retryable errors (5xx, 429, ...) up to 5 times with backoff starting at 2 s
    (~70 s in all) unless the response carries ``retry-after-ms``/``retry-after``: pass
    ``headers={"retry-after-ms": "0"}`` to make the retries immediate."""

    status: int
    message: str = "fake error"
    error_type: str | None = None  # None: the API's type for `status`
    code: str | None = None  # None: the API's code for `status` (may stay null)
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. {"retry-after": "1"}

    @property
    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type or _error_type(self.status),
                "param": None,
                "code": self.code if self.code is not None else _ERROR_CODES.get(self.status),
            }
        }


def content_text(content: Any) -> str:
    """Text of a message's `content`: a string, or the text parts of a parts list."""
    if isinstance(content, str):
        return content
    parts = (p.get("text") for p in content or () if isinstance(p, dict))
    return "\n".join(p for p in parts if isinstance(p, str))


def v1_url(fake_url: str) -> str:
    """The fake's ``/v1`` URL (from its root or its ``/v1`` URL): a client's base URL."""
    base_url = fake_url.rstrip("/")
    return base_url if base_url.endswith("/v1") else base_url + "/v1"
