"""`threadline proxy`: the stdio test client, unchanged, driving a server that listens on a
unix socket (or ws://) through the proxy process — turns, approvals, interrupt, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.support.client import accept, notifications, running_server, server_argv
from tests.support.ws_client import listening_server

pytestmark = pytest.mark.e2e


async def test_proxy_over_a_unix_socket(
    nursery: trio.Nursery, home: Path, workdir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "tl.sock"
    async with listening_server(home, f"unix://{path}"):
        argv = [*server_argv(), "proxy", "--listen", f"unix://{path}"]
        async with running_server(nursery, home, argv=argv) as srv:
            init = await srv.initialize()
            assert init["serverInfo"]["name"] == "threadline"
            tid = await srv.start_thread(workdir)
            done, events = await srv.run_turn(
                tid, f"/run echo via proxy > {workdir}/p.txt\n/text ok", on_request=accept
            )
            assert done["params"]["turn"]["status"] == "completed"
            assert notifications(events, "item/commandExecution/requestApproval")
            assert (workdir / "p.txt").read_text().strip() == "via proxy"
            turn_id = await srv.start_turn(tid, "/sleep 30")
            await srv.wait_method("turn/started")
            await srv.call("turn/interrupt", {"threadId": tid, "turnId": turn_id})
            done, _ = await srv.collect_turn(turn_id)
            assert done["params"]["turn"]["status"] == "interrupted"


async def test_proxy_with_a_token_over_ws(
    nursery: trio.Nursery, home: Path, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("proxy-token-0123456789")
    args = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    async with listening_server(home, "ws://127.0.0.1:0", *args) as listener:
        argv = [*server_argv(), "proxy", "--listen", listener.url]
        env = {"THREADLINE_WS_TOKEN": "proxy-token-0123456789"}
        async with running_server(nursery, home, env, argv=argv) as srv:
            await srv.initialize()
        async with running_server(nursery, home, argv=argv, check_exit=False) as refused:
            assert await refused.wait() == 1
            assert "401" in refused.stderr_text


async def test_proxy_without_a_server(nursery: trio.Nursery, home: Path, tmp_path: Path) -> None:
    argv = [*server_argv(), "proxy", "--listen", f"unix://{tmp_path}/none.sock"]
    async with running_server(nursery, home, argv=argv, check_exit=False) as srv:
        assert await srv.wait() == 1
        assert "cannot connect" in srv.stderr_text
