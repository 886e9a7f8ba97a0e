"""`threadline app-server --listen ws://… | unix://…`: the real server process over real
sockets — health endpoints, Origin and auth refusals, frame rules, a turn with an approval,
several clients on one thread, a client leaving mid-turn, the unix socket's mode and removal."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.support.client import descendants, server_argv, server_env, wait_gone
from tests.support.ws_client import (
    WsClient,
    http_get,
    listening_server,
    refused_status,
    ws_connect,
)

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-capability-token-for-tests"


def text(value: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": value}]


async def start_thread(client: WsClient, cwd: Path) -> str:
    result = await client.call("thread/start", {"modelProvider": "mock", "cwd": str(cwd)})
    return str(result["thread"]["id"])


async def run_turn(
    client: WsClient, tid: str, prompt: str, answer: Any = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start a turn and read until its `turn/completed`, answering requests with `answer`."""
    await client.call("turn/start", {"threadId": tid, "input": text(prompt)})
    seen: list[dict[str, Any]] = []
    with trio.fail_after(30):
        while True:
            event = await client.events.receive()
            seen.append(event)
            if "id" in event and "method" in event:
                await client.send({"id": event["id"], "result": answer or {"decision": "decline"}})
            if event.get("method") == "turn/completed":
                return event, seen


def methods(events: list[dict[str, Any]]) -> list[str]:
    return [e["method"] for e in events if "method" in e]


async def test_health_origin_and_plain_gets(home: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv:
        host, port = srv.http
        for path in ("/readyz", "/healthz"):
            answer = await http_get(host, port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert answer.startswith(b"HTTP/1.1 200"), answer
        answer = await http_get(host, port, b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400"), answer
        answer = await http_get(host, port, b"\x00\x01 not http\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400") or answer == b"", answer
        assert await refused_status(srv.url, [(b"Origin", b"https://evil.example")]) == 403
        # Still serving after all of that.
        async with ws_connect(srv.url) as client:
            assert (await client.initialize())["serverInfo"]["name"] == "threadline"


async def test_a_turn_with_an_approval_and_bad_frames(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv, ws_connect(srv.url) as client:
        refused = await client.request("thread/list")
        assert refused["error"]["message"] == "Not initialized"
        await client.initialize()
        # Binary frames and non-JSON text frames get errors; the connection goes on.
        await client.ws.send_message(b'{"id":1,"method":"thread/list"}')
        error = await client.events.receive()
        assert error["error"]["code"] == -32600 and "binary" in error["error"]["message"]
        await client.ws.send_message("{not json")
        assert (await client.events.receive())["error"]["code"] == -32700
        tid = await start_thread(client, workdir)
        assert (await client.wait_for("thread/started"))["params"]["thread"]["id"] == tid
        done, events = await run_turn(
            client, tid, f"/run echo hi > {workdir}/out.txt\n/text ran", {"decision": "accept"}
        )
        assert done["params"]["turn"]["status"] == "completed"
        assert "item/commandExecution/requestApproval" in methods(events)
        assert (workdir / "out.txt").read_text().strip() == "hi"


async def test_unix_socket_mode_and_removal(home: Path, workdir: Path, tmp_path: Path) -> None:
    path = tmp_path / "tl.sock"
    async with listening_server(home, f"unix://{path}") as srv:
        assert srv.url == f"unix://{path}"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        async with ws_connect(srv.url) as client:
            await client.initialize()
            tid = await start_thread(client, workdir)
            done, _ = await run_turn(client, tid, "/text over unix")
            assert done["params"]["turn"]["status"] == "completed"
        # A second server on the same live socket is refused; the first keeps it.
        second = await trio.run_process(
            [*server_argv(), "app-server", "--listen", f"unix://{path}"],
            env=server_env(home),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert second.returncode == 1 and b"another server" in second.stderr
    assert not path.exists()


async def test_capability_token(home: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    for auth in (["--ws-token-file", str(token_file)], ["--ws-token-sha256", digest]):
        args = ["--ws-auth", "capability-token", *auth]
        async with listening_server(home, "ws://127.0.0.1:0", *args) as srv:
            for headers in ([], [(b"Authorization", b"Bearer wrong")]):
                assert await refused_status(srv.url, headers) == 401
            good = [(b"Authorization", f"Bearer {TOKEN}".encode())]
            async with ws_connect(srv.url, good) as client:
                await client.initialize()
        assert b"refused an upgrade" in srv.stderr
        assert b"wrong" not in srv.stderr and TOKEN.encode() not in srv.stderr


async def test_signed_bearer_token(home: Path, tmp_path: Path) -> None:
    secret = b"x" * 40
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(secret)
    args = ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", str(secret_file)]
    args += ["--ws-audience", "threadline", "--ws-issuer", "tests"]
    now = int(time.time())
    claims = {"iss": "tests", "aud": "threadline", "exp": now + 60}
    bad = [
        {**claims, "exp": now - 120},  # expired beyond the skew
        {**claims, "aud": "other"},
        {"iss": "tests", "aud": "threadline"},  # no exp
    ]
    async with listening_server(home, "ws://127.0.0.1:0", *args) as srv:
        for payload, key in [(c, secret) for c in bad] + [(claims, b"y" * 40)]:
            token = jwt.encode(payload, key, algorithm="HS256")
            bearer = [(b"Authorization", f"Bearer {token}".encode())]
            assert await refused_status(srv.url, bearer) == 401
        token = jwt.encode({**claims, "exp": now - 10}, secret, algorithm="HS256")  # in skew
        async with ws_connect(srv.url, [(b"Authorization", f"Bearer {token}".encode())]) as c:
            await c.initialize()


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (["--listen", "ws://0.0.0.0:0"], 1, "without authentication"),
        (["--listen", "ws://localhost:0"], 2, "not an IP address"),
        (["--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token"], 2, "--ws-token"),
        (["--listen", "tcp://127.0.0.1:1"], 2, "expected stdio://"),
    ],
)
async def test_refused_at_start(home: Path, argv: list[str], status: int, says: str) -> None:
    done = await trio.run_process(
        [*server_argv(), "app-server", *argv],
        env=server_env(home),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert says in done.stderr.decode()


async def test_two_clients_share_a_thread(home: Path, workdir: Path) -> None:
    async with (
        listening_server(home, "ws://127.0.0.1:0") as srv,
        ws_connect(srv.url) as a,
        ws_connect(srv.url) as b,
    ):
        await a.initialize()
        await b.initialize()
        tid = await start_thread(a, workdir)
        await a.wait_for("thread/started")
        await b.call("thread/resume", {"threadId": tid})
        await a.call(
            "turn/start", {"threadId": tid, "input": text("/text one\n/run true\n/text two")}
        )
        seen_a: list[dict[str, Any]] = []
        seen_b: list[dict[str, Any]] = []
        request_a = await a.wait_for("item/commandExecution/requestApproval", seen=seen_a)
        request_b = await b.wait_for("item/commandExecution/requestApproval", seen=seen_b)
        assert request_a["id"] == request_b["id"]
        await a.send({"id": request_a["id"], "result": {"decision": "accept"}})
        await a.wait_for("turn/completed", seen=seen_a)
        await b.wait_for("turn/completed", seen=seen_b)
        # b's late answer changes nothing: the first answer won.
        await b.send({"id": request_b["id"], "result": {"decision": "decline"}})
        stream_a = [e for e in seen_a if "method" in e and "id" not in e]
        stream_b = [e for e in seen_b if "method" in e and "id" not in e]
        assert [(e["method"], e["params"]) for e in stream_a] == [
            (e["method"], e["params"]) for e in stream_b
        ]
        assert "serverRequest/resolved" in methods(stream_b)
        command = [
            e
            for e in stream_b
            if e["method"] == "item/completed" and e["params"]["item"]["type"] == "commandExecution"
        ]
        assert command[0]["params"]["item"]["status"] == "completed"
        # A thread b is not attached to sends b nothing.
        other = await start_thread(a, workdir)
        done, _ = await run_turn(a, other, "/text only a")
        assert done["params"]["turn"]["status"] == "completed"
        with trio.move_on_after(0.5):
            leaked = await b.events.receive()
            raise AssertionError(f"b got a message of a thread it is not attached to: {leaked}")


async def test_a_turn_outlives_its_client(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv:
        async with ws_connect(srv.url) as a:
            await a.initialize()
            tid = await start_thread(a, workdir)
            await a.call("turn/start", {"threadId": tid, "input": text("/sleep 1\n/text the end")})
            await a.wait_for("turn/started")
        async with ws_connect(srv.url) as b:
            await b.initialize()
            resumed = await b.call("thread/resume", {"threadId": tid})
            assert resumed["thread"]["status"]["type"] == "active"
            done = await b.wait_for("turn/completed")
            assert done["params"]["turn"]["status"] == "completed"
            read = await b.call("thread/read", {"threadId": tid, "includeTurns": True})
            items = read["thread"]["turns"][0]["items"]
            assert any(i.get("text") == "the end" for i in items if i["type"] == "agentMessage")


async def test_an_approval_with_nobody_attached_declines(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv:
        async with ws_connect(srv.url) as a:
            await a.initialize()
            tid = await start_thread(a, workdir)
            await a.call(
                "turn/start",
                {"threadId": tid, "input": text(f"/run touch {workdir}/never\n/text after")},
            )
            await a.wait_for("item/commandExecution/requestApproval")
        async with ws_connect(srv.url) as b:
            await b.initialize()
            with trio.fail_after(20):
                while True:
                    read = await b.call("thread/read", {"threadId": tid, "includeTurns": True})
                    turns = read["thread"]["turns"]
                    if turns and turns[0]["status"] != "inProgress":
                        break
                    await trio.sleep(0.1)
            assert turns[0]["status"] == "completed"
            command = [i for i in turns[0]["items"] if i["type"] == "commandExecution"]
            assert command[0]["status"] == "declined"
            assert not (workdir / "never").exists()


async def test_an_oversized_frame_closes_only_its_connection(home: Path, workdir: Path) -> None:
    env = {"THREADLINE_MAX_REQUEST_BYTES": "4096"}
    async with (
        listening_server(home, "ws://127.0.0.1:0", env=env) as srv,
        ws_connect(srv.url) as a,
        ws_connect(srv.url) as b,
    ):
        await a.initialize()
        await b.initialize()
        await a.ws.send_message(
            '{"id":1,"method":"thread/list","params":{"x":"' + "y" * 8000 + '"}}'
        )
        with trio.fail_after(10):
            await a.closed.wait()
        assert a.ws.closed is not None and a.ws.closed.code == 1009
        tid = await start_thread(b, workdir)
        done, _ = await run_turn(b, tid, "/text b is fine")
        assert done["params"]["turn"]["status"] == "completed"
        with pytest.raises(ConnectionClosed):
            await a.ws.send_message("{}")


async def test_sigterm_mid_command_leaves_no_process(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv, ws_connect(srv.url) as a:
        await a.initialize()
        tid = await start_thread(a, workdir)
        prompt = "/run echo pid=$$; exec sleep 300"
        await a.call("turn/start", {"threadId": tid, "input": text(prompt)})
        request = await a.wait_for("item/commandExecution/requestApproval")
        await a.send({"id": request["id"], "result": {"decision": "accept"}})
        delta = await a.wait_for("item/commandExecution/outputDelta")
        pid = int(delta["params"]["delta"].strip().removeprefix("pid="))
        procs = descendants(srv.proc.pid)
        assert pid in procs
        srv.proc.terminate()
        done = await a.wait_for("turn/completed")
        assert done["params"]["turn"]["status"] == "interrupted"
        with trio.fail_after(20):
            assert await srv.proc.wait() == 0
        assert await wait_gone(procs, 5) == []


async def test_a_hundred_connections_get_only_their_own_events(home: Path, workdir: Path) -> None:
    count = 100
    results: dict[int, list[dict[str, Any]]] = {}
    async with listening_server(home, "ws://127.0.0.1:0") as srv:

        async def one(n: int) -> None:
            async with ws_connect(srv.url) as client:
                await client.initialize()
                tid = await start_thread(client, workdir)
                done, events = await run_turn(client, tid, f"/text from {n}\n/text again {n}")
                assert done["params"]["turn"]["status"] == "completed"
                results[n] = [e for e in events if "method" in e]
                for event in results[n]:
                    params = event["params"]
                    assert params.get("threadId", tid) == tid, (n, event)

        async with trio.open_nursery() as nursery:
            for n in range(count):
                nursery.start_soon(one, n)
    for n, events in results.items():
        texts = [
            e["params"]["item"]["text"]
            for e in events
            if e["method"] == "item/completed" and e["params"]["item"]["type"] == "agentMessage"
        ]
        assert texts == [f"from {n}", f"again {n}"], texts
    assert len(results) == count
    # Nothing lost: every connection saw the same sequence of notifications for its turn.
    shapes = {tuple(e["method"] for e in events) for events in results.values()}
    assert len(shapes) == 1, shapes


async def test_exit_when_idle_waits_for_connections_and_turns(home: Path, workdir: Path) -> None:
    async with listening_server(home, "ws://127.0.0.1:0", "--exit-when-idle", "1") as srv:
        async with ws_connect(srv.url) as a:
            await a.initialize()
            tid = await start_thread(a, workdir)
            await a.call("turn/start", {"threadId": tid, "input": text("/sleep 2.5\n/text done")})
            await a.wait_for("turn/started")
        # No connection, but a turn runs: the server stays until it is over, then 1 s more.
        started = trio.current_time()
        with trio.fail_after(15):
            assert await srv.proc.wait() == 0
        assert trio.current_time() - started >= 2.0
    async with listening_server(home, "ws://127.0.0.1:0") as srv, ws_connect(srv.url) as b:
        await b.initialize()
        read = await b.call("thread/read", {"threadId": tid, "includeTurns": True})
        assert read["thread"]["turns"][0]["status"] == "completed"


async def test_python_client_connect_url(home: Path, workdir: Path, tmp_path: Path) -> None:
    from threadline.client import accept_all, connect_url

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ["--ws-auth", "capability-token", "--ws-token-file", str(token_file)]
    path = tmp_path / "py.sock"
    async with (
        listening_server(home, "ws://127.0.0.1:0", *args) as srv,
        connect_url(srv.url, token=TOKEN) as client,
    ):
        thread = (await client.start_thread(model_provider="mock", cwd=str(workdir))).thread
        turn = await client.start_turn(
            thread.id, f"/run echo py > {workdir}/py.txt\n/text via ws", on_request=accept_all
        )
        done = await turn.wait()
        assert done.turn.status == "completed" and turn.text == "via ws"
    assert (workdir / "py.txt").read_text().strip() == "py"
    async with listening_server(home, f"unix://{path}") as srv, connect_url(srv.url) as client:
        read = await client.read_thread(thread.id)
        assert read.thread.turns[0].status == "completed"


async def test_a_pending_approval_waits_for_a_client_within_its_timeout(
    home: Path, workdir: Path
) -> None:
    async with listening_server(home, "ws://127.0.0.1:0") as srv:
        tids = []
        async with ws_connect(srv.url) as a:
            await a.initialize()
            for timeout_ms, name in ((10_000, "rescued"), (300, "abandoned")):
                params = {
                    "modelProvider": "mock",
                    "cwd": str(workdir),
                    "config": {"approvalTimeoutMs": timeout_ms},
                }
                tid = (await a.call("thread/start", params))["thread"]["id"]
                prompt = f"/run touch {workdir}/{name}\n/text after"
                await a.call("turn/start", {"threadId": tid, "input": text(prompt)})
                await a.wait_for("item/commandExecution/requestApproval")
                tids.append(tid)
        # a is gone. b resumes the first thread in time: the pending approval comes to b.
        async with ws_connect(srv.url) as b:
            await b.initialize()
            await b.call("thread/resume", {"threadId": tids[0]})
            request = await b.wait_for("item/commandExecution/requestApproval")
            assert request["params"]["threadId"] == tids[0]
            await b.send({"id": request["id"], "result": {"decision": "accept"}})
            done = await b.wait_for("turn/completed")
            assert done["params"]["turn"]["status"] == "completed"
            assert (workdir / "rescued").exists()
            # Nobody came for the second one: declined when its 300 ms ran out.
            with trio.fail_after(10):
                while True:
                    read = await b.call("thread/read", {"threadId": tids[1], "includeTurns": True})
                    if read["thread"]["turns"][0]["status"] != "inProgress":
                        break
                    await trio.sleep(0.05)
            [command] = [
                i for i in read["thread"]["turns"][0]["items"] if i["type"] == "commandExecution"
            ]
            assert command["status"] == "declined"
            assert not (workdir / "abandoned").exists()
