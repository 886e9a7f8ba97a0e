"""The generated docs pages. `threadline docs --out docs` writes

- `protocol.md`: the protocol reference, rendered from the committed JSON Schemas
  (`schemas/`, what clients validate against), with an example message for every method,
  captured from a scripted session against the real server (`session.py`) and normalized
  (`normalise.py`) so the page is byte-for-byte deterministic (`protocol_page.py`);
- `backends.md`: the backend matrix, from what each backend's code reports
  (`backends_page.py`).

`tests/unit/test_docs_fresh.py` regenerates both, fails when the committed pages are stale,
and validates every example against its schema definition.
"""

from .build import GENERATED, Docs, build_docs, write_docs
from .markdown import HEADER
from .protocol_page import Example

__all__ = ["GENERATED", "HEADER", "Docs", "Example", "build_docs", "write_docs"]
