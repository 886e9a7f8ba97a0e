"""threadline.procs.group against real processes (no mocks, real clock)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from threadline.backends.base import SessionSettings, TurnContext, TurnInput, TurnOutcome
from threadline.backends.kit.spawn import LiveCliSession, open_cli_process, running
from threadline.backends.registry import SPECS
from threadline.procs.group import (
    DEFAULT_MAX_LINE,
    CliNotExecutable,
    CliNotFound,
    GroupProcess,
    LineTooLong,
    ProcessError,
    child_env,
    descendant_pids,
    group_members,
    open_group_process,
    processes_gone,
    resolve_executable,
)
from threadline.rpc import framing


def _alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


@pytest.fixture(autouse=True)
def pids() -> Iterator[set[int]]:
    """Tests add every pid they learn of; none may survive the test."""
    seen: set[int] = set()
    yield seen
    survivors = sorted(p for p in seen | set(descendant_pids(os.getpid())) if _alive(p))
    assert survivors == [], f"processes survived the test: {survivors}"


@asynccontextmanager
async def sh(script: str, pids: set[int], **kw: Any) -> AsyncIterator[GroupProcess]:
    async with open_group_process(["sh", "-c", script], **kw) as gp:
        pids.add(gp.pid)
        yield gp


async def read_int(gp: GroupProcess, pids: set[int]) -> int:
    line = await gp.read_line()
    assert line is not None
    pid = int(line)
    pids.add(pid)
    return pid


def escaped_sleep_cmd() -> str:
    """Shell snippet: a background process that calls setsid(), prints its pid, sleeps 300 s."""
    if shutil.which("setsid"):
        return "setsid sh -c 'echo $$; exec sleep 300' &"
    code = "import os,time; os.setsid(); print(os.getpid(), flush=True); time.sleep(300)"
    return f"{sys.executable} -c '{code}' &"


# --------------------------------------------------------------------------- basics


async def test_reads_lines_and_exit_status(pids: set[int]) -> None:
    async with sh("printf 'a\\nb\\n\\nlast'; exit 3", pids) as gp:
        assert gp.pgid == gp.pid
        assert os.path.isabs(gp.argv[0]) and gp.argv[1:] == ["-c", gp.argv[2]]
        assert [await gp.read_line() for _ in range(5)] == [b"a", b"b", b"", b"last", None]
        assert await gp.read_line() is None
        assert await gp.wait() == 3
        assert gp.returncode == 3
    assert gp.returncode == 3


async def test_default_max_line_is_framings() -> None:
    assert DEFAULT_MAX_LINE == framing.DEFAULT_MAX_LINE
    assert LineTooLong is framing.LineTooLong


async def test_stdin_pipe_round_trip(pids: set[int]) -> None:
    async with open_group_process(["cat"], stdin="pipe") as gp:
        pids.add(gp.pid)
        await gp.write(b"hello\n")
        assert await gp.read_line() == b"hello"
        await gp.write(b"one\ntwo\n")
        assert await gp.read_line() == b"one"
        assert await gp.read_line() == b"two"
        await gp.close_stdin()
        await gp.close_stdin()  # idempotent
        assert await gp.read_line() is None
        assert await gp.wait() == 0
        with pytest.raises(ProcessError, match="stdin is closed"):
            await gp.write(b"late\n")


async def test_write_errors(pids: set[int]) -> None:
    async with sh("exit 0", pids) as gp:
        with pytest.raises(ProcessError, match="not a pipe"):
            await gp.write(b"x")
        await gp.close_stdin()  # harmless without a pipe
    async with sh("exit 0", pids, stdin="pipe") as gp:
        await gp.wait()
        with pytest.raises(ProcessError, match="cannot write to stdin"):
            await gp.write(b"x" * 1_000_000)  # reader gone: EPIPE, not SIGPIPE


async def test_default_stdin_is_devnull(pids: set[int]) -> None:
    # Must not inherit our stdin: `cat` reads /dev/null and exits at once.
    async with open_group_process(["cat"]) as gp:
        pids.add(gp.pid)
        with trio.fail_after(5):
            assert await gp.read_line() is None
            assert await gp.wait() == 0


async def test_cwd(tmp_path: Path, pids: set[int]) -> None:
    async with sh("pwd", pids, cwd=str(tmp_path)) as gp:
        assert await gp.read_line() == str(tmp_path).encode()
    with pytest.raises(ProcessError, match="working directory"):
        async with sh("pwd", pids, cwd=str(tmp_path / "missing")):
            pass


async def test_nothing_reaches_our_stdout(
    pids: set[int], capfd: pytest.CaptureFixture[str]
) -> None:
    async with sh("echo to-stdout; echo to-stderr >&2", pids) as gp:
        assert await gp.read_line() == b"to-stdout"
        await gp.wait()
        assert gp.stderr_tail() == "to-stderr"
    out, err = capfd.readouterr()
    assert "to-stdout" not in out and "to-stderr" not in out
    assert "to-stderr" not in err


# --------------------------------------------------------------------------- resolving


async def test_missing_binary_raises_before_spawn(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    with pytest.raises(CliNotFound) as info:
        async with open_group_process(["claude", "--version"], env=env):
            pytest.fail("body must not run")
    assert str(info.value) == "claude: command not found (looked for 'claude' on PATH)"
    # An agent CLI started through the backends' kit: the error names its install command.
    with pytest.raises(CliNotFound) as info:
        async with open_cli_process(["claude", "--version"], env=env):
            pytest.fail("body must not run")
    assert str(info.value) == (
        "claude: command not found (looked for 'claude' on PATH). Install Claude Code with "
        f"`npm install -g @anthropic-ai/claude-code@{SPECS['claude'].pinned_version}`, or point "
        "BACKEND_CLI_PATH (or thread/start config.cliPath) at its binary"
    )
    missing = tmp_path / "bin" / "codex"
    with pytest.raises(CliNotFound, match=f"codex: not found at {missing}. Install Codex with"):
        async with open_cli_process([str(missing)]):
            pytest.fail("body must not run")
    assert descendant_pids(os.getpid()) == []


async def test_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "gemini"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(CliNotExecutable, match="not executable"):
        resolve_executable(str(script))
    # a command that is no agent CLI gets no install hint
    with pytest.raises(CliNotFound) as other:
        resolve_executable("no-such-tool", {"PATH": str(tmp_path)})
    assert str(other.value) == "no-such-tool: command not found (looked for 'no-such-tool' on PATH)"
    with pytest.raises(CliNotExecutable, match="not executable"):
        resolve_executable("gemini", {"PATH": str(tmp_path)})
    with pytest.raises(CliNotExecutable):
        async with open_group_process([str(script)]):
            pytest.fail("body must not run")
    with pytest.raises(CliNotExecutable, match="is a directory"):
        resolve_executable(str(tmp_path))


async def test_resolve_uses_env_path(tmp_path: Path, pids: set[int]) -> None:
    other = tmp_path / "other"
    other.mkdir()
    script = tmp_path / "opencode"
    script.write_text("#!/bin/sh\necho from-script\n")
    script.chmod(0o755)
    (other / "opencode").write_text("not executable")  # earlier on PATH but skipped
    path = f"{other}{os.pathsep}{tmp_path}"
    assert resolve_executable("opencode", {"PATH": path}) == str(script)
    with pytest.raises(CliNotFound):
        resolve_executable("opencode", {"PATH": ""})
    env = child_env({"PATH": f"{path}{os.pathsep}{os.environ.get('PATH', '')}"})
    async with open_group_process(["opencode"], env=env) as gp:
        pids.add(gp.pid)
        assert gp.argv[0] == str(script)
        assert gp.name == "opencode"
        assert await gp.read_line() == b"from-script"


# --------------------------------------------------------------------------- env


async def test_child_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TL_FROM_OS", "1")
    env = child_env()
    assert env["TL_FROM_OS"] == "1"
    env["TL_FROM_OS"] = "2"
    assert os.environ["TL_FROM_OS"] == "1"  # a copy
    assert child_env({"A": "x", "B": None}, base={"B": "y", "C": "z"}) == {"A": "x", "C": "z"}
    assert child_env({"MISSING": None}, base={}) == {}


async def test_env_passthrough(pids: set[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TL_INHERITED", "inherited")
    monkeypatch.setenv("TL_DROP", "should-not-be-seen")
    env = child_env({"TL_SET": "hello world", "TL_DROP": None})
    script = 'echo "${TL_SET-unset}"; echo "${TL_DROP-unset}"; echo "${TL_INHERITED-unset}"'
    async with sh(script, pids, env=env) as gp:
        lines = [await gp.read_line() for _ in range(3)]
    assert lines == [b"hello world", b"unset", b"inherited"]
    async with sh('echo "${TL_INHERITED-unset}"', pids) as gp:  # env=None: ours
        assert await gp.read_line() == b"inherited"


# --------------------------------------------------------------------------- stderr


async def test_stderr_tail_keeps_last_lines(pids: set[int]) -> None:
    script = 'i=0; while [ $i -lt 2000 ]; do echo "err line $i" >&2; i=$((i+1)); done; echo out'
    async with sh(script, pids, stderr_tail_bytes=1024) as gp:
        assert await gp.read_line() == b"out"
        await gp.wait()
        tail = gp.stderr_tail()
        assert tail.endswith("err line 1998\nerr line 1999")
        assert "err line 0\n" not in tail and len(tail) <= 1024
        assert gp.stderr_tail(max_chars=13) == "err line 1999"
        assert gp.stderr_tail(max_chars=0) == ""
    assert gp.stderr_tail().endswith("err line 1999")


async def test_stderr_tail_after_context_exit(pids: set[int]) -> None:
    async with sh("echo fatal: bad credentials >&2; exit 1", pids) as gp:
        assert await gp.read_line() is None  # no wait(): the context exit collects stderr
    assert gp.stderr_tail() == "fatal: bad credentials"
    assert gp.returncode == 1


async def test_big_stderr_never_blocks(pids: set[int]) -> None:
    script = "head -c 2000000 /dev/zero | tr '\\0' x >&2; echo finished"
    async with sh(script, pids, stderr_tail_bytes=4096) as gp:
        with trio.fail_after(5):
            assert await gp.read_line() == b"finished"
            assert await gp.wait() == 0
        assert gp.stderr_tail(max_chars=10**6) == "x" * 4096


async def test_stderr_lines_are_logged(pids: set[int], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="threadline.cli")
    async with sh("echo first >&2; printf 'second' >&2", pids, name="claude") as gp:
        await gp.wait()
    messages = [r.getMessage() for r in caplog.records if r.name == "threadline.cli"]
    assert messages == ["claude: first", "claude: second"]


# --------------------------------------------------------------------------- stdout framing


async def test_oversized_line_is_skipped(pids: set[int]) -> None:
    script = "echo before; head -c 5000 /dev/zero | tr '\\0' a; echo; echo after"
    async with sh(script, pids, max_line=1000) as gp:
        assert await gp.read_line() == b"before"
        with pytest.raises(LineTooLong):
            await gp.read_line()
        assert await gp.read_line() == b"after"
        assert await gp.read_line() is None


async def test_cancelled_read_keeps_reader_usable(pids: set[int]) -> None:
    async with sh("sleep 0.3; echo late", pids) as gp:
        with trio.move_on_after(0.05):
            await gp.read_line()
            pytest.fail("read should have been cancelled")
        assert await gp.read_line() == b"late"


async def test_exit_is_not_eof(pids: set[int]) -> None:
    # The backgrounded sleep holds stdout open for 5 s after the leader is done.
    async with sh("sleep 5 & echo $!; echo done", pids, exit_drain=0.2) as gp:
        sleeper = await read_int(gp, pids)
        assert await gp.read_line() == b"done"
        start = trio.current_time()
        assert await gp.read_line() is None
        assert trio.current_time() - start < 1.0
        assert await gp.read_line() is None  # EOF is sticky
        assert await gp.wait() == 0
        assert _alive(sleeper)
        assert gp.alive_members() == [sleeper]
    assert not _alive(sleeper)


async def test_pending_read_returns_after_leader_exit(pids: set[int]) -> None:
    # A read already waiting when the leader exits is bounded by exit_drain too.
    async with sh("sleep 5 & echo $!; sleep 0.2", pids, exit_drain=0.1) as gp:
        await read_int(gp, pids)
        start = trio.current_time()
        with trio.fail_after(2):
            assert await gp.read_line() is None
        assert trio.current_time() - start < 1.2


# --------------------------------------------------------------------------- killing


async def test_cancel_kills_group_with_term_ignoring_grandchild(pids: set[int]) -> None:
    script = """sh -c 'trap "" TERM; sleep 30 & echo $!; echo $$; wait' & wait"""
    grace = 0.5
    with trio.CancelScope() as cs:
        async with sh(script, pids, grace=grace) as gp:
            sleeper = await read_int(gp, pids)
            inner = await read_int(gp, pids)
            assert set(group_members(gp.pgid)) == {gp.pid, sleeper, inner}
            assert {sleeper, inner} <= set(descendant_pids(gp.pid))
            start = trio.current_time()
            cs.cancel()
            await trio.sleep(30)
    elapsed = trio.current_time() - start
    assert cs.cancelled_caught
    assert grace - 0.05 <= elapsed < grace + 1.0  # needed SIGKILL, right after the grace
    assert gp.returncode == -15  # the leader itself obeyed SIGTERM
    assert group_members(gp.pgid) == []
    assert not _alive(sleeper) and not _alive(inner)


async def test_body_exception_propagates_unwrapped(pids: set[int]) -> None:
    with pytest.raises(ValueError, match="boom"):
        async with sh("sleep 30 & echo $!; wait", pids) as gp:
            await read_int(gp, pids)
            raise ValueError("boom")
    assert gp.returncode == -15


async def test_terminate_running_and_idempotent(pids: set[int]) -> None:
    async with sh("sleep 30 & echo $!; wait", pids) as gp:
        sleeper = await read_int(gp, pids)
        assert set(gp.alive_members()) == {gp.pid, sleeper}
        start = trio.current_time()
        await gp.terminate()
        assert trio.current_time() - start < 1.0  # both obey SIGTERM: no need for grace
        await gp.terminate()
        assert gp.returncode == -15
        assert gp.alive_members() == []
        assert await gp.read_line() is None


async def test_terminate_after_leader_exit(pids: set[int]) -> None:
    async with sh("exit 7", pids) as gp:
        assert await gp.wait() == 7
        await gp.terminate()
        await gp.terminate(grace=0)
        assert gp.returncode == 7


async def test_a_cli_writing_on_its_way_out_is_not_blocked(pids: set[int]) -> None:
    """Nobody reads the CLI's stdout once the block is over; one that writes more than a pipe
    holds when it gets SIGTERM still exits by itself (it is not left blocked until SIGKILL)."""
    script = (
        "trap 'head -c 1000000 /dev/zero; exit 0' TERM; echo ready; while :; do sleep 0.05; done"
    )
    async with sh(script, pids, grace=5) as gp:
        assert await gp.read_line() == b"ready"
    assert gp.returncode == 0


async def test_concurrent_terminate(pids: set[int]) -> None:
    async with sh("trap '' TERM; echo ready; while :; do sleep 0.05; done", pids, grace=0.3) as gp:
        assert await gp.read_line() == b"ready"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gp.terminate)
            nursery.start_soon(gp.terminate)
        assert gp.returncode == -9
        assert gp.alive_members() == []


async def test_escaped_descendant_is_killed(pids: set[int]) -> None:
    async with sh(f"{escaped_sleep_cmd()} wait", pids) as gp:
        escaped = await read_int(gp, pids)
        assert escaped not in group_members(gp.pgid)  # it left our group...
        assert escaped in descendant_pids(gp.pid)  # ...but is still our descendant
        assert set(gp.alive_members()) == {gp.pid, escaped}
    assert not _alive(escaped)


async def test_orphaned_escaped_descendant_is_killed(pids: set[int]) -> None:
    # The leader exits first, so the escaped sleep is reparented to init and can no longer be
    # traced to us; it must be remembered from an earlier look.
    async with sh(f"{escaped_sleep_cmd()} read x || true", pids, stdin="pipe") as gp:
        escaped = await read_int(gp, pids)
        assert escaped in gp.alive_members()
        await gp.close_stdin()
        assert await gp.wait() == 0
        assert escaped not in descendant_pids(gp.pid)
        assert _alive(escaped)
    assert not _alive(escaped)


async def test_orphaned_escaped_descendant_found_by_tracking(pids: set[int]) -> None:
    # Same, without ever calling alive_members(): the background tracking must have seen it.
    async with sh(f"{escaped_sleep_cmd()} read x || true", pids, stdin="pipe") as gp:
        escaped = await read_int(gp, pids)
        await trio.sleep(0.8)  # > the tracking interval
        await gp.close_stdin()
        assert await gp.wait() == 0
        assert _alive(escaped)
    assert not _alive(escaped)


# --------------------------------------------------------------------------- kill_escaped


async def wait_gone(processes: dict[int, int], timeout: float = 5) -> None:
    with trio.fail_after(timeout):
        while not processes_gone(processes):  # noqa: ASYNC110 - polling /proc
            await trio.sleep(0.01)


async def test_kill_escaped_stops_the_new_commands_only(pids: set[int]) -> None:
    """What a turn's cancel uses: the commands the CLI started (each in a session of its own)
    since the command began die at once; the CLI, its own children and a background process
    it started earlier keep running."""
    script = f"""
        {escaped_sleep_cmd()}
        sleep 300 & echo $!
        read go
        setsid sh -c 'sleep 300 & echo $$; echo $!; wait' &
        wait
    """
    async with sh(script, pids, stdin="pipe") as gp:
        earlier = await read_int(gp, pids)  # a background process from before the command
        child = await read_int(gp, pids)  # the CLI's own child, in its group
        await trio.sleep(0.1)  # /proc start times count in clock ticks (10 ms)
        since = time.monotonic()
        await gp.write(b"go\n")
        command = await read_int(gp, pids)  # the command's shell, in a session of its own
        grandchild = await read_int(gp, pids)  # and what it runs
        killed = gp.kill_escaped(since)
        assert set(killed) == {command, grandchild}
        await wait_gone(killed)
        assert all(_alive(p) for p in (gp.pid, child, earlier))
        assert gp.returncode is None
        assert gp.kill_escaped(since) == {}  # nothing left to kill
    assert not any(_alive(p) for p in (child, earlier))


async def test_kill_escaped_escalates_to_sigkill(pids: set[int]) -> None:
    script = """
        read go
        setsid sh -c 'trap "" TERM; echo $$; exec sleep 300' &
        wait
    """
    async with sh(script, pids, stdin="pipe") as gp:
        since = time.monotonic()
        await gp.write(b"go\n")
        command = await read_int(gp, pids)
        killed = gp.kill_escaped(since, grace=0.2)
        assert list(killed) == [command]
        assert _alive(command)  # it ignores SIGTERM...
        await wait_gone(killed)  # ...and got SIGKILL after the grace


async def test_proc_helpers_on_unknown_pids() -> None:
    assert group_members(2**22 + 12345) == []
    assert descendant_pids(2**22 + 12345) == []


async def test_read_json_object_skips_what_is_not_an_object(pids: set[int]) -> None:
    script = "echo 'not json'; echo '[1, 2]'; echo '{\"type\": \"a\"}'; echo '\"s\"'; echo '{}'"
    async with sh(script, pids) as gp:
        assert await gp.read_json_object() == {"type": "a"}
        assert await gp.read_json_object() == {}
        assert await gp.read_json_object() is None


# --------------------------------------------------------------------------- live CLI sessions


class StdinCli(LiveCliSession):
    """A "CLI" that exits by itself (status 0) once its stdin is closed, as an idle agent CLI
    does; `marker` is written when it saw the EOF."""

    process_name = "stdin-cli"
    exit_grace = 30.0  # long: the test is over long before, unless the session waits for it

    def __init__(self, cwd: Path) -> None:
        self.settings = SessionSettings(thread_id="t", cwd=str(cwd), mode="m")
        self.exited = trio.Event()
        self.closing = trio.Event()
        self.marker = cwd / "saw-eof"

    def argv(self) -> list[str]:
        return ["sh", "-c", f"cat >/dev/null; echo eof > {self.marker}"]

    def process_env(self) -> dict[str, str]:
        return dict(os.environ)

    async def run_turn(self, turn: TurnInput, ctx: TurnContext) -> TurnOutcome | None:
        raise AssertionError("no turn here")


@pytest.mark.parametrize("cut_off", [False, True])
async def test_live_session_close_waits_only_for_an_idle_cli(
    tmp_path: Path, pids: set[int], cut_off: bool
) -> None:
    """Closed idle, the CLI gets stdin EOF and exits by itself; closed after a turn was cut
    off, it is not waited for: its group is terminated at once (SIGTERM)."""
    session = StdinCli(tmp_path)
    async with running(session.run_process, session.close):
        assert session.proc is not None
        pids.add(session.proc.pid)
        session.cut_off = cut_off
    assert session.exited.is_set()
    if cut_off:
        assert session.proc.returncode == -signal.SIGTERM
        assert not session.marker.exists()
    else:
        assert session.proc.returncode == 0
        assert session.marker.read_text() == "eof\n"
