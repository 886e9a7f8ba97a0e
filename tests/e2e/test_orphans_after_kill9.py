"""A threadline that is SIGKILLed cannot clean up: the next threadline started on the same state
directory kills what it left behind (the process ledger), and nothing else."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import trio

from tests.support.client import ProcInfo, accept, descendants, proc_info, running_server, wait_gone

pytestmark = pytest.mark.e2e


def with_arg(tree: dict[int, ProcInfo], needle: bytes) -> dict[int, ProcInfo]:
    found = {}
    for pid, info in tree.items():
        try:
            if needle in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "):
                found[pid] = info
        except OSError:
            pass
    return found


async def test_next_server_kills_what_a_sigkilled_one_left(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    # One command stays in the CLI's group; one escapes it with setsid (as some agents' shells do).
    script = "/run setsid sleep 301 & sleep 300"
    async with running_server(nursery, home, check_exit=False) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        await srv.start_turn(tid, script)
        request = await srv.wait_method("item/commandExecution/requestApproval")
        await srv.send({"id": request["id"], "result": accept(request)})
        with trio.fail_after(10):
            while len(left := with_arg(descendants(srv.pid), b"sleep 30")) < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)
        await trio.sleep(1.2)  # the escaped sleep is recorded by the next descendant scan
        ledger_files = list((home / "run").glob("*.json"))
        assert len(ledger_files) == 1
        assert oct(ledger_files[0].stat().st_mode & 0o777) == "0o600"
        srv.signal(signal.SIGKILL)
        await srv.wait()
    # sh, sleep 300 and the escaped sleep 301 outlive a SIGKILLed server...
    assert await wait_gone(left, 0.5) == sorted(left), "expected leftovers after SIGKILL"

    async with running_server(nursery, home) as srv:
        await srv.initialize()
        # ... until the next server starts on the same state directory.
        assert not await wait_gone(left, 2.0), "leftovers of the SIGKILLed server still run"
        assert not list((home / "run").glob("*.json"))


async def test_reaping_never_signals_reused_pids_or_live_servers(home: Path) -> None:
    run_dir = home / "run"
    run_dir.mkdir(mode=0o700)
    bystander = await trio.lowlevel.open_process(["sleep", "30"], start_new_session=True)
    try:
        info = proc_info(bystander.pid)
        assert info is not None
        # A dead server's record naming the bystander's pid, but with a later start time: the
        # pid was reused by an unrelated process, which must not be touched.
        dead = {
            "server": {"pid": 999_999_999, "start": 1},
            "groups": [
                {
                    "pgid": bystander.pid,
                    "start": info.start + 1000,
                    "escaped": [[bystander.pid, info.start + 5]],
                }
            ],
        }
        (run_dir / "999999999.json").write_text(json.dumps(dead))
        # A live server's record (this test process) naming the bystander exactly: that server
        # still owns it.
        me = proc_info(os.getpid())
        assert me is not None
        live = {
            "server": {"pid": os.getpid(), "start": me.start},
            "groups": [{"pgid": bystander.pid, "start": info.start, "escaped": []}],
        }
        (run_dir / f"{os.getpid()}.json").write_text(json.dumps(live))
        (run_dir / "garbage.json").write_text("{not json")

        env = {**os.environ, "THREADLINE_HOME": str(home), "AGENT_BACKEND": "mock"}
        done = await trio.run_process(
            [sys.executable, "-m", "threadline"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert bystander.poll() is None, "an unrelated process was killed"
        assert not (run_dir / "999999999.json").exists()  # the dead server's record is gone
        assert not (run_dir / "garbage.json").exists()
        assert (run_dir / f"{os.getpid()}.json").exists()  # the live one is left alone
    finally:
        bystander.kill()
        await bystander.wait()
