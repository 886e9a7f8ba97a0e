"""An orchestrator in ~60 lines: three threads run concurrently, each turn's approvals are routed
by a policy function, and the results are collected.

    python examples/orchestrate.py [--backend mock] [--cwd DIR]

With the default `mock` backend it runs offline; the prompts are mock scripts. Point it at a real
backend (`--backend claude`) and give real prompts to drive a real agent the same way.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import trio

from threadline.client import ServerRequest, spawn
from threadline.protocol import CommandExecutionRequestApprovalParams

ALLOWED_COMMANDS = ("echo ", "ls", "cat ")

TASKS = {
    "greeter": "/text Hello from the greeter.",
    "lister": "/run echo listing > listing.txt\n/text Listed.",
    "risky": "/run rm -rf ./important\n/text Tried to delete.",
}


async def route(request: ServerRequest) -> Any:
    """Allow known-safe commands, decline everything else (file writes, other tools)."""
    params = request.params
    if isinstance(params, CommandExecutionRequestApprovalParams):
        command = params.command or ""
        if command.startswith(ALLOWED_COMMANDS):
            return {"decision": "accept"}
    return {"decision": "decline"}


async def main(backend: str, cwd: str) -> dict[str, str]:
    results: dict[str, str] = {}
    async with spawn(env={"AGENT_BACKEND": backend}) as client:

        async def work(name: str, prompt: str) -> None:
            thread = (await client.start_thread(model_provider=backend, cwd=cwd)).thread
            turn = await client.run_turn(thread.id, prompt, on_request=route)
            assert turn.completed is not None
            results[name] = f"{turn.completed.turn.status}: {turn.text}"

        async with trio.open_nursery() as nursery:
            for name, prompt in TASKS.items():
                nursery.start_soon(work, name, prompt)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="mock")
    parser.add_argument("--cwd", default=None)
    args = parser.parse_args()
    cwd = args.cwd or tempfile.mkdtemp(prefix="orchestrate-")
    for name, outcome in sorted(trio.run(main, args.backend, os.path.abspath(cwd)).items()):
        print(f"{name:8} {outcome}")
