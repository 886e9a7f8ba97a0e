"""Every fenced block of README.md and docs/*.md runs as written (issue #14), one test per block
(`README.md:17`). How blocks are found and marked: tests/support/docblocks.py.

- `sh` / `bash`: run in a scratch directory that holds the checkout's files (symlinks) and its
  `.venv` and `.tools`, with `.venv/bin` and the pinned CLIs on PATH, a scratch HOME,
  THREADLINE_HOME and TMPDIR; exit status 0. `clone`: in a fresh `git clone` instead, with
  nothing of the checkout on PATH (README's install command proves the install from a clone).
- `json` / `jsonl`: sent to a real `threadline` over stdio (tests/support/docsession.py).
- `text transcript`: replayed against a real `threadline` and compared line by line.
- `python`: run with the checkout's venv; `js`: run with node.
- `text output`: checked against the output of the block before it.
- anything else, or a block that cannot run, carries `<!-- not-run: why -->`.

Real CLIs run only where the doc is about one (`fake=claude`: the pinned `claude` against
tests/fakes' Anthropic API).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import FakeAnthropic
from tests.support.cli_env import private_prefixes
from tests.support.client import ServerProcess, running_server
from tests.support.docblocks import ROOT, Block, doc_files, extract, output_of
from tests.support.docsession import run_session, run_transcript, session_lines
from tests.support.schema_check import methods
from tests.support.tools import TOOLS_BIN, TOOLS_DIR
from threadline._tools.docs import GENERATED, HEADER

pytestmark = pytest.mark.e2e

FIRST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/threadline doctor && "
    '.venv/bin/threadline run --backend mock "/text Hello from threadline!"'
)
FAKE_ANSWER = "threadline drives coding-agent CLIs over one JSON-RPC protocol (a fake answer)."
_TIMEOUT = 120
#: How `threadline docs` writes the ids of its captured session.
_CAPTURED_ID = re.compile(r"00000000-0000-7000-8000-\d{12}")
#: The info-string attributes tests/support/docblocks.py describes.
ATTRIBUTES = {"answers", "clone", "fake", "file", "output", "transcript", "config", "captured"}
_SHELLS = {"sh": "sh", "bash": "bash"}
#: Credentials and threadline settings of the developer's own shell stay out of the blocks.
_PRIVATE = private_prefixes()
_OPERATOR = ("AGENT_BACKEND", "BACKEND_", "ALLOWED_TOOLS", "THREADLINE_HOME", "THREADLINE_LOG")

FILES = {str(p.relative_to(ROOT)): extract(p) for p in doc_files()}
BLOCKS = [block for blocks in FILES.values() for block in blocks]


# -- environments --------------------------------------------------------------------------------


def _base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE + _OPERATOR)}
    for name in ("home", "state", "tmp"):
        (tmp / name).mkdir(exist_ok=True)
    env.update(THREADLINE_HOME=str(tmp / "state"), TMPDIR=str(tmp / "tmp"), LANG="C.UTF-8")
    return env


def _scratch(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A directory that looks like the checkout (its files are symlinks; what a block writes
    stays here), and the environment of a block run in it."""
    work = tmp / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv", ".tools", TOOLS_DIR.name):
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(sys.prefix)
    (work / ".tools").symlink_to(TOOLS_DIR)
    env = _base_env(tmp)
    env["HOME"] = str(tmp / "home")
    path = [str(Path(sys.prefix) / "bin"), str(TOOLS_BIN), env.get("PATH", os.defpath)]
    env["PATH"] = os.pathsep.join(path)
    return work, env


@contextmanager
def _fake_claude(request: pytest.FixtureRequest, tmp: Path) -> Iterator[dict[str, str]]:
    """The variables that point the pinned `claude` at the fake Anthropic API (as the claude
    e2e tests do), which answers every prompt with FAKE_ANSWER. The developer's own Claude
    settings are removed from this process's environment too: a server inherits it."""
    claude: Path = request.getfixturevalue("claude_bin")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    for key in list(os.environ):
        if key.startswith(_PRIVATE + _OPERATOR):
            monkeypatch.delenv(key)
    with FakeAnthropic(default=FAKE_ANSWER) as fake:
        yield ClaudeEnv(cli=claude, fake=fake, tmp=tmp / "claude").env()


# -- processes -----------------------------------------------------------------------------------


async def _kill_group(process: trio.Process) -> None:
    os.killpg(process.pid, signal.SIGKILL)


async def _run(argv: list[str], cwd: Path, env: dict[str, str], stdin: bytes = b"") -> str:
    """Run a block's command; return stdout and stderr as one text, in order."""
    with trio.fail_after(_TIMEOUT):
        done = await trio.run_process(
            argv,
            cwd=cwd,
            env=env,
            stdin=stdin,
            capture_stdout=True,
            stderr=subprocess.STDOUT,
            check=False,
            start_new_session=True,
            deliver_cancel=_kill_group,
        )
    out = done.stdout.decode(errors="replace")
    assert done.returncode == 0, f"exit status {done.returncode}; output:\n{out[-4000:]}"
    return out


def _check_output(block: Block, out: str) -> None:
    """Each line of the `text output` block after `block`, in order (`…`: anything)."""
    shown = output_of(FILES[block.path], block)
    if shown is None:
        return
    at = 0
    for line in filter(None, (raw.strip() for raw in shown.text.splitlines())):
        pattern = ".*?".join(re.escape(part) for part in line.split("…"))
        found = re.compile(pattern).search(out, at)
        assert found, f"{shown.id}: {line!r} is not in the output (after {at}):\n{out[-4000:]}"
        at = found.end()


_CLONES: dict[str, str] = {}


async def _run_in_clone(block: Block, tmp: Path) -> str:
    """The block in a fresh clone of the repository, as a new user runs it: nothing of this
    checkout on PATH. Blocks with the same text (README and quickstart) run once."""
    if block.text not in _CLONES:
        clone = tmp / "clone"
        await trio.run_process(["git", "clone", "-q", str(ROOT), str(clone)])
        env = _base_env(tmp)
        path = env.get("PATH", os.defpath).split(os.pathsep)
        env["PATH"] = os.pathsep.join(p for p in path if not Path(p).is_relative_to(ROOT))
        _CLONES[block.text] = await _run(["sh", "-e", "-c", block.text], clone, env)
    return _CLONES[block.text]


# -- one runner per kind of block ----------------------------------------------------------------


async def _shell(block: Block, request: pytest.FixtureRequest, tmp: Path) -> str:
    if "clone" in block.attrs:
        return await _run_in_clone(block, tmp)
    work, env = _scratch(tmp)
    answers = block.attrs.get("answers", "")
    stdin = "".join(a + "\n" for a in answers.split(",")) if answers else ""
    argv = [_SHELLS[block.lang], "-e", "-c", block.text]
    if block.attrs.get("fake") == "claude":
        with _fake_claude(request, tmp) as claude:
            env.update(claude)
            env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), claude["PATH"]])
            out = await _run(argv, work, env, stdin.encode())
        assert FAKE_ANSWER in out, f"{block.id}: the fake model's answer never showed:\n{out}"
        return out
    return await _run(argv, work, env, stdin.encode())


async def _python(block: Block, request: pytest.FixtureRequest, tmp: Path) -> str:
    work, env = _scratch(tmp)
    script = tmp / "block.py"
    script.write_text(block.text, encoding="utf-8")
    return await _run([sys.executable, str(script)], work, env)


async def _node(block: Block, request: pytest.FixtureRequest, tmp: Path) -> str:
    work, env = _scratch(tmp)
    name = block.attrs.get("file", "block.mjs")
    (work / name).write_text(block.text, encoding="utf-8")
    return await _run(["node", name], work, env)


async def _json(block: Block, request: pytest.FixtureRequest, tmp: Path) -> str:
    if "captured" in block.attrs:
        page = ROOT / block.path
        assert page.name in GENERATED and page.read_text(encoding="utf-8").startswith(HEADER), (
            f"{block.id}: only pages `threadline docs` generates hold captured examples"
        )
        # `threadline docs` ran it (tests/unit/test_docs_fresh.py keeps the page current);
        # a request that needs nothing from the captured session is pasted once more.
        lines = session_lines(block.text)
        if not _pastable(block, lines):
            return ""
    elif "config" in block.attrs:
        params = {"modelProvider": "mock", "cwd": str(tmp), "config": json.loads(block.text)}
        lines = [json.dumps({"id": 1, "method": "thread/start", "params": params})]
    else:
        lines = session_lines(block.text)
    env = _base_env(tmp)
    if block.attrs.get("fake") == "claude":
        with _fake_claude(request, tmp) as claude:
            env.update(claude)
            await _serve(tmp, env, lambda server: run_session(server, lines))
    else:
        await _serve(tmp, env, lambda server: run_session(server, lines))
    return ""


def _pastable(block: Block, lines: list[str]) -> bool:
    """A captured client request whose shown reply is a result and that names no id of the
    captured session: what a reader can paste into a fresh server as it is."""
    message = json.loads(lines[0])
    blocks = FILES[block.path]
    at = blocks.index(block)
    shown = blocks[at + 1] if at + 1 < len(blocks) else None
    reply = json.loads(shown.text) if shown and "captured" in shown.attrs else {}
    return (
        len(lines) == 1
        and message.get("method") in methods()["clientRequests"]
        and reply.get("id", object()) == message.get("id")
        and "result" in reply
        and not _CAPTURED_ID.search(lines[0])
    )


async def _transcript(block: Block, request: pytest.FixtureRequest, tmp: Path) -> str:
    assert "transcript" in block.attrs, f"{block.id}: a text block that is neither run nor marked"
    work = tmp / "project"
    work.mkdir()
    env = _base_env(tmp)
    await _serve(tmp, env, lambda server: run_transcript(server, block.text, work, "/tmp"))
    return ""


async def _serve(
    tmp: Path, env: dict[str, str], script: Callable[[ServerProcess], Awaitable[None]]
) -> None:
    async with trio.open_nursery() as nursery, running_server(nursery, tmp / "state", env) as s:
        await script(s)


RUNNERS = {
    "sh": _shell,
    "bash": _shell,
    "python": _python,
    "js": _node,
    "json": _json,
    "jsonl": _json,
    "text": _transcript,
}

#: Blocks whose output a `text output` block may show.
PRINTERS = set(RUNNERS) - {"text", "json", "jsonl"}

# -- the tests -----------------------------------------------------------------------------------


MARKED = [block for block in BLOCKS if block.not_run is not None]
RUN = [block for block in BLOCKS if block.not_run is None]


@pytest.mark.parametrize("block", MARKED, ids=[b.id for b in MARKED])
def test_marked_block(block: Block) -> None:
    assert block.not_run, f"{block.id}: a not-run marker must say why: <!-- not-run: why -->"
    pytest.skip(f"not-run: {block.not_run}")


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
async def test_block(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    unknown = set(block.attrs) - ATTRIBUTES
    assert not unknown, f"{block.id}: unknown attributes {unknown} (see docblocks.py)"
    assert block.attrs.get("fake", "claude") == "claude", f"{block.id}: no such fake"
    if block.lang == "text" and "output" in block.attrs:
        blocks = FILES[block.path]
        at = blocks.index(block)
        before = blocks[at - 1] if at else None
        assert before is not None and before.not_run is None and before.lang in PRINTERS, (
            f"{block.id}: an output block must follow the block that prints it"
        )
        return  # checked with that block
    runner = RUNNERS.get(block.lang)
    assert runner is not None, (
        f"{block.id}: no runner for {block.lang or 'a block without a language'}: "
        "run it in tests/e2e/test_docs_examples.py or mark it <!-- not-run: why -->"
    )
    _check_output(block, await runner(block, request, tmp_path))


def test_readme_starts_with_the_install_and_a_first_turn() -> None:
    first = next(b for b in FILES["README.md"] if b.lang != "text")
    assert first.text.strip() == FIRST_COMMAND
    assert "clone" in first.attrs and first.not_run is None
