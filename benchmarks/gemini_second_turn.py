"""Second-turn latency with Gemini CLI: threadline's live ACP process vs a cold headless
`gemini -p --resume` spawn, same fake model, same run. Goal: <= 0.1x.

Usage: python benchmarks/gemini_second_turn.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _harness import Threadline, base_env, cold_first_output, find_cli, report
from tests.fakes.gemini import FakeGemini, Rule, Step, Text, gemini_env, gemini_home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    gemini = find_cli("gemini")
    warm: list[float] = []
    cold: list[float] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeGemini(
            Rule("", [Step([Text("The quick answer streams back in a few chunks.")])])
        ) as fake,
    ):
        base = Path(tmp)
        home = gemini_home(base, fake.url)
        work, state = base / "work", base / "state"
        work.mkdir()
        state.mkdir()
        env = base_env(gemini_env(home, fake.url))
        for _ in range(args.runs):
            tl = Threadline(
                {
                    **env,
                    "THREADLINE_HOME": str(state),
                    "AGENT_BACKEND": "gemini",
                    "BACKEND_CLI_PATH": gemini,
                    "BACKEND_MODEL": "gemini-2.5-flash",
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
                    [
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
                    env,
                    work,
                    b"second turn please",
                    lambda m: m.get("type") == "message" and m.get("role") == "assistant",
                )
            )
    report(
        "Gemini second turn (turn/start -> first delta)",
        warm,
        cold,
        "threadline (live gemini --acp)",
        "cold gemini -p --resume",
        "goal <= 0.1x",
    )


if __name__ == "__main__":
    main()
