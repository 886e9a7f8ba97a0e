"""A scripted ACP agent (stdlib only) for tests/unit/test_acp_cancel.py, given to threadline as
the `gemini` binary (`config.cliPath`, run as `<launcher> --acp`), and for
tests/unit/test_acp_generic.py, run by the generic `acp` backend.

Flags: ``--exit-at-start`` (print a complaint on stderr and exit 3 before `initialize`),
``--no-load`` (`initialize` does not offer `loadSession`), ``--images`` (it offers
`promptCapabilities.image`).

Each prompt's text is a script:

* ``say:TEXT``: one `agent_message_chunk` TEXT, then `end_turn`.
* ``hold:TAG``: a chunk ``held TAG``; after `session/cancel`, it waits until the file
  ``$FAKE_ACP_DIR/release-TAG`` exists, then sends a late chunk ``LATE TAG`` and answers
  `cancelled` (as Gemini and OpenCode do, late), after asking to write ``late-TAG.txt``
  (`fs/write_text_file`). A TAG starting with ``never`` is never
  answered (a hung agent).
* ``slow:TAG``: a chunk ``TAG start``; once ``$FAKE_ACP_DIR/release-TAG`` exists, a chunk
  `` TAG end`` and `end_turn`.
* ``garbage:TAG``: lines that are no JSON-RPC message for threadline (not JSON, a JSON
  array, an answer to no request, updates for no session or without params), then a chunk
  ``TAG ok`` and `end_turn`.
* ``ask-unknown:TAG``: a `session/request_permission` (id ``perm-TAG``) for a session that
  does not exist, then a chunk ``asked TAG`` and `end_turn`.
* ``ask:TAG``: a `tool_call` with only the tool's name (``bash``, as OpenCode's first sight
  of a call), then a `session/request_permission` (id ``perm-TAG``) with its command ``touch
  TAG``; allowed, it "runs" (a completed update with output ``ran TAG``) and says ``done
  TAG``, else it reports the call failed (as OpenCode and Qwen Code do) and says ``skipped
  TAG``; then `end_turn`.

Everything it does goes to ``$FAKE_ACP_DIR/journal`` as lines: ``start PID``, ``new SID``,
``load SID``, ``prompt SID TEXT``, ``cancel SID``, ``answer SID STOPREASON``, ``reply ID
ok|error`` (threadline's answer to its own request ID). What it was given goes to
``$FAKE_ACP_DIR/facts``: ``argv ARGS`` and ``env $FAKE_ACP_NOTE $PWD`` at start, ``blocks
SID TYPE,TYPE…`` per prompt (its content block types). It exits on stdin EOF.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

DIR = Path(os.environ["FAKE_ACP_DIR"])
_write_lock = threading.Lock()
_cancelled: dict[str, threading.Event] = {}
_replies: dict[str, queue.Queue[dict[str, Any]]] = {}  # our request id -> threadline's reply


def journal(line: str, name: str = "journal") -> None:
    with _write_lock, open(DIR / name, "a") as f:
        f.write(line + "\n")


def send(message: dict[str, Any]) -> None:
    with _write_lock:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


def chunk(sid: str, text: str) -> None:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    send({"method": "session/update", "params": {"sessionId": sid, "update": update}})


def released(tag: str) -> bool:
    return (DIR / f"release-{tag}").exists()


def wait_released(tag: str) -> None:
    while not released(tag):
        time.sleep(0.01)


def update(sid: str, update: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": sid, "update": update}})


def ask(sid: str, tag: str) -> None:
    call_id = f"call-{tag}"
    update(
        sid,
        {
            "sessionUpdate": "tool_call",
            "toolCallId": call_id,
            "title": "bash",
            "kind": "execute",
            "status": "pending",
            "rawInput": {},
        },
    )
    call = {
        "toolCallId": call_id,
        "title": "bash",
        "kind": "execute",
        "rawInput": {"command": f"touch {tag}"},
    }
    options = [
        {"optionId": "once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ]
    rid = f"perm-{tag}"
    _replies[rid] = queue.Queue()
    params = {"sessionId": sid, "toolCall": call, "options": options}
    send({"id": rid, "method": "session/request_permission", "params": params})
    reply = _replies[rid].get()
    outcome = (reply.get("result") or {}).get("outcome") or {}
    if outcome.get("optionId") == "once":
        content = [{"type": "content", "content": {"type": "text", "text": f"ran {tag}"}}]
        update(
            sid,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call_id,
                "status": "completed",
                "content": content,
            },
        )
        chunk(sid, f"done {tag}")
    else:
        update(
            sid, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "failed"}
        )
        chunk(sid, f"skipped {tag}")


def prompt(rid: Any, sid: str, text: str) -> None:
    cancel = _cancelled[sid]
    kind, _, arg = text.partition(":")
    stop = "end_turn"
    if kind == "say":
        chunk(sid, arg)
    elif kind == "hold":
        chunk(sid, f"held {arg}")
        cancel.wait()
        if arg.startswith("never"):
            return
        wait_released(arg)
        # too late: the turn is over (threadline must refuse the write)
        params = {"sessionId": sid, "path": f"late-{arg}.txt", "content": "late"}
        send({"id": f"write-{arg}", "method": "fs/write_text_file", "params": params})
        chunk(sid, f"LATE {arg}")
        stop = "cancelled"
    elif kind == "slow":
        chunk(sid, f"{arg} start")
        wait_released(arg)
        chunk(sid, f" {arg} end")
    elif kind == "garbage":
        with _write_lock:
            sys.stdout.write("this is not JSON\n[1, 2]\n")
            sys.stdout.flush()
        send({"id": 99999, "result": {}})
        send({"method": "session/update", "params": {"sessionId": "nobody", "update": {}}})
        send({"method": "session/update"})
        chunk(sid, f"{arg} ok")
    elif kind == "ask":
        ask(sid, arg)
    elif kind == "ask-unknown":
        call = {"toolCallId": f"call-{arg}", "title": "touch x", "kind": "execute"}
        options = [{"optionId": "once", "name": "Allow", "kind": "allow_once"}]
        params = {"sessionId": "no-such-session", "toolCall": call, "options": options}
        send({"id": f"perm-{arg}", "method": "session/request_permission", "params": params})
        chunk(sid, f"asked {arg}")
    journal(f"answer {sid} {stop}")
    send({"id": rid, "result": {"stopReason": stop}})


def main() -> None:
    flags = sys.argv[1:]
    if "--exit-at-start" in flags:
        sys.stderr.write("fake agent: no model configured, giving up\n")
        sys.exit(3)
    journal(f"start {os.getpid()}")
    journal(f"argv {' '.join(flags)}", "facts")
    journal(f"env {os.environ.get('FAKE_ACP_NOTE', '-')} {os.environ.get('PWD', '-')}", "facts")
    for line in sys.stdin:
        msg = json.loads(line)
        method, params, rid = msg.get("method"), msg.get("params") or {}, msg.get("id")
        if method == "initialize":
            caps = {
                "loadSession": "--no-load" not in flags,
                "promptCapabilities": {"image": "--images" in flags},
            }
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": caps}})
        elif method == "session/new":
            sid = str(uuid.uuid4())
            journal(f"new {sid}")
            send({"id": rid, "result": {"sessionId": sid}})
        elif method == "session/load":
            journal(f"load {params['sessionId']}")
            send({"id": rid, "result": {}})
        elif method == "session/prompt":
            sid = params["sessionId"]
            text = "".join(b.get("text", "") for b in params["prompt"])
            journal(f"prompt {sid} {text}")
            journal(
                f"blocks {sid} {','.join(b.get('type', '?') for b in params['prompt'])}", "facts"
            )
            _cancelled.setdefault(sid, threading.Event()).clear()
            threading.Thread(target=prompt, args=(rid, sid, text), daemon=True).start()
        elif method == "session/cancel":
            journal(f"cancel {params['sessionId']}")
            _cancelled.setdefault(params["sessionId"], threading.Event()).set()
        elif method is None and rid is not None:
            journal(f"reply {rid} {'error' if 'error' in msg else 'ok'}")
            if rid in _replies:
                _replies[rid].put(msg)
        elif rid is not None:
            send({"id": rid, "error": {"code": -32601, "message": f"no {method}"}})
    os._exit(0)


if __name__ == "__main__":
    main()
