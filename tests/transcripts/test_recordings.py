"""The recordings here are those of the pinned CLIs, each listed in its manifest, and the
recorder still reproduces them: one cheap scenario (two `codex exec` runs) is recorded again
against the real CLI and must come out byte for byte the same."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.tools import pins
from tests.transcripts import HERE
from tests.transcripts.record import codex
from tests.transcripts.record.core import record_cli

CLIS = ("claude", "codex", "gemini")


@pytest.mark.parametrize("cli", CLIS)
def test_recordings_are_of_the_pinned_cli_and_listed(cli: str) -> None:
    manifest = json.loads((HERE / cli / "manifest.json").read_text())
    pinned = {name: version for name, _, version in pins()}[cli]
    assert manifest["version"] == pinned, (
        f"tests/transcripts/{cli} was recorded with {cli} {manifest['version']}, the pin is "
        f"{pinned}: run scripts/record-transcripts {cli} (tests/transcripts/README.md)"
    )
    recorded = {p.name for p in (HERE / cli).glob("*.jsonl")}
    assert recorded == {f"{name}.jsonl" for name in manifest["files"]}


def test_the_recorder_reproduces_a_recording(tmp_path: os.PathLike[str]) -> None:
    recorder = codex.RECORDER
    if not recorder.binary.is_file():
        message = f"{recorder.binary} is not installed (scripts/install-clis)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI must run it", pytrace=False)
        pytest.skip(message)
    _, installed = recorder.package()
    recorded = json.loads((HERE / "codex" / "manifest.json").read_text())["version"]
    if installed != recorded:
        pytest.skip(f"codex {installed} is installed, the recordings are of {recorded}")
    out = HERE.__class__(tmp_path)
    written = record_cli(recorder, out, only=["exec_resume"], log=lambda _line: None)
    assert sorted(p.name for p in written) == ["exec_a_plain.jsonl", "exec_c_resume.jsonl"]
    for path in written:
        assert path.read_text() == (HERE / "codex" / path.name).read_text(), path.name
