"""The generated docs pages (docs/protocol.md, docs/backends.md) are fresh, deterministic, and
every example in the protocol reference validates against its schema definition."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.schema_check import SCHEMAS, validate_def
from threadline._tools.docs import GENERATED, Docs, build_docs, write_docs

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COMMAND = "threadline docs --out docs"


@pytest.fixture(scope="module")
def docs() -> Docs:
    return build_docs(SCHEMAS)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `threadline docs --out <dir>` writes (a second, independent generation)."""
    out = tmp_path_factory.mktemp("docs")
    started = time.monotonic()
    paths = write_docs(out, SCHEMAS)
    assert time.monotonic() - started < 10, "docs generation got slow"
    assert sorted(p.name for p in paths) == sorted(GENERATED)
    return out


def test_committed_pages_are_fresh(written: Path) -> None:
    for name in GENERATED:
        committed = DOCS / name
        assert committed.is_file(), f"docs/{name} is missing: run `{COMMAND}` and commit it"
        fresh = (written / name).read_text(encoding="utf-8")
        assert committed.read_text(encoding="utf-8") == fresh, (
            f"docs/{name} is stale: run `{COMMAND}` and commit it"
        )


def test_generation_is_deterministic(docs: Docs, written: Path) -> None:
    for name in GENERATED:
        assert (written / name).read_text(encoding="utf-8") == docs.pages[name], (
            f"two generations of docs/{name} differ"
        )


def test_every_example_validates_against_its_schema(docs: Docs) -> None:
    assert docs.checks
    for def_name, value in docs.checks:
        validate_def(def_name, value)


def test_every_method_has_an_example(docs: Docs) -> None:
    from tests.support.schema_check import methods

    index = methods()
    covered = {(e.kind, e.method) for e in docs.examples}
    for method in index["clientRequests"]:
        assert ("request", method) in covered, method
    for method in index["notifications"]:
        assert ("notification", method) in covered, method
    for method in index["serverRequests"]:
        assert ("serverRequest", method) in covered, method
    # Every client request and server request is captured from the real server; only
    # notifications the mock backend cannot produce are synthesized.
    synthesized = {e.method for e in docs.examples if not e.captured}
    assert synthesized <= set(index["notifications"]), synthesized


def test_generated_pages_carry_the_header(docs: Docs) -> None:
    for name in GENERATED:
        assert docs.pages[name].startswith("<!-- generated — do not edit; run `threadline docs")


def test_the_runtime_never_imports_the_tooling() -> None:
    """Serving, the client and the CLI's entry point load no schema or docs generator."""
    probe = (
        "import sys, threadline.cli, threadline.client, threadline.server.app;"
        "print(sorted(m for m in sys.modules if m.startswith('threadline._tools')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
