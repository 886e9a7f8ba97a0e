"""The wire contract, against a real `python -m threadline` subprocess: framing, the handshake,
JSON-RPC errors, batches, the request size cap, responses to our own requests, stdout hygiene,
and request validation at the edge (backends, cwd, ids that could become paths)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.client import (
    ServerProcess,
    accept,
    assert_items_balanced,
    notifications,
    running_server,
)
from tests.support.schema_check import validate_def
from threadline.backends.registry import BACKEND_IDS

pytestmark = pytest.mark.e2e

INIT_PARAMS = {"clientInfo": {"name": "wire-tests", "version": "1.0"}}


async def null_id_error(srv: ServerProcess) -> dict[str, Any]:
    """The next queued message, which must be an error answered with id null."""
    message = await srv.next_event(timeout=10)
    assert isinstance(message, dict) and message.get("id", "missing") is None, message
    assert "error" in message, message
    return message["error"]  # type: ignore[no-any-return]


async def assert_still_serving(srv: ServerProcess) -> None:
    result = await srv.call("thread/list", {}, timeout=10)
    assert "data" in result


# -- framing, envelopes, ids -----------------------------------------------------------------------


async def test_jsonrpc_member_optional_and_ids_echoed(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        # with "jsonrpc":"2.0" and a string id
        init = await srv.request("initialize", INIT_PARAMS, rid="init-1", jsonrpc=True)
        assert init["id"] == "init-1" and "result" in init
        # without "jsonrpc", integer and string ids, including 0 and negative ones
        for rid in (0, -7, 123456789012, "x", "", "ünïcödé"):
            response = await srv.request("thread/list", {}, rid=rid)
            assert response["id"] == rid and type(response["id"]) is type(rid)
            assert "result" in response
        response = await srv.request("thread/list", {}, rid=5, jsonrpc=True)
        assert response["id"] == 5 and "result" in response
        # unknown fields on input are ignored, also in the envelope
        await srv.send({"id": 6, "method": "thread/list", "params": {"zzz": 1}, "trace": {}})
        recv = srv.expect(6, "thread/list")
        with trio.fail_after(10):
            assert "result" in await recv.receive()
    # every line written was one compact JSON object with "jsonrpc":"2.0"
    assert srv.all_messages
    for message in srv.all_messages:
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", message
    for line in srv.raw_lines:
        assert b"\n" not in line and json.loads(line)


async def test_handshake_rules(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        # Notifications before initialize are ignored (this one would create a thread).
        await srv.send(
            {"method": "thread/start", "params": {"modelProvider": "mock", "cwd": str(workdir)}}
        )
        await srv.send({"method": "initialized"})
        for method, params in (
            ("thread/list", {}),
            ("thread/start", {"modelProvider": "mock", "cwd": str(workdir)}),
            ("model/list", {}),
            ("nope/nope", {}),
        ):
            err = await srv.error(method, params)
            assert err == {"code": -32600, "message": "Not initialized"}
        await srv.request("initialize", INIT_PARAMS)
        await srv.send({"method": "initialized"})
        err = await srv.error("initialize", INIT_PARAMS)
        assert err == {"code": -32600, "message": "Already initialized"}
        # nothing was created by the early notification
        assert (await srv.call("thread/list", {}))["data"] == []
        assert (await srv.call("thread/loaded/list", {}))["data"] == []
    assert not (home / "threads").exists() or not any((home / "threads").iterdir())


async def test_initialize_requires_client_info(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        err = await srv.error("initialize", {})
        assert err["code"] == -32602 and "clientInfo" in err["message"]
        # a failed initialize does not count: the connection can still initialize
        await srv.initialize()


async def test_initialize_result_shape(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        result = await srv.call("initialize", INIT_PARAMS)
    assert result["userAgent"].startswith("wire-tests/")
    assert Path(result["codexHome"]) == home.resolve()
    assert result["platformFamily"] == "unix"
    assert result["platformOs"] == "linux"
    assert result["serverInfo"]["name"] == "threadline"
    from threadline import __version__

    assert result["serverInfo"]["version"] == __version__
    backends = {b["id"]: b for b in result["backends"]}
    assert set(BACKEND_IDS) <= set(backends)
    mock = backends["mock"]
    assert mock["available"] is True
    assert mock["defaultMode"] in mock["modes"]
    caps = mock["capabilities"][mock["defaultMode"]]
    assert caps["approvals"] and caps["interrupt"] and caps["resume"]


# -- malformed input ---------------------------------------------------------------------------


async def test_unparsable_lines_get_32700_and_serving_continues(
    nursery: trio.Nursery, home: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        for junk in (
            b"this is not json",
            b'{"id": 1, "method": "thread/list"',  # truncated
            b"\xff\xfe\xfd",  # invalid UTF-8
            b'{"id": 2, "method": "thread/list", "params": {"x": "\xff"}}',  # inside a string
            b"[" * 5000 + b"]" * 5000,  # nested too deeply
        ):
            await srv.send_raw(junk + b"\n")
            err = await null_id_error(srv)
            assert err["code"] == -32700, (junk[:40], err)
            assert err["message"].startswith("Parse error")
            await assert_still_serving(srv)
        # blank lines are ignored, CRLF line endings are fine
        await srv.send_raw(b"\n   \n")
        recv = srv.expect(9, "thread/list")
        await srv.send_raw(b'{"id": 9, "method": "thread/list", "params": {}}\r\n')
        with trio.fail_after(10):
            assert "result" in await recv.receive()


async def test_non_object_messages(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        for value in (5, "str", None, True):
            await srv.send(value)
            err = await null_id_error(srv)
            assert err["code"] == -32600 and "expected an object" in err["message"]
        for message, needle in (
            ({"id": 1}, "method"),
            ({"id": 2, "method": 7}, "method"),
            ({"id": 3, "method": "thread/list", "jsonrpc": "1.0"}, "1.0"),
            ({"id": 4, "method": "thread/list", "params": "x"}, "params"),
        ):
            recv = srv.expect(message["id"])
            await srv.send(message)
            with trio.fail_after(10):
                response = await recv.receive()
            assert response["error"]["code"] == -32600 and needle in response["error"]["message"]
        for bad_id in (1.5, True, {"a": 1}, [1]):
            await srv.send({"id": bad_id, "method": "thread/list", "params": {}})
            err = await null_id_error(srv)
            assert err["code"] == -32600 and "id must be" in err["message"]
        await assert_still_serving(srv)


async def test_batches(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        srv._methods.update({1: "thread/list", 3: "model/list"})
        await srv.send(
            [
                {"id": 1, "method": "thread/list", "params": {}},
                {"id": 2, "method": "no/such/method"},
                {"method": "initialized"},  # a notification: no entry in the answer
                {"jsonrpc": "2.0", "id": "three", "method": "model/list", "params": {}},
                42,
            ]
        )
        batch = await srv.next_event(timeout=10)
        assert isinstance(batch, list), batch
        validate_def("ServerMessage", batch)  # the schema describes batch answers too
        assert [m.get("id") for m in batch] == [1, 2, "three", None]
        assert "data" in batch[0]["result"]
        assert batch[1]["error"]["code"] == -32601
        assert any(m["model"] == "mock-1" for m in batch[2]["result"]["data"])
        assert batch[3]["error"]["code"] == -32600
        # an empty batch is an invalid request
        await srv.send([])
        err = await null_id_error(srv)
        assert err == {"code": -32600, "message": "Invalid request: empty batch"}
        # a batch of notifications only gets no answer at all
        await srv.send([{"method": "initialized"}])
        await assert_still_serving(srv)
        with trio.move_on_after(0.3):
            unexpected = await srv.next_event()
            raise AssertionError(f"unexpected message {unexpected}")


async def test_batch_before_initialize(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.send(
            [
                {"id": 1, "method": "thread/list", "params": {}},
                {"id": 2, "method": "initialize", "params": INIT_PARAMS},
                {"id": 3, "method": "thread/list", "params": {}},
            ]
        )
        batch = await srv.next_event(timeout=10)
        assert batch[0]["error"] == {"code": -32600, "message": "Not initialized"}
        assert "userAgent" in batch[1]["result"]
        assert "data" in batch[2]["result"]


async def test_unknown_method_and_bad_params(nursery: trio.Nursery, home: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        err = await srv.error("thread/frobnicate", {})
        assert err["code"] == -32601 and "thread/frobnicate" in err["message"]
        err = await srv.error("thread/list", {"limit": "ten"})
        assert err["code"] == -32602 and "limit" in err["message"]
        err = await srv.error("thread/read", {})
        assert err["code"] == -32602 and "threadId" in err["message"]
        err = await srv.error("turn/start", {"threadId": "x", "input": "hello"})
        assert err["code"] == -32602 and "input" in err["message"]
        err = await srv.error("thread/list", [1, 2])
        assert err["code"] == -32602 and "object" in err["message"]
        err = await srv.error("thread/start", {"approvalPolicy": "on-failure"})
        assert err["code"] == -32602 and "approvalPolicy" in err["message"]
        # unknown fields are ignored, whatever their name
        for field in ("unknown", "slot", "self", "args"):
            assert "data" in await srv.call("thread/list", {field: 1})
        await assert_still_serving(srv)


async def test_line_over_the_cap(nursery: trio.Nursery, home: Path) -> None:
    env = {"THREADLINE_MAX_REQUEST_BYTES": "4096"}
    async with running_server(nursery, home, env) as srv:
        await srv.initialize()
        big = json.dumps(
            {"id": 77, "method": "thread/list", "params": {"searchTerm": "x" * 10_000}}
        ).encode()
        await srv.send_raw(big[:5000])  # arrives in pieces, the rest after a pause
        await trio.sleep(0.1)
        await srv.send_raw(big[5000:] + b"\n")
        err = await null_id_error(srv)
        assert err["code"] == -32600
        assert "too large" in err["message"] and "4096" in err["message"]
        await assert_still_serving(srv)
        # a request just under the cap is served
        result = await srv.call("thread/list", {"searchTerm": "y" * 3900})
        assert result["data"] == []
        # an oversized final line without a newline, then EOF: answered, then a clean exit
        await srv.send_raw(b'{"id": 78, "params": "' + b"z" * 8000)
        await srv.close_stdin()
        err = await null_id_error(srv)
        assert "too large" in err["message"]
        assert await srv.wait() == 0
    assert "oversized" in srv.stderr_text


async def test_bad_max_request_setting_refuses_to_start(nursery: trio.Nursery, home: Path) -> None:
    for value in ("lots", "0", "-1"):
        async with running_server(
            nursery, home, {"THREADLINE_MAX_REQUEST_BYTES": value}, check_exit=False
        ) as srv:
            rc = await srv.wait(20)
        assert rc == 2
        assert "THREADLINE_MAX_REQUEST_BYTES" in srv.stderr_text
        assert srv.all_messages == []


# -- responses to our own requests -----------------------------------------------------------------


async def test_responses_to_unknown_and_answered_ids_are_ignored(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        # a response to an id never issued (before any server request existed)
        await srv.send({"id": 12345, "result": {"decision": "accept"}})
        await srv.send({"jsonrpc": "2.0", "id": "nope", "error": {"code": 1, "message": "x"}})
        await assert_still_serving(srv)
        tid = await srv.start_thread(workdir)
        turn_id = await srv.start_turn(tid, "/run echo ran\n/text done")
        seen: list[Any] = []
        request = await srv.wait_for(lambda e: "id" in e and "method" in e, seen=seen)
        assert request["method"] == "item/commandExecution/requestApproval"
        assert isinstance(request["id"], int)
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})
        await srv.send({"id": request["id"], "result": {"decision": "decline"}})  # duplicate
        done, events = await srv.collect_turn(turn_id, events=seen)
        assert done["params"]["turn"]["status"] == "completed"
        [cmd] = [
            e["params"]["item"]
            for e in notifications(events, "item/completed")
            if e["params"]["item"]["type"] == "commandExecution"
        ]
        assert cmd["status"] == "completed" and cmd["aggregatedOutput"] == "ran\n"
        assert_items_balanced(events)
        # a late answer after the turn ended is harmless too
        await srv.send({"id": request["id"], "result": {"decision": "accept"}})
        await assert_still_serving(srv)
    stderr = srv.stderr_text
    assert "unknown request id 12345" in stderr
    assert "unknown request id 'nope'" in stderr
    assert f"unknown request id {request['id']}" in stderr


# -- stdout hygiene --------------------------------------------------------------------------------


async def test_only_json_on_stdout_at_debug(
    nursery: trio.Nursery, home: Path, workdir: Path
) -> None:
    env = {"THREADLINE_LOG_LEVEL": "DEBUG"}
    async with running_server(nursery, home, env) as srv:
        await srv.initialize()
        tid = await srv.start_thread(workdir)
        done, _ = await srv.run_turn(
            tid,
            "/run echo to-stdout; echo to-stderr >&2\n/reason thinking\n/text hello",
            on_request=accept,
        )
        assert done["params"]["turn"]["status"] == "completed"
        await srv.send_raw(b"junk\n")
        await null_id_error(srv)
    for line in srv.raw_lines:
        assert isinstance(json.loads(line), dict | list)
    stderr = srv.stderr_text
    assert " DEBUG " in stderr  # logging really was at DEBUG, and went to stderr
    assert "to-stderr" in stderr  # the command's stderr is logged, never forwarded to stdout


# -- validation at the edge ------------------------------------------------------------------------


async def test_thread_start_validation(nursery: trio.Nursery, home: Path, workdir: Path) -> None:
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        err = await srv.error("thread/start", {"modelProvider": "bogus", "cwd": str(workdir)})
        assert err["code"] == -32602
        assert "bogus" in err["message"]
        for valid in BACKEND_IDS:
            assert valid in err["message"]
        a_file = workdir / "file.txt"
        a_file.write_text("x")
        for cwd in ("relative/dir", str(workdir / "missing"), str(a_file)):
            err = await srv.error("thread/start", {"modelProvider": "mock", "cwd": cwd})
            assert err["code"] == -32602, err
            assert "cwd" in err["message"] and cwd in err["message"]
        err = await srv.error(
            "thread/start", {"modelProvider": "mock", "cwd": str(workdir), "config": {"mode": "x"}}
        )
        assert err["code"] == -32602 and "mode" in err["message"]
        # nothing was created by the refused starts
        assert (await srv.call("thread/list", {}))["data"] == []


BAD_IDS = [
    "../../etc",
    "/etc/passwd",
    "..",
    ".",
    "",
    "../outside",
    "a/b",
    "01234567-89ab-7def-8123-456789abcdef/../../x",
    "01234567-89AB-7DEF-8123-456789ABCDEF",  # not canonical (upper case)
    "01234567-89ab-7def-8123-456789abcdef\n",
    "\x00",
]


async def test_ids_that_look_like_paths_are_refused(
    nursery: trio.Nursery, home: Path, tmp_path: Path, workdir: Path
) -> None:
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    async with running_server(nursery, home) as srv:
        await srv.initialize()
        for bad in BAD_IDS:
            for method, params in (
                ("thread/read", {"threadId": bad, "includeTurns": True}),
                ("thread/resume", {"threadId": bad}),
                ("thread/archive", {"threadId": bad}),
                ("turn/start", {"threadId": bad, "input": [{"type": "text", "text": "hi"}]}),
                ("turn/interrupt", {"threadId": bad, "turnId": bad}),
            ):
                err = await srv.error(method, params)
                assert err["code"] == -32600, (method, bad, err)
        # a well-formed id that does not exist is a clean error too
        missing = "01234567-89ab-7def-8123-456789abcdef"
        err = await srv.error("thread/resume", {"threadId": missing})
        assert err["code"] == -32600 and missing in err["message"]
        err = await srv.error("thread/read", {"threadId": missing})
        assert err["code"] == -32600
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    created = [p for p in after if p not in before]
    # Only the store's own directories may appear, all inside THREADLINE_HOME.
    assert all(p.parts[0] == "home" for p in created), created
    assert not (tmp_path / "outside").exists()
    for path in home.rglob("*"):
        assert path.relative_to(home).parts[0] == "threads", path
    if (home / "threads").exists():
        assert list((home / "threads").iterdir()) == []
    assert os.path.exists("/etc/passwd")  # (and untouched: the server never got near it)
