"""P2: second-turn latency on threadline's live CLI process vs the same CLI spawned per turn.

For each real agent CLI (claude, gemini, codex, opencode), against the project's fake model
server (tests/fakes, 127.0.0.1 only), in the same run:
- threadline: `turn/start` written → first `item/agentMessage/delta` read, on the 2nd turn of a
  thread (the CLI process is already running: claude's stream-json process, `gemini --acp`,
  `codex app-server`, `opencode acp`);
- cold: the same CLI spawned to resume that thread's session for one more turn, spawn → its
  first text output on stdout: `claude -p --resume` (first text delta), `gemini -p --resume`
  (first assistant message), `codex exec resume --json` (first agent_message item: exec --json
  has no deltas; the native binary, as threadline runs it, not the slower npm launcher),
  `opencode run --session` (first text part).

One row per CLI, goal: ratio threadline/cold <= 0.1x. Each run uses a fresh threadline process
and a fresh thread; the cold spawn resumes the session threadline's thread created (its
`backend_session_id` in THREADLINE_HOME/threads/<id>/meta.json).

Usage: python benchmarks/p2_second_turn.py [--quick] [--runs N] [--cli NAME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from _harness import (
    Result,
    Threadline,
    base_env,
    claude_env,
    cold_first_output,
    find_cli,
    median_row,
    ms,
    print_table,
)

ANSWER = "The quick answer streams back in a few chunks."
COLD_PROMPT = b"second turn please"
#: A threadline run that takes longer than this is killed (the benchmark fails, not hangs).
RUN_TIMEOUT = 180.0


@dataclass
class Setup:
    """One CLI's offline environment, ready to drive."""

    env: dict[str, str]
    #: extra environment for threadline (backend, CLI path, model)
    threadline_env: dict[str, str]
    work: Path
    state: Path
    #: the cold command line that resumes session `sid` (prompt on stdin)
    cold_argv: Callable[[str], list[str]]
    #: which stdout JSON line of the cold CLI is its first text output
    is_first: Callable[[dict[str, Any]], bool]
    thread_params: dict[str, Any]
    #: another cold command line measured for the note: (label, argv for session `sid`)
    alt_cold: tuple[str, Callable[[str], list[str]]] | None = None


def _dirs(base: Path) -> tuple[Path, Path]:
    work, state = base / "work", base / "state"
    work.mkdir()
    state.mkdir()
    return work, state


@contextmanager
def _claude(base: Path) -> Iterator[Setup]:
    from tests.fakes.anthropic import FakeAnthropic, Rule, Step, Text

    claude = find_cli("claude")
    with FakeAnthropic(Rule("", [Step([Text(ANSWER)])])) as fake:
        home = base / "home"
        home.mkdir()
        work, state = _dirs(base)
        env = claude_env(home, fake.url)

        def is_first(m: dict[str, Any]) -> bool:
            event = m.get("event") or {}
            return bool(
                m.get("type") == "stream_event"
                and (event.get("delta") or {}).get("type") == "text_delta"
            )

        yield Setup(
            env,
            {"AGENT_BACKEND": "claude", "BACKEND_CLI_PATH": claude},
            work,
            state,
            lambda sid: [
                claude,
                "-p",
                f"--resume={sid}",
                "--output-format",
                "stream-json",
                "--verbose",
                "--include-partial-messages",
            ],
            is_first,
            {},
        )


@contextmanager
def _gemini(base: Path) -> Iterator[Setup]:
    from tests.fakes.gemini import FakeGemini, Rule, Step, Text, gemini_env, gemini_home

    gemini = find_cli("gemini")
    with FakeGemini(Rule("", [Step([Text(ANSWER)])])) as fake:
        home = gemini_home(base, fake.url)
        work, state = _dirs(base)
        env = base_env(gemini_env(home, fake.url))
        yield Setup(
            env,
            {
                "AGENT_BACKEND": "gemini",
                "BACKEND_CLI_PATH": gemini,
                "BACKEND_MODEL": "gemini-2.5-flash",
            },
            work,
            state,
            lambda sid: [
                gemini,
                "-o",
                "stream-json",
                "-m",
                "gemini-2.5-flash",
                "--resume",
                sid,
                "-p",
                "",
            ],
            lambda m: m.get("type") == "message" and m.get("role") == "assistant",
            {},
        )


def _exec_resume(binary: str, sid: str) -> list[str]:
    """`codex exec resume` as threadline's exec mode runs it (flags before `resume`, the
    prompt from stdin)."""
    return [
        binary,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "resume",
        sid,
        "-",
    ]


@contextmanager
def _codex(base: Path) -> Iterator[Setup]:
    from tests.fakes.openai_responses import FakeResponses, Rule, Step, Text, codex_env, codex_home

    from threadline.backends.codex.invocation import native_binary

    codex = find_cli("codex")
    native, launcher_env = native_binary(codex)
    with FakeResponses(Rule("", [Step([Text(ANSWER)])])) as fake:
        # The launcher's variables, as threadline sets them when it runs the native binary.
        env = base_env({**codex_env(codex_home(base, fake.url)), **launcher_env})
        work, state = _dirs(base)

        def is_first(m: dict[str, Any]) -> bool:
            item = m.get("item") or {}
            return m.get("type") == "item.completed" and item.get("type") == "agent_message"

        yield Setup(
            env,
            {"AGENT_BACKEND": "codex", "BACKEND_CLI_PATH": codex},
            work,
            state,
            partial(_exec_resume, native),
            is_first,
            {"approvalPolicy": "never"},
            (
                "through the npm launcher",
                partial(_exec_resume, codex),
            ),
        )


@contextmanager
def _opencode(base: Path) -> Iterator[Setup]:
    from tests.fakes.openai_chat import FakeOpenAIChat, Rule, Step, Text, opencode_env

    opencode = find_cli("opencode")
    with FakeOpenAIChat(Rule("", [Step([Text(ANSWER)])])) as fake:
        work, state = _dirs(base)
        env = base_env(opencode_env(base, fake.url, cwd=work))
        yield Setup(
            env,
            {"AGENT_BACKEND": "opencode", "BACKEND_CLI_PATH": opencode},
            work,
            state,
            lambda sid: [opencode, "run", "--format", "json", "--session", sid],
            lambda m: m.get("type") == "text",
            {},
        )


#: name → (set-up, threadline's live process, the cold command)
CLIS: dict[str, tuple[Callable[[Path], Any], str, str]] = {
    "claude": (_claude, "claude stream-json", "claude -p --resume"),
    "gemini": (_gemini, "gemini --acp", "gemini -p --resume"),
    "codex": (_codex, "codex app-server", "codex exec resume --json"),
    "opencode": (_opencode, "opencode acp", "opencode run --session"),
}


def measure(name: str, runs: int) -> tuple[list[float], list[float], str]:
    """(threadline 2nd-turn first-delta times, cold resume first-output times, seconds; a note
    on the alternative cold command, if the CLI has one)."""
    make, _, _ = CLIS[name]
    warm: list[float] = []
    cold: list[float] = []
    alt: list[float] = []
    alt_label = ""
    with tempfile.TemporaryDirectory(prefix=f"p2-{name}-") as tmp, make(Path(tmp)) as s:
        for i in range(runs):
            log = Path(tmp) / f"threadline-{i}.log"
            env = {**s.env, **s.threadline_env, "THREADLINE_HOME": str(s.state)}
            tl = Threadline({**env, "THREADLINE_LOG_FILE": str(log)})
            watchdog = threading.Timer(RUN_TIMEOUT, tl.proc.kill)
            watchdog.start()
            try:
                tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
                params = {"cwd": str(s.work), **s.thread_params}
                tid = tl.call("thread/start", params)["thread"]["id"]
                tl.turn(tid, "first turn")
                warm.append(tl.turn(tid, "second turn")[0])
            except RuntimeError as exc:
                text = log.read_text(errors="replace") if log.exists() else "(none)\n"
                tail = "".join(text.splitlines(True)[-20:])
                raise RuntimeError(
                    f"{name}, run {i + 1}: {exc}; threadline's log:\n{tail}"
                ) from exc
            finally:
                watchdog.cancel()
                tl.close()
            record = json.loads((s.state / "threads" / tid / "meta.json").read_text())
            sid = record["backend_session_id"]
            cold.append(cold_first_output(s.cold_argv(sid), s.env, s.work, COLD_PROMPT, s.is_first))
            if s.alt_cold is not None:
                alt_label, argv = s.alt_cold
                alt.append(cold_first_output(argv(sid), s.env, s.work, COLD_PROMPT, s.is_first))
    note = ""
    if alt:
        a = statistics.median(alt)
        note = f"; cold {alt_label}: {ms(a)} (ratio {statistics.median(warm) / a:.3f}x)"
    return warm, cold, note


def run(
    quick: bool = False, runs: int | None = None, clis: list[str] | None = None
) -> list[Result]:
    n = runs if runs is not None else (1 if quick else 5)
    results = []
    for name in clis or list(CLIS):
        _, live, cold_label = CLIS[name]
        warm, cold, alt_note = measure(name, n)
        results.append(
            median_row(
                "P2",
                f"{name}: 2nd turn/start → first delta (live {live}) vs cold `{cold_label}` "
                "spawn → first text",
                warm,
                cold,
                0.1,
                note=f"min {ms(min(warm))} / {ms(min(cold))}{alt_note}",
            )
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one run per CLI (smoke test)")
    parser.add_argument("--runs", type=int, default=None, help="runs per CLI (default 5)")
    parser.add_argument("--cli", action="append", choices=list(CLIS), help="only these CLIs")
    args = parser.parse_args()
    print_table(run(args.quick, args.runs, args.cli))


if __name__ == "__main__":
    main()
