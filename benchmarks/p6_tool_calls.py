"""P6: a client-defined tool call as the model sees it, through threadline, against the same
tool served to the CLI by a stdio MCP server of its own.

Per real CLI, against its fake model server (tests/fakes, 127.0.0.1 only), in the same run and
alternating A B A B: one turn in which the model calls the `echo` tool `CALLS` times in a row,
then answers; turn/start → turn/completed is timed on a warmed-up thread (its first turn started
the CLI and connected its MCP servers).
- threadline: `echo` is a `dynamicTools` tool: the CLI calls threadline's tool host through the
  bridge, the client answers `item/tool/call` at once (the benchmark is the client);
- baseline: `echo` is tests/fakes/mcp_server.py's, in `config.mcp_servers`: the CLI starts it
  and calls it directly, threadline only passes the configuration.

What threadline adds per call = (threadline turn - baseline turn) / CALLS. Goal: ≤ 20 ms.

Usage: python benchmarks/p6_tool_calls.py [--quick] [--runs N] [--cli NAME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import ROOT, Result, Threadline, base_env, claude_env, find_cli, print_table

CALLS = 10
GOAL_MS = 20.0
MCP_SERVER = str(ROOT / "tests" / "fakes" / "mcp_server.py")
ECHO = {
    "name": "echo",
    "description": "Echo the text back.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


@dataclass
class Setup:
    env: dict[str, str]
    threadline_env: dict[str, str]
    work: Path
    #: points the fake model at a tool name (the CLI's name for `server`'s `echo`)
    script: Callable[[str], None]
    #: the CLI's name for tool `echo` of MCP server `server`
    tool_name: Callable[[str], str]


@contextmanager
def _claude(base: Path) -> Iterator[Setup]:
    from tests.fakes.anthropic import FakeAnthropic, Rule, ToolUse

    claude = find_cli("claude")
    with FakeAnthropic() as fake:
        home = base / "home"
        home.mkdir()
        work = base / "work"
        work.mkdir()
        env = claude_env(home, fake.url)

        def script(name: str) -> None:
            calls = [ToolUse(name, {"text": f"call {i}"}) for i in range(CALLS)]
            fake.set_script(
                Rule("warm up", [ToolUse(name, {"text": "w"}), "warm"]),
                Rule("go", [*calls, "done"]),
            )

        yield Setup(
            env,
            {"AGENT_BACKEND": "claude", "BACKEND_CLI_PATH": claude},
            work,
            script,
            lambda server: f"mcp__{server}__echo",
        )


def _work(base: Path) -> Path:
    work = base / "work"
    work.mkdir()
    return work


@contextmanager
def _codex(base: Path) -> Iterator[Setup]:
    from tests.fakes.openai_responses import (
        FakeResponses,
        FunctionCall,
        Rule,
        codex_env,
        codex_home,
    )

    codex = find_cli("codex")
    with FakeResponses() as fake:
        env = base_env(codex_env(codex_home(base, fake.url)))

        def script(server: str) -> None:
            def call(text: str) -> FunctionCall:
                return FunctionCall("echo", {"text": text}, namespace=f"mcp__{server}")

            calls = [call(f"call {i}") for i in range(CALLS)]
            fake.set_script(Rule("warm up", [call("w"), "warm"]), Rule("go", [*calls, "done"]))

        yield Setup(
            env,
            {"AGENT_BACKEND": "codex", "BACKEND_CLI_PATH": codex},
            _work(base),
            script,
            lambda server: server,
        )


@contextmanager
def _gemini(base: Path) -> Iterator[Setup]:
    from tests.fakes.gemini import FakeGemini, FunctionCall, Rule, gemini_env, gemini_home

    gemini = find_cli("gemini")
    with FakeGemini() as fake:
        env = base_env(gemini_env(gemini_home(base, fake.url), fake.url))

        def script(name: str) -> None:
            calls = [FunctionCall(name, {"text": f"call {i}"}) for i in range(CALLS)]
            fake.set_script(
                Rule("warm up", [FunctionCall(name, {"text": "w"}), "warm"]),
                Rule("go", [*calls, "done"]),
            )

        yield Setup(
            env,
            {
                "AGENT_BACKEND": "gemini",
                "BACKEND_CLI_PATH": gemini,
                "BACKEND_MODEL": "gemini-2.5-flash",
            },
            _work(base),
            script,
            lambda server: f"mcp_{server}_echo",
        )


@contextmanager
def _opencode(base: Path) -> Iterator[Setup]:
    from tests.fakes.openai_chat import FakeOpenAIChat, Rule, ToolCall, opencode_env

    opencode = find_cli("opencode")
    with FakeOpenAIChat() as fake:
        work = _work(base)
        env = base_env(opencode_env(base, fake.url, cwd=work))

        def script(name: str) -> None:
            calls = [ToolCall(name, {"text": f"call {i}"}) for i in range(CALLS)]
            fake.set_script(
                Rule("warm up", [ToolCall(name, {"text": "w"}), "warm"]),
                Rule("go", [*calls, "done"]),
            )

        yield Setup(
            env,
            {"AGENT_BACKEND": "opencode", "BACKEND_CLI_PATH": opencode},
            work,
            script,
            lambda server: f"{server}_echo",
        )


SETUPS: dict[str, Callable[[Path], Any]] = {
    "claude": _claude,
    "codex": _codex,
    "gemini": _gemini,
    "opencode": _opencode,
}


def _turn(tl: Threadline, thread_id: str, text: str) -> float:
    """One turn, answering every `item/tool/call` at once; turn/start → turn/completed (s)."""
    t0 = time.perf_counter()
    tl.send("turn/start", {"threadId": thread_id, "input": [{"type": "text", "text": text}]})
    while True:
        msg = tl.read()
        if msg.get("method") == "item/tool/call":
            text_in = (msg["params"].get("arguments") or {}).get("text", "")
            answer = {
                "contentItems": [{"type": "inputText", "text": f"echo: {text_in}"}],
                "success": True,
            }
            assert tl.proc.stdin is not None
            tl.proc.stdin.write(json.dumps({"id": msg["id"], "result": answer}).encode() + b"\n")
            tl.proc.stdin.flush()
        elif msg.get("method") == "turn/completed":
            turn = msg["params"]["turn"]
            assert turn["status"] == "completed", turn
            return time.perf_counter() - t0


def _run_once(setup: Setup, state: Path, dynamic: bool) -> float:
    env = {**setup.env, **setup.threadline_env, "THREADLINE_HOME": str(state)}
    params: dict[str, Any] = {"cwd": str(setup.work), "approvalPolicy": "never"}
    if dynamic:
        params["dynamicTools"] = [ECHO]
        setup.script(setup.tool_name("threadline"))
    else:
        server = {"command": sys.executable, "args": [MCP_SERVER]}
        params["config"] = {"mcp_servers": {"bench": server}}
        setup.script(setup.tool_name("bench"))
    tl = Threadline(env)
    try:
        tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
        thread_id = tl.call("thread/start", params)["thread"]["id"]
        _turn(tl, thread_id, "warm up")
        return _turn(tl, thread_id, "go")
    finally:
        tl.close()


def measure(cli: str, runs: int) -> tuple[list[float], list[float]]:
    """(threadline, baseline) turn times in seconds, alternating."""
    ours: list[float] = []
    theirs: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, SETUPS[cli](Path(tmp)) as setup:
        for i in range(runs):
            for dynamic in (True, False):
                state = Path(tmp) / f"state-{i}-{dynamic}"
                state.mkdir()
                (ours if dynamic else theirs).append(_run_once(setup, state, dynamic))
    return ours, theirs


def run(
    quick: bool = False, runs: int | None = None, clis: list[str] | None = None
) -> list[Result]:
    runs = runs or (1 if quick else 5)
    results = []
    for cli in clis or list(SETUPS):
        ours, theirs = measure(cli, runs)
        added = (statistics.median(ours) - statistics.median(theirs)) / CALLS * 1000
        ours_ms = statistics.median(ours) / CALLS * 1000
        theirs_ms = statistics.median(theirs) / CALLS * 1000
        results.append(
            Result(
                id="P6",
                what=f"tool call round trip, {cli} (per call, {CALLS} per turn)",
                ours=f"{ours_ms:.1f} ms",
                theirs=f"{theirs_ms:.1f} ms",
                ratio=ours_ms / theirs_ms if theirs_ms else None,
                goal=f"adds ≤ {GOAL_MS:.0f} ms",
                ok=added <= GOAL_MS,
                note=f"adds {added:+.1f} ms per call; median of {runs} turns each",
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--cli", action="append", choices=list(SETUPS))
    args = parser.parse_args()
    print_table(run(args.quick, args.runs, args.cli))


if __name__ == "__main__":
    main()
