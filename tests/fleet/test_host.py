"""`ServerHost` (no Ray): a threadline child driven from plain threads — a turn's messages in
the order the server wrote them, requests answered by id, and a server that dies mid-turn."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from threadline.fleet.host import HostClosed, ServerHost
from threadline.fleet.procs import child_pids
from threadline.fleet.wire import decode


def read_turn(host: ServerHost, turn: object) -> list[dict]:
    messages: list[dict] = []
    while batch := host.next_batch(turn):  # type: ignore[arg-type]
        messages += decode(batch)
    return messages


def test_a_turn_reads_in_wire_order_and_requests_are_answered_by_id(
    home: Path, workdir: Path
) -> None:
    host = ServerHost({"AGENT_BACKEND": "mock", "THREADLINE_HOME": str(home)})
    try:
        tid = host.request("thread/start", {"cwd": str(workdir)})["thread"]["id"]
        turn = host.start_turn(tid, "/run echo hi > hi.txt", {})
        messages: list[dict] = []
        while batch := host.next_batch(turn):
            for message in decode(batch):
                messages.append(message)
                if "id" in message:
                    assert host.answer(message["id"], {"decision": "accept"})
                    assert not host.answer(message["id"], {"decision": "accept"})  # once
        methods = [m["method"] for m in messages]
        # The approval comes after its item started and before it is resolved, as written.
        asked = methods.index("item/commandExecution/requestApproval")
        started = [
            i
            for i, m in enumerate(messages)
            if m["method"] == "item/started" and m["params"]["item"]["type"] == "commandExecution"
        ]
        assert started and started[0] < asked < methods.index("serverRequest/resolved")
        assert methods[-1] == "turn/completed"
        assert messages[-1]["params"]["turn"]["status"] == "completed"
        assert all("jsonrpc" not in m for m in messages)
        assert (workdir / "hi.txt").read_text() == "hi\n"
    finally:
        host.close()


def test_a_server_that_dies_mid_turn_fails_the_turn(home: Path, workdir: Path) -> None:
    exited = threading.Event()
    others = set(child_pids(os.getpid()))  # e.g. Ray's, when the fleet tests ran first
    host = ServerHost({"AGENT_BACKEND": "mock", "THREADLINE_HOME": str(home)}, on_exit=exited.set)
    try:
        tid = host.request("thread/start", {"cwd": str(workdir)})["thread"]["id"]
        turn = host.start_turn(tid, "/text working\n/sleep 60", {})
        [server] = [
            pid
            for pid in set(child_pids(os.getpid())) - others
            if b"threadline" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        first = decode(host.next_batch(turn))
        while not any(m["method"] == "item/agentMessage/delta" for m in first):
            first += decode(host.next_batch(turn))
        os.kill(server, signal.SIGKILL)
        last = read_turn(host, turn)[-1]
        assert last["method"] == "turn/completed"
        assert last["params"]["turn"]["status"] == "failed"
        assert last["params"]["turn"]["error"]["message"] == (
            "the threadline server exited; resume the thread on another server"
        )
        assert exited.wait(10)
        with pytest.raises(HostClosed):
            host.request("thread/read", {"threadId": tid})
    finally:
        host.close()
