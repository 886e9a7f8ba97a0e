"""Process-level behaviour of the real `threadline` executable: command line, start-up checks,
schema staleness, shutdown (stdin EOF, SIGTERM, SIGINT, SIGHUP) with work in flight and no
process left behind, cancel, restart on the same state directory, archive, failing turns."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import (
    ROOT,
    ProcInfo,
    ServerProcess,
    accept,
    assert_items_balanced,
    descendants,
    notifications,
    running_server,
    server_env,
    survivors,
    wait_gone,
)
from threadline.backends.registry import BACKEND_IDS, SPECS
from threadline.backends.spec import BackendSpec

pytestmark = pytest.mark.e2e

CONSOLE_SCRIPT = Path(sys.executable).parent / "threadline"
INITIALIZE = b'{"id":1,"method":"initialize","params":{"clientInfo":{"name":"t","version":"1"}}}\n'


async def run(
    argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            argv, capture_stdout=True, capture_stderr=True, check=False, env=env, cwd=str(ROOT)
        )


# -- command line ----------------------------------------------------------------------------------


async def test_version_and_help(home: Path) -> None:
    from threadline import __version__

    env = server_env(home)
    for argv in (
        [str(CONSOLE_SCRIPT), "--version"],
        [sys.executable, "-m", "threadline", "--version"],
    ):
        done = await run(argv, env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.decode().strip() == f"threadline {__version__}"
    done = await run([str(CONSOLE_SCRIPT), "--help"], env)
    assert done.returncode == 0
    text = done.stdout.decode()
    for needle in ("AGENT_BACKEND", "THREADLINE_HOME", "THREADLINE_MAX_REQUEST_BYTES", "schema"):
        assert needle in text


async def test_bad_agent_backend_refuses_to_start(home: Path) -> None:
    env = server_env(home, {"AGENT_BACKEND": "bogus"})
    with trio.fail_after(30):
        done = await trio.run_process(
            [str(CONSOLE_SCRIPT)],
            stdin=b"",  # were it to start, it would serve until EOF: give it one
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    assert done.returncode != 0
    assert done.stdout == b""
    err = done.stderr.decode()
    assert "AGENT_BACKEND" in err and "bogus" in err
    for valid in BACKEND_IDS:
        assert valid in err


CLI_BACKENDS = [spec for spec in SPECS.values() if spec.cli is not None]


@pytest.mark.parametrize("spec", CLI_BACKENDS, ids=[s.id for s in CLI_BACKENDS])
async def test_an_operator_chosen_backend_without_its_cli_refuses_to_start(
    home: Path, tmp_path: Path, spec: BackendSpec
) -> None:
    """AGENT_BACKEND (or BACKEND_CLI_PATH) set and its binary missing or not executable: the
    server names the backend and the path it tried, answers nothing and exits non-zero."""
    empty = tmp_path / "bin"
    empty.mkdir()
    not_executable = tmp_path / spec.cli  # type: ignore[operator]
    not_executable.write_text("#!/bin/sh\n")
    cases = [
        ({"AGENT_BACKEND": spec.id, "PATH": str(empty)}, f"{spec.cli} on PATH={empty}"),
        ({"AGENT_BACKEND": spec.id, "BACKEND_CLI_PATH": str(not_executable)}, "not executable"),
    ]
    if spec.id == "claude":  # the default backend: BACKEND_CLI_PATH alone names its binary
        cases.append(({"BACKEND_CLI_PATH": str(tmp_path / "nope")}, str(tmp_path / "nope")))
    for extra, tried in cases:
        env = server_env(home, extra)
        if "AGENT_BACKEND" not in extra:
            del env["AGENT_BACKEND"]
        with trio.fail_after(30):
            done = await trio.run_process(
                [str(CONSOLE_SCRIPT)],
                stdin=INITIALIZE,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )
        assert done.returncode != 0 and done.stdout == b"", done
        err = done.stderr.decode()
        assert f"AGENT_BACKEND={spec.id}" in err and tried in err, err
        if "PATH" in extra:
            assert f"npm install -g {spec.npm_package}@{spec.pinned_version}" in err, err


async def test_without_an_operator_choice_missing_clis_are_reported_not_fatal(
    home: Path, tmp_path: Path
) -> None:
    """Nothing chosen: the server starts, `initialize` says which backends are missing and how
    to install them, and thread/start on one of them fails with that hint; mock works."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = server_env(home, {"PATH": str(empty)})
    del env["AGENT_BACKEND"]
    async with trio.open_nursery() as nursery, running_server(nursery, home, env) as srv:
        init = await srv.initialize()
        infos = {b["id"]: b for b in init["backends"]}
        for spec in CLI_BACKENDS:
            info = infos[spec.id]
            assert info["available"] is False, info
            assert f"npm install -g {spec.npm_package}@" in info["message"], info
            error = await srv.error(
                "thread/start", {"modelProvider": spec.id, "cwd": str(tmp_path)}
            )
            message = error["message"]
            assert f"{spec.cli}: command not found" in message, message
            assert f"npm install -g {spec.npm_package}@{spec.pinned_version}" in message
        listed = await srv.call("thread/list", {})
        assert listed["data"] == []  # nothing was created for the refused threads
        tid = await srv.start_thread(tmp_path, modelProvider="mock")
        done, _ = await srv.run_turn(tid, "/text still serving")
        assert done["params"]["turn"]["status"] == "completed"


async def test_committed_schemas_are_up_to_date(tmp_path: Path) -> None:
    """Fails when a protocol type changed without `threadline schema --out schemas`."""
    out = tmp_path / "schemas"
    done = await run([str(CONSOLE_SCRIPT), "schema", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    committed = ROOT / "schemas"
    generated = sorted(p.name for p in out.iterdir())
    assert generated == sorted(p.name for p in committed.iterdir() if p.suffix == ".json")
    for name in generated:
        fresh = (out / name).read_text(encoding="utf-8")
        assert fresh == (committed / name).read_text(encoding="utf-8"), (
            f"schemas/{name} is stale: run `threadline schema --out schemas` and commit it"
        )
        json.loads(fresh)


# -- a turn that runs a real command ---------------------------------------------------------------

SLEEPER = "/run echo pid=$$; exec sleep 300"


class Sleeper:
    def __init__(
        self, thread_id: str, turn_id: str, pid: int, procs: dict[int, ProcInfo], seen: list[Any]
    ) -> None:
        self.thread_id = thread_id
        self.turn_id = turn_id
        self.pid = pid  # the `sh -c` that exec'd `sleep 300`
        self.procs = procs  # every descendant of the server while the command ran
        self.seen = seen


async def start_sleeper(srv: ServerProcess, workdir: Path, script: str = SLEEPER) -> Sleeper:
    """Start a turn whose command (accepted through the approval) sleeps for 300 s."""
    tid = await srv.start_thread(workdir)
    turn_id = await srv.start_turn(tid, script)
    seen: list[Any] = []
    request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
    assert request["method"] == "item/commandExecution/requestApproval"
    await srv.send({"id": request["id"], "result": accept(request)})
    delta = await srv.wait_method("item/commandExecution/outputDelta", seen=seen)
    pid = int(delta["params"]["delta"].strip().removeprefix("pid="))
    procs = descendants(srv.pid)
    assert pid in procs, (pid, procs)
    assert "sleep" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    return Sleeper(tid, turn_id, pid, procs, seen)


def command_items(events: list[Any]) -> list[dict[str, Any]]:
    return [
        e["params"]["item"]
        for e in notifications(events, "item/completed")
        if e["params"]["item"]["type"] == "commandExecution"
    ]


async def test_stdin_eof_with_a_running_command(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        sleeper = await start_sleeper(srv, workdir)
        t0 = time.monotonic()
        await srv.close_stdin()
        rc = await srv.wait(10)
        elapsed = time.monotonic() - t0
        assert rc == 0, srv.stderr_text[-2000:]
        assert elapsed < 5, f"shutdown took {elapsed:.1f}s"
        assert await wait_gone(sleeper.procs, 2) == []
        assert survivors({sleeper.pid: sleeper.procs[sleeper.pid]}) == []
    # the interrupted turn was recorded before the exit
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        params = {"threadId": sleeper.thread_id, "includeTurns": True}
        [turn] = (await srv.call("thread/read", params))["thread"]["turns"]
        assert turn["id"] == sleeper.turn_id
        assert turn["status"] == "interrupted"
        [cmd] = [i for i in turn["items"] if i["type"] == "commandExecution"]
        assert cmd["status"] == "failed" and cmd["aggregatedOutput"].startswith("pid=")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_signal_with_a_running_command(
    nursery: trio.Nursery, home: Path, workdir: Path, signum: int
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        sleeper = await start_sleeper(srv, workdir)
        t0 = time.monotonic()
        srv.signal(signum)
        done = await srv.wait_method("turn/completed", timeout=10, seen=sleeper.seen)
        assert done["params"]["turn"]["id"] == sleeper.turn_id
        assert done["params"]["turn"]["status"] == "interrupted"
        assert "error" not in done["params"]["turn"] or done["params"]["turn"]["error"] is None
        assert_items_balanced(sleeper.seen)
        [cmd] = command_items(sleeper.seen)
        assert cmd["status"] in ("failed", "completed") and cmd["status"] != "inProgress"
        assert cmd["aggregatedOutput"].startswith("pid=")
        rc = await srv.wait(10)
        assert rc == 0, srv.stderr_text[-2000:]
        assert time.monotonic() - t0 < 6
        assert await wait_gone(sleeper.procs, 2) == []
        await srv.stdout_closed.wait()
        # turn/completed is the last thing about the turn; the thread went idle before it
        statuses = notifications(sleeper.seen, "thread/status/changed")
        assert statuses[-1]["params"]["status"] == {"type": "idle"}
    name = signal.Signals(signum).name
    assert name in srv.stderr_text  # logged at INFO


async def test_second_signal_during_a_slow_shutdown(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    """The command ignores SIGTERM, so its group is only SIGKILLed after the grace period. A
    second SIGTERM meanwhile must not kill threadline before it has killed the group."""
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        sleeper = await start_sleeper(
            srv, workdir, "/run trap '' TERM; echo pid=$$; exec sleep 300"
        )
        srv.signal(signal.SIGTERM)
        await trio.sleep(0.3)
        assert srv.proc.poll() is None  # still busy killing the stubborn group
        srv.signal(signal.SIGTERM)
        rc = await srv.wait(15)
        assert rc == 0, srv.stderr_text[-2000:]
        assert await wait_gone(sleeper.procs, 2) == []
        done = await srv.wait_method("turn/completed", timeout=5, seen=sleeper.seen)
        assert done["params"]["turn"]["status"] == "interrupted"
        assert_items_balanced(sleeper.seen)
    assert "already shutting down" in srv.stderr_text


async def test_signal_when_idle_exits_cleanly(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        srv.signal(signal.SIGTERM)
        assert await srv.wait(10) == 0


@pytest.mark.parametrize("method", ["turn/cancel", "turn/interrupt"])
async def test_cancel_a_running_command_then_continue(
    nursery: trio.Nursery, home: Path, workdir: Path, method: str
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        sleeper = await start_sleeper(srv, workdir)
        t0 = time.monotonic()
        result = await srv.call(method, {"threadId": sleeper.thread_id, "turnId": sleeper.turn_id})
        assert result == {}
        done, events = await srv.collect_turn(sleeper.turn_id, events=sleeper.seen, timeout=10)
        assert done["params"]["turn"]["status"] == "interrupted"
        assert_items_balanced(events)
        assert await wait_gone(sleeper.procs, 2) == []
        assert time.monotonic() - t0 < 2.5
        # interrupting the finished turn again is harmless; the thread keeps working
        await srv.call(method, {"threadId": sleeper.thread_id, "turnId": sleeper.turn_id})
        done, events = await srv.run_turn(sleeper.thread_id, "/text still here")
        assert done["params"]["turn"]["status"] == "completed"
        deltas = notifications(events, "item/agentMessage/delta")
        assert "".join(d["params"]["delta"] for d in deltas) == "still here"


async def test_interrupt_errors(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        err = await srv.error("turn/cancel", {"threadId": tid, "turnId": "whatever"})
        assert err == {"code": -32600, "message": "no active turn to interrupt"}
        turn_id = await srv.start_turn(tid, "/sleep 30")
        await srv.wait_method("turn/started")
        err = await srv.error("turn/interrupt", {"threadId": tid, "turnId": "other"})
        assert err["code"] == -32600 and turn_id in err["message"]
        err = await srv.error(
            "turn/start", {"threadId": tid, "input": [{"type": "text", "text": "x"}]}
        )
        assert err["code"] == -32600 and "in progress" in err["message"]
        await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
        done, _ = await srv.collect_turn(turn_id, timeout=10)
        assert done["params"]["turn"]["status"] == "interrupted"


# -- state across restarts -------------------------------------------------------------------------


async def test_restart_lists_reads_and_resumes(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        done1, ev1 = await srv.run_turn(tid, "/text first answer")
        done2, ev2 = await srv.run_turn(
            tid, "/write notes.txt hello\n/text wrote it", on_request=accept
        )
        assert done1["params"]["turn"]["status"] == "completed"
        assert done2["params"]["turn"]["status"] == "completed"
        assert (workdir / "notes.txt").read_text() == "hello\n"
        live_items = [
            [e["params"]["item"] for e in notifications(ev, "item/completed")] for ev in (ev1, ev2)
        ]

    async with running_server(nursery, home) as srv:
        await srv.initialize()
        listed = (await srv.call("thread/list", {}))["data"]
        assert [t["id"] for t in listed] == [tid]
        assert listed[0]["status"] == {"type": "notLoaded"}
        assert listed[0]["modelProvider"] == "mock"
        assert listed[0]["cwd"] == str(workdir)
        assert listed[0]["preview"].startswith("/text first answer")

        thread = (await srv.call("thread/read", {"threadId": tid, "includeTurns": True}))["thread"]
        assert thread["status"] == {"type": "notLoaded"}
        turns = thread["turns"]
        assert [t["id"] for t in turns] == [
            done1["params"]["turn"]["id"],
            done2["params"]["turn"]["id"],
        ]
        assert [t["status"] for t in turns] == ["completed", "completed"]
        assert [t["items"] for t in turns] == live_items
        assert turns[0]["items"][0]["type"] == "userMessage"
        assert turns[0]["items"][-1]["text"] == "first answer"
        assert [i["type"] for i in turns[1]["items"]] == [
            "userMessage",
            "fileChange",
            "agentMessage",
        ]
        without = (await srv.call("thread/read", {"threadId": tid}))["thread"]
        assert without["turns"] == []

        resumed = await srv.call("thread/resume", {"threadId": tid})
        assert resumed["thread"]["id"] == tid
        assert resumed["thread"]["status"]["type"] != "notLoaded"
        assert len(resumed["thread"]["turns"]) == 2
        assert (await srv.call("thread/loaded/list", {}))["data"] == [tid]
        done3, ev3 = await srv.run_turn(tid, "/text after restart")
        assert done3["params"]["turn"]["status"] == "completed"
        assert_items_balanced(ev3)

    async with running_server(nursery, home) as srv:
        await srv.initialize()
        thread = (await srv.call("thread/read", {"threadId": tid, "includeTurns": True}))["thread"]
        assert len(thread["turns"]) == 3


async def test_archive(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        keep = await srv.start_thread(workdir)
        gone = await srv.start_thread(workdir)
        await srv.run_turn(gone, "/text bye")
        assert await srv.call("thread/archive", {"threadId": gone}) == {}
        archived = await srv.wait_method("thread/archived")
        assert archived["params"] == {"threadId": gone}
        default = (await srv.call("thread/list", {}))["data"]
        assert [t["id"] for t in default] == [keep]
        shown = (await srv.call("thread/list", {"archived": True}))["data"]
        assert [t["id"] for t in shown] == [gone]
        assert gone not in (await srv.call("thread/loaded/list", {}))["data"]
        err = await srv.error(
            "turn/start", {"threadId": gone, "input": [{"type": "text", "text": "x"}]}
        )
        assert err["code"] == -32600
    async with running_server(nursery, home) as srv:  # archiving is persistent
        await srv.initialize()
        assert [t["id"] for t in (await srv.call("thread/list", {}))["data"]] == [keep]
        shown = (await srv.call("thread/list", {"archived": True}))["data"]
        assert [t["id"] for t in shown] == [gone]
        err = await srv.error("thread/resume", {"threadId": gone})
        assert err["code"] == -32600 and "archived" in err["message"]


async def test_failed_turn_then_a_healthy_one(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        done, events = await srv.run_turn(tid, "/text partial\n/fail boom")
        turn = done["params"]["turn"]
        assert turn["status"] == "failed"
        assert turn["error"]["message"] == "boom"
        [error] = notifications(events, "error")
        assert error["params"]["willRetry"] is False
        assert error["params"]["error"]["message"] == "boom"
        assert_items_balanced(events)
        done, events = await srv.run_turn(tid, "/text fine again")
        assert done["params"]["turn"]["status"] == "completed"
        assert "error" not in done["params"]["turn"] or done["params"]["turn"]["error"] is None
        assert_items_balanced(events)
        thread = (await srv.call("thread/read", {"threadId": tid, "includeTurns": True}))["thread"]
        assert [t["status"] for t in thread["turns"]] == ["failed", "completed"]
        assert thread["turns"][0]["error"]["message"] == "boom"


async def test_mock_directive_errors_fail_the_turn_readably(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        for script, needle in (
            ("/sleep -1", "/sleep needs a number"),
            ("/sleep nan", "/sleep needs a number"),
            ("/sleep soon", "/sleep needs a number"),
            ("/nosuchdirective", "unknown directive /nosuchdirective"),
        ):
            done, events = await srv.run_turn(tid, script)
            turn = done["params"]["turn"]
            assert turn["status"] == "failed", (script, turn)
            assert needle in turn["error"]["message"], (script, turn)
            assert "internal error" not in turn["error"]["message"]
            assert_items_balanced(events)
        workdir.rmdir()  # the command can no longer start in the thread's cwd
        done, events = await srv.run_turn(tid, "/run echo hi", on_request=accept)
        turn = done["params"]["turn"]
        assert turn["status"] == "failed"
        assert "cannot run the command" in turn["error"]["message"]
        assert_items_balanced(events)


async def test_a_crash_exits_non_zero(nursery: trio.Nursery, home: Path) -> None:
    """An exception escaping the server must not be swallowed into a silent exit 0. (The
    engine loads once the first request has arrived, so the test sends one.)"""
    code = (
        "import threadline.rpc.connection as c\n"
        "async def boom(self, stream):\n"
        "    raise RuntimeError('boom from the test')\n"
        "c.Connection.serve = boom\n"
        "from threadline.__main__ import main\n"
        "main()\n"
    )
    argv = [sys.executable, "-c", code]
    async with running_server(nursery, home, argv=argv, check_exit=False) as srv:
        await srv.send({"id": 1, "method": "thread/list", "params": {}})
        rc = await srv.wait(20)
    assert rc != 0
    assert "boom from the test" in srv.stderr_text


async def test_sigterm_while_an_approval_is_pending(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        turn_id = await srv.start_turn(tid, "/run touch should-not-exist")
        seen: list[Any] = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        srv.signal(signal.SIGTERM)
        done = await srv.wait_method("turn/completed", timeout=10, seen=seen)
        assert done["params"]["turn"]["id"] == turn_id
        assert done["params"]["turn"]["status"] == "interrupted"
        assert_items_balanced(seen)
        [cmd] = command_items(seen)
        assert cmd["status"] == "declined"  # it never ran
        resolved = notifications(seen, "serverRequest/resolved")
        assert [r["params"]["requestId"] for r in resolved] == [request["id"]]
        assert await srv.wait(10) == 0
    assert not (workdir / "should-not-exist").exists()


async def test_stdin_eof_while_an_approval_is_pending(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    """The client is gone: the approval fails closed (the command never runs), exit 0, and
    the interrupted turn is on record for the next start."""
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        await srv.start_turn(tid, "/run touch should-not-exist")
        await srv.wait_for(lambda e: "id" in e and "method" in e)
        await srv.close_stdin()
        assert await srv.wait(10) == 0
    await trio.sleep(0.2)
    assert not (workdir / "should-not-exist").exists()
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        thread = (await srv.call("thread/read", {"threadId": tid, "includeTurns": True}))["thread"]
        [turn] = thread["turns"]
        assert turn["status"] == "interrupted"
