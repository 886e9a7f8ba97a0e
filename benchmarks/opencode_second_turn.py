"""Second-turn latency with OpenCode: threadline's live ACP process vs a cold
`opencode run --session` spawn, same fake model, same run. Goal: <= 0.1x.

Usage: python benchmarks/opencode_second_turn.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _harness import Threadline, base_env, cold_first_output, find_cli, report
from tests.fakes.openai_chat import FakeOpenAIChat, Rule, Step, Text, opencode_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    opencode = find_cli("opencode")
    warm: list[float] = []
    cold: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeOpenAIChat(
            Rule("", [Step([Text("The quick answer streams back in a few chunks.")])])
        ) as fake,
    ):
        base = Path(tmp)
        work, state = base / "work", base / "state"
        work.mkdir()
        state.mkdir()
        env = base_env(opencode_env(base, fake.url, cwd=work))
        for _ in range(args.runs):
            tl = Threadline(
                {
                    **env,
                    "THREADLINE_HOME": str(state),
                    "AGENT_BACKEND": "opencode",
                    "BACKEND_CLI_PATH": opencode,
                }
            )
            try:
                tl.call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
                tid = tl.call("thread/start", {"cwd": str(work)})["thread"]["id"]
                tl.turn(tid, "first turn")
                warm.append(tl.turn(tid, "second turn")[0])
            finally:
                tl.close()
            record = json.loads((state / "threads" / tid / "meta.json").read_text())
            sid = record["backend_session_id"]
            cold.append(
                cold_first_output(
                    [opencode, "run", "--format", "json", "--session", sid],
                    env,
                    work,
                    b"second turn please",
                    lambda m: m.get("type") == "text",
                )
            )
    report(
        "OpenCode second turn (turn/start -> first text)",
        warm,
        cold,
        "threadline (live opencode acp)",
        "cold opencode run --session",
        "goal <= 0.1x",
    )


if __name__ == "__main__":
    main()
