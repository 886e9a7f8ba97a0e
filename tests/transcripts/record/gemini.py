"""Gemini CLI in ACP mode (`gemini --acp -m <model>`, as threadline runs it) against
`tests.fakes.gemini.FakeGemini`, driven by a minimal scripted ACP client that sends what
threadline's `AcpSession` sends (initialize, session/new or session/load, session/set_mode,
session/prompt, session/cancel, the answers to session/request_permission). Both directions
are recorded as ``<scenario>.acp.jsonl`` (``{"dir": "c2a" | "a2c", "msg": ...}``);
tests/unit/test_acp_mapping.py replays the agent's side to a real `GeminiAcpSession`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.e2e.gemini_env import age_session
from tests.fakes.gemini import (
    MODEL,
    FakeGemini,
    HttpError,
    Rule,
    ShellCommand,
    Step,
    Thought,
    WriteFile,
    gemini_env,
    gemini_home,
)

from .core import CliRecorder, RpcClient, Run, Sanitiser, Scenario, wait_until

TOKENS = {"prompt_tokens": 100, "output_tokens": 5}
#: How long the client waits for the agent to fall quiet before each request (`RpcClient`).
SETTLE = 0.1
Answer = Callable[[dict[str, Any]], Any]


def step(*parts: Any, **options: Any) -> Step:
    return Step(parts, **{**TOKENS, **options})


def option(option_id: str) -> Answer:
    return lambda _request: {"outcome": {"outcome": "selected", "optionId": option_id}}


class AcpClient(RpcClient):
    """A scripted ACP client of one `gemini --acp`; every request's answer is awaited."""

    def __init__(self, run: Run) -> None:
        proc = run.spawn("--acp", "-m", MODEL)
        super().__init__(proc, dirs=("c2a", "a2c"), jsonrpc=True, settle=SETTLE)
        self.cwd = str(run.work)
        self.session = ""
        self.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": {"name": "threadline", "version": "1"},
            },
        )

    def new_session(self, mode: str | None = None) -> str:
        answer = self.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        self.session = str(answer["result"]["sessionId"])
        if mode is not None:
            self.request("session/set_mode", {"sessionId": self.session, "modeId": mode})
        return self.session

    def load_session(self, session: str) -> None:
        self.session = session
        self.request("session/load", {"sessionId": session, "cwd": self.cwd, "mcpServers": []})
        self.proc.quiet(1.0)  # the history replay streams after the answer

    def prompt(self, text: str, answer: Answer | None = None) -> dict[str, Any]:
        """One turn: send the prompt, answer permission requests, return the prompt's answer."""
        self.answer = answer or (lambda _request: None)
        return self.request("session/prompt", self.prompt_params(text))

    def start_prompt(self, text: str, answer: Answer | None = None) -> int:
        self.answer = answer or (lambda _request: None)
        return int(self.request("session/prompt", self.prompt_params(text), wait=False)["id"])

    def prompt_params(self, text: str) -> dict[str, Any]:
        return {"sessionId": self.session, "prompt": [{"type": "text", "text": text}]}

    def cancel(self) -> None:
        self.notify("session/cancel", {"sessionId": self.session})

    def chunks(self) -> int:
        """Agent message chunks received so far."""
        return sum(
            1
            for message in self.proc.outputs()
            if isinstance(message, dict)
            and (message.get("params") or {}).get("update", {}).get("sessionUpdate")
            == "agent_message_chunk"
        )

    def close(self, run: Run) -> None:
        self.finish()
        run.write(self.lines())


# -- scenarios -----------------------------------------------------------------------------------


def prompts(
    *texts: str, answer: Answer | None = None, mode: str | None = None
) -> Callable[[Run], None]:
    def drive(run: Run) -> None:
        client = AcpClient(run)
        client.new_session(mode)
        for text in texts:
            client.prompt(text, answer)
        client.close(run)

    return drive


def cancel_while_streaming(run: Run) -> None:
    client = AcpClient(run)
    client.new_session()
    rid = client.start_prompt("go slow")
    wait_until(lambda: client.chunks() >= 4, "four streamed chunks")
    client.cancel()
    client.answer_to(rid, "session/prompt")
    client.close(run)


def cancel_during_shell(run: Run) -> None:
    client = AcpClient(run)
    client.new_session()
    rid = client.start_prompt("slow shell", option("proceed_once"))
    client.until(
        "the permission request", lambda m: m.get("method") == "session/request_permission"
    )
    wait_until(lambda: run.running("sleep", "30"), "the shell tool runs sleep 30")
    client.cancel()
    client.answer_to(rid, "session/prompt")
    client.close(run)


def permission_withdrawn(run: Run) -> None:
    """The turn is interrupted while a permission request is pending: the client answers it
    `cancelled`, then cancels the prompt (as threadline's interrupt does)."""
    client = AcpClient(run)
    client.new_session()
    rid = client.start_prompt("please run it")
    request = client.until(
        "the permission request", lambda m: m.get("method") == "session/request_permission"
    )
    client.respond(request, {"outcome": {"outcome": "cancelled"}})
    client.cancel()
    client.answer_to(rid, "session/prompt")
    client.close(run)


def load_next_minute(run: Run) -> None:
    """A session with two turns, resumed by a new agent process with session/load (its files
    made to look older first: a load within the minute of creation wipes the session); one
    more turn after the replay. Only the second process is recorded."""
    first = AcpClient(run)
    session = first.new_session()
    first.prompt("remember PAPAYA")
    first.prompt("what did I ask you to remember?")
    first.finish()
    age_session(Path(run.env["HOME"]), session)
    client = AcpClient(run)
    client.load_session(session)
    client.prompt("after load")
    client.close(run)


TOUCH = "touch acp-made.txt && echo touched"
RUN_IT = [step("I will run a command.", ShellCommand(TOUCH, "make a file")), step("Done.")]
WRITE = [step(WriteFile("acp-notes.txt", "hello from mock\n")), step("Wrote it.")]
RULES = [
    Rule("think", [step(Thought("**Considering**\n\nThe request, carefully."), "Here it is.")]),
    Rule(
        "echo",
        [step("I will run a command.", ShellCommand("echo hello-from-tool")), step("It printed.")],
    ),
    Rule("please run it", RUN_IT),
    Rule("write again", [step(WriteFile("acp-notes2.txt", "hello from mock\n")), step("Again.")]),
    Rule("write it", WRITE),
    Rule(
        "go slow",
        [step("".join(f"slow chunk {i}. " for i in range(20)), chunk_size=14, delay_ms=500)],
    ),
    Rule("slow shell", [step(ShellCommand("sleep 30; echo done")), step("Slept.")]),
    Rule("fail", [HttpError(500)]),
    Rule("remember papaya", [step("Noted.")]),
    Rule("what did i ask", [step("PAPAYA.")]),
    Rule("after load", [step("Answered after the load.")]),
]

SCENARIOS = [
    Scenario(
        "f6_acp_thought_and_safe_shell",
        RULES,
        prompts("think first", "echo something"),
        "a thought then text; then a shell command that needs no permission",
    ),
    Scenario(
        "f1_acp_shell_allow_once",
        RULES,
        prompts("please run it", answer=option("proceed_once")),
        "a shell command allowed once",
    ),
    Scenario(
        "f2_acp_shell_reject",
        RULES,
        prompts("please run it", answer=option("cancel")),
        "a shell command rejected",
    ),
    Scenario(
        "f12_acp_permission_cancelled_outcome",
        RULES,
        permission_withdrawn,
        "an interrupt while a permission request is pending (answered cancelled)",
    ),
    Scenario(
        "f3_acp_write_allow_always_then_again",
        RULES,
        prompts("write it", "write again", answer=option("proceed_always")),
        "a file write allowed for the session (Gemini switches to autoEdit); a second write",
    ),
    Scenario(
        "f4_acp_cancel_while_streaming",
        RULES,
        cancel_while_streaming,
        "session/cancel after four streamed chunks",
    ),
    Scenario(
        "f5_acp_cancel_during_shell",
        RULES,
        cancel_during_shell,
        "session/cancel while an allowed `sleep 30` runs",
    ),
    Scenario("f11_acp_http500", RULES, prompts("fail"), "HTTP 500 from the model API"),
    Scenario(
        "f10_acp_yolo_mode_via_set_mode",
        RULES,
        prompts("please run it", mode="yolo"),
        "session/set_mode yolo, then a shell command runs without asking",
    ),
    Scenario(
        "f15_acp_edit_in_plan_mode",
        RULES,
        prompts("write it", mode="plan"),
        "session/set_mode plan, then a write the policy denies",
    ),
    Scenario(
        "f8_acp_load_session_next_minute",
        RULES,
        load_next_minute,
        "session/load of an older session (history replay), then a turn",
    ),
]


# -- the CLI -------------------------------------------------------------------------------------


def make_fake(rules: Sequence[Any], default: Any) -> FakeGemini:
    return FakeGemini(*rules, default=default)


def prepare(run: Run) -> None:
    home = gemini_home(run.tmp, run.fake.url, max_attempts=1, name="cli-home")
    run.env = gemini_env(home, run.fake.url)


def sanitiser() -> Sanitiser:
    sanitise = Sanitiser()
    sanitise.pattern(r"Process Group PGID: \d+", "Process Group PGID: 0")
    # (in the session context a session/load replays)
    sanitise.pattern(
        r"Today's date is \w+, \w+ \d+, \d{4}", "Today's date is Saturday, January 1, 2000"
    )
    # Gemini makes up tool call ids from the clock: `<tool>__<tool>_<epoch ms>_<n>`.
    sanitise.volatile(r"(?<=_)\d{13}(?=_\d+\b)", lambda n, _match: str(1_700_000_000_000 + n))
    return sanitise


RECORDER = CliRecorder(
    cli="gemini",
    make_fake=make_fake,
    prepare=prepare,
    scenarios=SCENARIOS,
    sanitiser=sanitiser,
)
