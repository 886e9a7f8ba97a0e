"""`threadline run`, the terminal client, as a user runs it: a subprocess with the mock backend,
answers typed on stdin, Ctrl-C as SIGINT."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import ROOT, descendants, wait_gone

pytestmark = pytest.mark.e2e


def run_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"THREADLINE_HOME": str(home), "AGENT_BACKEND": "mock", "NO_COLOR": "1"})
    return env


def run(
    home: Path, cwd: Path, *args: str, stdin: str = "", timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "threadline", "run", "--cwd", str(cwd), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=run_env(home),
        cwd=ROOT,
        timeout=timeout,
    )


def thread_id(stderr: str) -> str:
    match = re.search(r"--resume ([0-9a-f-]{36})", stderr)
    assert match, stderr
    return match.group(1)


def test_one_prompt_renders_text_reasoning_commands_diffs_and_plan(
    home: Path, workdir: Path
) -> None:
    script = "\n".join(
        [
            "/reason weighing it",
            "/plan Read | Edit",
            "/run echo from-the-command",
            "/write notes.txt kept",
            "/text all finished",
        ]
    )
    done = run(home, workdir, script, stdin="y\ny\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "thinking: weighing it" in out
    assert "[>] Read" in out and "[ ] Edit" in out
    assert "$ echo from-the-command\nfrom-the-command\n(exit 0)" in out
    assert "+kept" in out and "notes.txt (new)" in out
    assert out.endswith("all finished\n— done\n"), out
    assert out.index("from-the-command") < out.index("all finished")
    assert (workdir / "notes.txt").read_text().strip() == "kept"
    assert done.stderr.count("allow? [y]es") == 2


def test_declined_and_unanswered_approvals_do_not_run(home: Path, workdir: Path) -> None:
    done = run(home, workdir, "/run touch no.txt\n/write no2.txt x", stdin="n\n")
    assert done.returncode == 0, done.stderr
    assert "(declined)" in done.stdout and "(no answer: declined)" in done.stderr
    assert not (workdir / "no.txt").exists() and not (workdir / "no2.txt").exists()
    # garbage is asked again, not taken as an answer
    done = run(home, workdir, "/run touch yes.txt", stdin="maybe\nyes\n")
    assert "please answer y, n, a or c" in done.stderr
    assert (workdir / "yes.txt").exists()


def test_always_covers_what_it_says(home: Path, workdir: Path) -> None:
    """`[a]` on a command allows that exact command again without asking, not another one."""
    script = "/run echo same\n/run echo same\n/run echo other"
    done = run(home, workdir, script, stdin="a\nn\n")
    assert done.returncode == 0, done.stderr
    assert "[a]lways allow this exact command in this thread" in done.stderr
    assert done.stderr.count("allow? [y]es") == 2  # the repeat was not asked
    assert done.stdout.count("$ echo same\nsame\n(exit 0)") == 2
    assert "$ echo other\n(declined)" in done.stdout
    done = run(home, workdir, "/write a.txt 1\n/write b.txt 2", stdin="a\n")
    assert "[a]lways allow file changes in this thread" in done.stderr
    assert done.stderr.count("allow? [y]es") == 1
    assert (workdir / "a.txt").exists() and (workdir / "b.txt").exists()


def test_failed_turn_exit_status_and_unknown_backend(home: Path, workdir: Path) -> None:
    done = run(home, workdir, "/fail the disk is on fire")
    assert done.returncode == 1
    assert "failed: the disk is on fire" in done.stdout
    assert (done.stdout + done.stderr).count("the disk is on fire") == 1, done  # said once
    done = run(home, workdir, "--backend", "nonesuch", "/text hi")
    assert done.returncode == 2 and "nonesuch" in done.stderr


def test_json_mode_prints_only_notifications(home: Path, workdir: Path) -> None:
    done = run(home, workdir, "--json", "/text hello json")
    assert done.returncode == 0, done.stderr
    messages = [json.loads(line) for line in done.stdout.splitlines()]
    methods = [m["method"] for m in messages]
    assert methods[-1] == "turn/completed" and "turn/started" in methods
    deltas = [m["params"]["delta"] for m in messages if m["method"] == "item/agentMessage/delta"]
    assert "".join(deltas) == "hello json"


def test_interactive_session_and_resume(home: Path, workdir: Path) -> None:
    done = run(home, workdir, stdin="/text first answer\n\n/text second answer\n")
    assert done.returncode == 0, done.stderr
    assert "first answer" in done.stdout and "second answer" in done.stdout
    tid = thread_id(done.stderr)
    # the hint names threadline the way this run was started (`python -m threadline` here)
    python = os.path.relpath(sys.executable, ROOT)
    python = sys.executable if python.startswith("..") else python
    assert f"continue it with: {python} -m threadline run --resume {tid}" in done.stderr
    again = run(home, workdir, "--resume", tid, "/text third answer")
    assert again.returncode == 0, again.stderr
    assert thread_id(again.stderr) == tid and "third answer" in again.stdout


def sleepers(tree: dict[int, Any]) -> list[int]:
    found = []
    for pid in tree:
        try:
            if b"300" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


async def test_ctrl_c_cancels_the_turn_then_quits(home: Path, workdir: Path) -> None:
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "threadline", "run", "--cwd", str(workdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=run_env(home),
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    err = bytearray()

    async def pump(stream: trio.abc.ReceiveStream, buf: bytearray) -> None:
        async for chunk in stream:
            buf += chunk

    async def wait_for(buf: bytearray, needle: bytes, timeout: float = 20) -> None:
        with trio.fail_after(timeout):
            while needle not in buf:  # noqa: ASYNC110 - polling the pumped output
                await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump, proc.stdout, out)
        nursery.start_soon(pump, proc.stderr, err)
        await proc.stdin.send_all(b"/text started\n/run sleep 300\n")
        await wait_for(err, b"allow?")
        await proc.stdin.send_all(b"y\n")
        await wait_for(out, b"$ sleep 300")
        with trio.fail_after(10):
            while not (sleeper := sleepers(tree := descendants(proc.pid))):  # noqa: ASYNC110
                await trio.sleep(0.05)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        await wait_for(out, b"interrupted")
        cancel_s = time.monotonic() - t0
        assert not await wait_gone({p: tree[p] for p in sleeper}, 5), "sleep 300 survived"
        # the session goes on: another prompt works
        await proc.stdin.send_all(b"/text still here\n")
        await wait_for(out, "still here\n— done".encode())  # the turn is over
        proc.send_signal(signal.SIGINT)  # idle: quits
        with trio.fail_after(20):
            rc = await proc.wait()
        assert not await wait_gone(tree, 5), "a process of the run survived"
    assert rc == 130, err.decode()
    assert b"cancelling the turn" in err
    print(f"Ctrl-C -> interrupted shown in {cancel_s * 1000:.0f} ms")


class Terminal:
    """`threadline run` on a pseudo-terminal, as a user at a keyboard sees it."""

    def __init__(self, home: Path, cwd: Path, *args: str) -> None:
        import pty

        argv = [sys.executable, "-m", "threadline", "run", "--cwd", str(cwd), *args]
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its controlling terminal is the pty
            os.chdir(ROOT)
            os.execve(argv[0], argv, run_env(home))
        self.screen = b""

    def read_until(self, needle: bytes, timeout: float = 30) -> None:
        import select

        deadline = time.monotonic() + timeout
        while needle not in self.screen:
            left = deadline - time.monotonic()
            assert left > 0, f"{needle!r} not seen in {self.screen!r}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    self.screen += os.read(self.fd, 65536)
                except OSError:  # the child closed the terminal
                    assert needle in self.screen, f"{needle!r} not seen in {self.screen!r}"

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def exit_status(self, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"threadline run did not exit: {self.screen!r}")


def test_on_a_terminal_answers_and_ctrl_c_read_cleanly(home: Path, workdir: Path) -> None:
    """The echoed answer is not followed by a blank line, and Ctrl-C shows one `^C`."""
    term = Terminal(home, workdir, "/run echo hi\n/sleep 30")
    term.read_until(b"[c]ancel turn: ")
    term.type(b"y\r")
    term.read_until(b"(exit 0)")
    assert b"y\r\nhi\r\n(exit 0)" in term.screen, term.screen  # no blank line after the answer
    time.sleep(0.5)  # in the /sleep now
    term.type(b"\x03")
    term.read_until(b"interrupted")
    assert term.exit_status() == 130
    assert b"^C cancelling the turn" in term.screen and b"^C^C" not in term.screen, term.screen


def test_mcp_servers_from_the_command_line(home: Path, workdir: Path) -> None:
    server = f"srv={sys.executable} {ROOT / 'tests' / 'fakes' / 'mcp_server.py'}"
    prompt = '/mcp srv echo {"text": "from the terminal"}'
    done = run(home, workdir, "--mcp", server, "--approval-policy", "never", prompt)
    assert done.returncode == 0, done.stderr
    assert "echo: echo: from the terminal" in done.stdout, done.stdout
    bad = run(home, workdir, "--mcp", "no-command", prompt)
    assert bad.returncode == 2 and "expected NAME=COMMAND" in bad.stderr, bad.stderr


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_images_attach_to_the_first_prompt(home: Path, workdir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"  # outside the thread's cwd: the path is taken from here
    shot.write_bytes(PNG)
    seen = f"[image: image/png, {len(PNG)} bytes]"
    done = run(home, workdir, "--image", str(shot), "--image", str(shot), "what is it?")
    assert done.returncode == 0, done.stderr
    assert f"{seen}\n{seen}\nmock reply: what is it?" in done.stdout, done.stdout
    # Interactive: the first line carries them, later ones do not.
    done = run(home, workdir, "--image", str(shot), stdin="/text one\n/text two\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(seen) == 1 and done.stdout.index(seen) < done.stdout.index("two")
    missing = run(home, workdir, "--image", str(tmp_path / "nope.png"), "x")
    assert missing.returncode == 2 and "nope.png: no such file" in missing.stderr
    text = tmp_path / "notes.txt"
    text.write_text("not a picture")
    refused = run(home, workdir, "--image", str(text), "x")
    assert refused.returncode == 1 and "not an image" in refused.stderr, refused.stderr


def test_prompt_commands_model_effort_name_fork_compact(home: Path, workdir: Path) -> None:
    lines = [
        "/help",
        "/model",
        "/model mock-2",
        "/effort high",
        "/settings",
        "/settings",
        "/model",
        "/effort max",
        "/text refused with the bad effort",
        "/text after the bad effort",
        "/name Release notes",
        "the source speaks",
        "/fork",
        "/text the fork speaks",
        "/history",
        "/compact",
        "/history",
        "//text sent as it is",
    ]
    done = run(home, workdir, stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr
    out, err = done.stdout, done.stderr
    for command in ("/model [NAME]", "/effort LEVEL", "/fork", "/compact", "/name TEXT"):
        assert command in err, err
    assert re.search(r"mock-1 +Mock 1 \(default\)", err) and "choose one with /model NAME" in err
    assert "this thread's model: mock-2" in err  # the second /model, after the change
    settings = [line for line in out.splitlines() if line.startswith("model=")]
    assert len(settings) == 2 and all("model=mock-2 effort=high" in s for s in settings)
    assert "not one of" in err and "(not applied: /effort max)" in err
    assert "refused" not in out and "after the bad effort" in out  # the thread goes on
    assert "thread named 'Release notes'" in err
    forked = re.search(r"forked thread ([0-9a-f-]{36}) from ([0-9a-f-]{36})", err)
    assert forked, err
    fork, source = forked.groups()
    history = out[out.index("the fork speaks") :]
    assert "user: the source speaks" in history and "user: /text the fork speaks" in history
    assert "» compacting the conversation\n(conversation compacted)\n— done" in out
    assert "[compacted:" in out.split("(conversation compacted)")[1]
    assert out.rstrip().endswith("sent as it is\n— done"), out
    # The fork is its own thread: the source never saw the fork's turns.
    source_said, fork_said, forked_from = trio.run(said_in, home, source, fork)
    assert "the source speaks" in source_said and "/text the fork speaks" not in source_said
    assert "the source speaks" in fork_said and "/text the fork speaks" in fork_said
    assert forked_from == source


async def said_in(home: Path, source: str, fork: str) -> tuple[list[str], list[str], str | None]:
    """What the user said in each thread (from threadline's store) and the fork's source."""
    from threadline.client import spawn
    from threadline.protocol import TextInput, UserMessageItem

    said: list[list[str]] = []
    async with spawn(env=run_env(home), stderr=subprocess.DEVNULL) as client:
        for tid in (source, fork):
            thread = (await client.read_thread(tid)).thread
            said.append(
                [
                    part.text
                    for turn in thread.turns
                    for item in turn.items
                    if isinstance(item, UserMessageItem)
                    for part in item.content
                    if isinstance(part, TextInput)
                ]
            )
        forked_from = (await client.read_thread(fork, include_turns=False)).thread.forked_from_id
    return said[0], said[1], forked_from
