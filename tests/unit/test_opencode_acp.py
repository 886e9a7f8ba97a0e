"""OpenCode's ACP tool updates, normalized by `OpenCodeAcpSession` before the shared mapper.

The update shapes are those of the real opencode 1.18.33 (captured with the fake Chat
Completions API). The e2e suite covers the paths with permission requests; these cover the
ones without (approvalPolicy "never": no request, so nothing but the updates carry the diff).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import trio

from threadline.backends import base as b
from threadline.backends.kit.acp import AcpTurnMapper
from threadline.backends.opencode.acp import OpenCodeAcpSession, _clean_patch
from threadline.protocol import FileChangeItem, PatchKindAdd, PatchKindUpdate

PATCH = (
    "Index: {path}\n"
    "===================================================================\n"
    "--- {path}\n"
    "+++ {path}\n"
    "@@ -1,3 +1,3 @@\n"
    " alpha\n"
    "-beta\n"
    "+BETA\n"
    " gamma\n"
)


class _Ctx:
    def __init__(self) -> None:
        self.events: list[b.BackendEvent] = []

    async def emit(self, event: b.BackendEvent) -> None:
        self.events.append(event)


def _session(cwd: Path) -> OpenCodeAcpSession:
    settings = b.SessionSettings(thread_id="t", cwd=str(cwd), mode="acp")
    return OpenCodeAcpSession(cast(Any, SimpleNamespace(alive=True)), settings)


def _forwarded(session: OpenCodeAcpSession) -> list[dict[str, Any]]:
    out = []
    while True:
        try:
            update = session._updates.receive_nowait()
        except trio.WouldBlock:
            return out
        assert update is not None
        out.append(update)


async def _items(session: OpenCodeAcpSession, cwd: Path) -> list[b.BackendEvent]:
    """Feed what the session forwarded through the shared mapper and its `_emit`."""
    mapper = AcpTurnMapper(cwd=str(cwd), backend_id="opencode", new_id=lambda: "new")
    for update in _forwarded(session):
        mapper.feed(update)
    ctx = _Ctx()
    await session._emit(cast(Any, ctx), mapper)
    return ctx.events


def _tool(update: str, call_id: str, **fields: Any) -> dict[str, Any]:
    return {"sessionUpdate": update, "toolCallId": call_id, **fields}


async def test_command_is_announced_with_its_command(tmp_path: Path) -> None:
    session = _session(tmp_path)
    session.on_update(
        _tool(
            "tool_call",
            "c1",
            title="bash",
            kind="execute",
            status="pending",
            rawInput={"cwd": str(tmp_path)},
        )
    )
    assert _forwarded(session) == []  # the tool's name is not a command
    session.on_update(
        _tool(
            "tool_call_update",
            "c1",
            status="in_progress",
            kind="execute",
            title="bash",
            rawInput={"command": "echo hi", "cwd": str(tmp_path)},
        )
    )
    [shown] = _forwarded(session)
    assert shown["sessionUpdate"] == "tool_call" and shown["kind"] == "execute"
    assert shown["rawInput"] == {"command": "echo hi", "cwd": str(tmp_path)}
    done = _tool("tool_call_update", "c1", status="completed", rawOutput={"output": "hi\n"})
    session.on_update(done)
    assert _forwarded(session) == [done]  # once shown, updates pass unchanged


async def test_write_without_permission_is_an_add_with_its_content(tmp_path: Path) -> None:
    session = _session(tmp_path)
    target = tmp_path / "new.txt"
    session.on_update(
        _tool("tool_call", "w1", title="write", kind="edit", status="pending", rawInput={})
    )
    session.on_update(
        _tool(
            "tool_call_update",
            "w1",
            status="in_progress",
            kind="edit",
            title="write",
            rawInput={"filePath": "new.txt", "content": "fresh\n"},
        )
    )
    assert _forwarded(session) == []  # held: a permission request or the result follows
    target.write_text("fresh\n")  # (OpenCode wrote it before reporting completion)
    session.on_update(
        _tool(
            "tool_call_update",
            "w1",
            status="completed",
            title="tmp/new.txt",
            content=[{"type": "content", "content": {"type": "text", "text": "Wrote file."}}],
            rawOutput={
                "output": "Wrote file.",
                "metadata": {"filepath": str(target), "exists": False},
            },
        )
    )
    started, completed = await _items(session, tmp_path)
    assert isinstance(started, b.ItemStarted) and isinstance(completed, b.ItemCompleted)
    item = completed.item
    assert isinstance(item, FileChangeItem) and item.status == "completed"
    [change] = item.changes
    assert change.path == str(target) and isinstance(change.kind, PatchKindAdd)
    assert "+fresh" in change.diff


async def test_edit_without_permission_shows_opencodes_patch(tmp_path: Path) -> None:
    session = _session(tmp_path)
    target = tmp_path / "old.txt"
    patch = PATCH.format(path=target)
    session.on_update(
        _tool("tool_call", "e1", title="edit", kind="edit", status="pending", rawInput={})
    )
    session.on_update(
        _tool(
            "tool_call_update",
            "e1",
            status="in_progress",
            kind="edit",
            title="edit",
            rawInput={"filePath": "old.txt", "oldString": "beta", "newString": "BETA"},
        )
    )
    session.on_update(
        _tool(
            "tool_call_update",
            "e1",
            status="completed",
            title="tmp/old.txt",
            # the snippet diff with a relative path that must not become the item's diff
            content=[{"type": "diff", "path": "old.txt", "oldText": "beta", "newText": "BETA"}],
            rawOutput={
                "output": "Edit applied successfully.",
                "metadata": {"diff": patch, "filediff": {"file": str(target), "patch": patch}},
            },
        )
    )
    started, completed = await _items(session, tmp_path)
    assert isinstance(started, b.ItemStarted) and started.item is completed.item
    assert isinstance(completed, b.ItemCompleted) and isinstance(completed.item, FileChangeItem)
    [change] = completed.item.changes
    assert change.path == str(target) and isinstance(change.kind, PatchKindUpdate)
    assert change.diff == _clean_patch(patch)
    assert change.diff.startswith(f"--- {target}\n") and "-beta\n+BETA\n" in change.diff


async def test_edit_is_announced_with_the_permission_requests_diff(tmp_path: Path) -> None:
    session = _session(tmp_path)
    target = tmp_path / "old.txt"
    session.on_update(
        _tool("tool_call", "e2", title="edit", kind="edit", status="pending", rawInput={})
    )
    session.on_update(
        _tool(
            "tool_call_update",
            "e2",
            status="in_progress",
            kind="edit",
            rawInput={"filePath": "old.txt", "oldString": "beta", "newString": "BETA"},
        )
    )
    call = {
        "toolCallId": "e2",
        "title": str(target),
        "kind": "edit",
        "status": "pending",
        "rawInput": {"filepath": str(target), "diff": PATCH.format(path=target)},
        "content": [
            {
                "type": "diff",
                "path": str(target),
                "oldText": "alpha\nbeta\ngamma\n",
                "newText": "alpha\nBETA\ngamma\n",
            }
        ],
    }
    # no turn is running here: the request is answered "cancelled" (fail closed)
    result = await session.on_request(
        "session/request_permission", {"sessionId": "s", "toolCall": call, "options": []}
    )
    assert result == {"outcome": {"outcome": "cancelled"}}
    [started] = await _items(session, tmp_path)
    assert isinstance(started, b.ItemStarted) and isinstance(started.item, FileChangeItem)
    [change] = started.item.changes
    assert change.path == str(target) and " alpha\n-beta\n+BETA\n gamma" in change.diff


def test_clean_patch_keeps_unknown_shapes() -> None:
    assert _clean_patch("@@ -1 +1 @@\n-a\n+b\n") == "@@ -1 +1 @@\n-a\n+b\n"
    assert _clean_patch("Index: x\n====\n--- x\n+++ x\n") == "--- x\n+++ x\n"
