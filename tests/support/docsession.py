"""Running the JSON-RPC examples of the docs against a real `threadline` over stdio
(tests/e2e/test_docs_examples.py; the blocks come from tests/support/docblocks.py).

Two shapes:

- a session (`json` / `jsonl` block): one message per line, sent line by line as a user pasting
  them would, each request after the previous one was answered. `initialize` is sent first
  when the block does not start with it. `"<thread id>"` stands for the id of the last thread
  the session started (the reader copies it from the reply). A reply line (`result` / `error`)
  in the block is what the request with its id must get; without one, an error reply fails.
- a transcript (`text transcript` block): `→ message` lines are sent, `← message` lines must
  arrive in that order (others may come in between). Ids like `thread-1`, `turn-1`, `item-2`
  stand for the real ones (the same short id always for the same real one); `, …` means
  fields left out, a `…` line messages left out, `//` lines are comments.

Either way, the last turn started must end `completed`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import trio

from .client import Message, ServerProcess

__all__ = ["THREAD_ID", "run_session", "run_transcript", "session_lines"]

THREAD_ID = "<thread id>"
_TIMEOUT = 30
_SHORT_ID = re.compile(r"^(thread|turn|item)-\d+$")
_ELIDED = re.compile(r",\s*…")


def session_lines(text: str) -> list[str]:
    """The block's messages; every non-blank line must be one JSON-RPC message."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"not one JSON message per line ({exc}): {line}") from None
        assert isinstance(message, dict), f"not a JSON-RPC message: {line}"
        assert "method" in message or "id" in message, f"not a JSON-RPC message: {line}"
    return lines


async def _send_request(server: ServerProcess, line: str) -> Message:
    message = json.loads(line)
    reply = server.expect(message["id"], message["method"])
    await server.send_raw(line.encode() + b"\n")
    with trio.fail_after(_TIMEOUT):
        return await reply.receive()


async def _finish_turn(server: ServerProcess, turn_id: str | None) -> None:
    if turn_id is None:
        return

    def refuse(request: Message) -> Any:
        raise AssertionError(f"the example cannot answer {request['method']}")

    completed, _ = await server.collect_turn(turn_id, on_request=refuse, timeout=_TIMEOUT)
    turn = completed["params"]["turn"]
    assert turn["status"] == "completed", f"the example's turn ended {turn}"


async def run_session(server: ServerProcess, lines: list[str]) -> None:
    """Send a session's messages (see the module docstring) and check the replies."""
    shown = {json.loads(line)["id"]: json.loads(line) for line in lines if _is_reply(line)}
    if json.loads(lines[0]).get("method") != "initialize":
        await server.initialize()
    thread_id: str | None = None
    turn_id: str | None = None
    for line in lines:
        if _is_reply(line):
            continue
        if THREAD_ID in line:
            assert thread_id is not None, f"{THREAD_ID} before any thread/start: {line}"
            line = line.replace(THREAD_ID, thread_id)
        message = json.loads(line)
        if "id" not in message:  # a notification (`initialized`)
            await server.send_raw(line.encode() + b"\n")
            continue
        reply = await _send_request(server, line)
        expected = shown.get(message["id"])
        if expected is None or "error" not in expected:
            assert "error" not in reply, f"{message['method']} failed: {reply['error']}"
        else:
            assert reply.get("error", {}).get("code") == expected["error"]["code"], reply
        result = reply.get("result") or {}
        thread_id = (result.get("thread") or {}).get("id", thread_id)
        turn_id = (result.get("turn") or {}).get("id", turn_id)
    await _finish_turn(server, turn_id)


def _is_reply(line: str) -> bool:
    message = json.loads(line)
    return "method" not in message and ("result" in message or "error" in message)


# -- transcripts -----------------------------------------------------------------------------------


class _Names:
    """Short ids of a transcript (`thread-1`) ↔ real ids, and the real cwd ↔ the shown one."""

    def __init__(self, cwd: Path, shown_cwd: str) -> None:
        self.real: dict[str, str] = {}
        self.cwd, self.shown_cwd = str(cwd), shown_cwd

    def fill(self, line: str) -> str:
        """A → line as it must be sent: real ids, the real cwd."""
        for short, real in self.real.items():
            line = line.replace(f'"{short}"', json.dumps(real))
        return line.replace(json.dumps(self.shown_cwd), json.dumps(self.cwd))

    def match(self, shown: Any, real: Any) -> dict[str, str] | None:
        """The short ids learnt if `real` has everything `shown` has, else None."""
        learnt = dict(self.real)
        return learnt if self._match(shown, real, learnt) else None

    def _match(self, shown: Any, real: Any, learnt: dict[str, str]) -> bool:
        if isinstance(shown, dict):
            return isinstance(real, dict) and all(
                k in real and self._match(v, real[k], learnt) for k, v in shown.items()
            )
        if isinstance(shown, list):
            return (
                isinstance(real, list)
                and len(shown) == len(real)
                and all(self._match(s, r, learnt) for s, r in zip(shown, real, strict=True))
            )
        if isinstance(shown, str) and _SHORT_ID.match(shown) and isinstance(real, str):
            return learnt.setdefault(shown, real) == real
        if isinstance(real, str):
            real = real.replace(self.cwd, self.shown_cwd)
        return bool(shown == real)


def _transcript(text: str) -> list[tuple[str, Message]]:
    """(arrow, message) per line; `, …` dropped, comment and `…` lines skipped."""
    out = []
    for line in text.splitlines():
        arrow, _, rest = line.partition(" ")
        if arrow in ("→", "←"):
            out.append((arrow, json.loads(_ELIDED.sub("", rest))))
        else:
            assert line.startswith("//") or line.strip() in ("", "…"), f"unknown line: {line}"
    return out


async def _expect(server: ServerProcess, shown: Message, names: _Names) -> None:
    """Wait for the next message from the server that has everything `shown` has. The end of
    a turn, or a server request the transcript does not answer here, means it never comes."""
    seen: list[Any] = []

    def matches(event: Any) -> bool:
        learnt = names.match(shown, event)
        if learnt is not None:
            names.real = learnt
            return True
        return isinstance(event, dict) and (
            event.get("method") == "turn/completed" or {"id", "method"} <= event.keys()
        )

    try:
        await server.wait_for(matches, timeout=_TIMEOUT, seen=seen)
    except trio.TooSlowError:
        pass
    else:
        if names.match(shown, seen[-1]) is not None:
            return
    same = [e for e in seen if isinstance(e, dict) and e.get("method") == shown["method"]]
    raise AssertionError(f"never arrived: {shown}\nthe {shown['method']} seen: {same}")


async def run_transcript(server: ServerProcess, text: str, cwd: Path, shown_cwd: str) -> None:
    """Replay a transcript (see the module docstring) with the thread in `cwd`, which the
    transcript shows as `shown_cwd`."""
    names = _Names(cwd, shown_cwd)
    replies: dict[Any, Message] = {}
    turn_id: str | None = None
    await server.initialize()
    for arrow, shown in _transcript(text):
        if arrow == "→" and "method" in shown:
            reply = await _send_request(server, names.fill(json.dumps(shown)))
            replies[shown["id"]] = reply
            turn_id = ((reply.get("result") or {}).get("turn") or {}).get("id", turn_id)
        elif arrow == "→":  # the client's answer to a server request
            await server.send_raw(names.fill(json.dumps(shown)).encode() + b"\n")
        elif "method" not in shown:  # the reply to a request sent above
            learnt = names.match(shown, replies.get(shown["id"]))
            assert learnt is not None, f"shown {shown}, got {replies.get(shown['id'])}"
            names.real = learnt
        else:
            await _expect(server, shown, names)
    await _finish_turn(server, turn_id)
