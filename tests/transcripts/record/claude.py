"""Claude Code in stream-json mode, as threadline runs it (`--input-format stream-json
--permission-prompt-tool stdio --include-partial-messages`, an `initialize` control request
first), against `tests.fakes.anthropic.FakeAnthropic`. Each scenario records the CLI's stdout
as ``<scenario>.jsonl``; tests/unit/test_claude_mapping.py replays it turn by turn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.e2e.claude_env import ClaudeEnv
from tests.fakes.anthropic import FakeAnthropic, HttpError, Rule, Step, Text, Thinking, ToolUse

from .core import CliRecorder, JsonProcess, Run, Sanitiser, Scenario, wait_until

FLAGS = (
    "--output-format",
    "stream-json",
    "--verbose",
    "--include-partial-messages",
    "--input-format",
    "stream-json",
    "--permission-prompt-tool",
    "stdio",
)
#: The fake's token counts are fixed so recordings do not change with prompt sizes.
TOKENS = {"input_tokens": 1000, "output_tokens": 20}
#: Values that change on every run (durations, the CLI's pid), fixed.
FIXED = {
    **dict.fromkeys(
        (
            "duration_ms",
            "duration_api_ms",
            "ttft_ms",
            "ttft_stream_ms",
            "time_to_request_ms",
            "first_content_frame_ms",
        ),
        0,
    ),
    "retry_delay_ms": 0,
    "pid": 0,
    "messaging_socket_path": "/tmp/cc-socks/<PID>.sock",
}
#: What the CLI lists in its answer to `initialize` (its commands, agents, models: ~9 KB that
#: no test reads) is left out of the recordings.
ELIDED = "<elided by the recorder>"

INITIALIZE = "req_1_recorder"

Answer = Callable[[dict[str, Any]], dict[str, Any] | None]


def step(*blocks: Any, **options: Any) -> Step:
    return Step(blocks, **{**TOKENS, **options})


def allow(request: dict[str, Any]) -> dict[str, Any]:
    return {"behavior": "allow", "updatedInput": request["input"]}


def deny(message: str, **extra: Any) -> Answer:
    return lambda _request: {"behavior": "deny", "message": message, **extra}


# -- driving the CLI -----------------------------------------------------------------------------


def start(run: Run, *flags: str, **env: str) -> JsonProcess:
    proc = run.spawn(*FLAGS, *flags, env={**run.env, **env})
    proc.send(control(INITIALIZE, {"subtype": "initialize", "hooks": None}))
    return proc


def control(request_id: str, request: dict[str, Any]) -> dict[str, Any]:
    return {"type": "control_request", "request_id": request_id, "request": request}


def say(proc: JsonProcess, text: str) -> None:
    message = {"role": "user", "content": text}
    proc.send({"type": "user", "message": message, "parent_tool_use_id": None, "session_id": ""})


def answer(proc: JsonProcess, request: dict[str, Any], response: dict[str, Any]) -> None:
    body = {"subtype": "success", "request_id": request["request_id"], "response": response}
    proc.send({"type": "control_response", "response": body})


def is_type(*types: str) -> Callable[[Any], bool]:
    return lambda m: isinstance(m, dict) and m.get("type") in types


def turn(proc: JsonProcess, text: str, respond: Answer = allow) -> dict[str, Any]:
    """Say `text`; answer every permission request with `respond`; return the result line."""
    say(proc, text)
    while True:
        message = proc.expect("result", is_type("result", "control_request"))
        if message["type"] == "result":
            return dict(message)
        response = respond(message["request"])
        if response is not None:
            answer(proc, message, response)


def finish(run: Run, proc: JsonProcess) -> None:
    """End the CLI (stdin EOF) and record its stdout."""
    proc.finish()
    run.write([_elide_initialize(m) for m in proc.outputs()])


def _elide_initialize(message: Any) -> Any:
    response = message.get("response") if isinstance(message, dict) else None
    if not (isinstance(response, dict) and response.get("request_id") == INITIALIZE):
        return message
    listed = response.get("response") or {}
    return {**message, "response": {**response, "response": dict.fromkeys(listed, ELIDED)}}


def one_turn(text: str, *flags: str, respond: Answer = allow, **env: str) -> Callable[[Run], None]:
    def drive(run: Run) -> None:
        proc = start(run, *flags, **env)
        turn(proc, text, respond)
        finish(run, proc)

    return drive


def interrupt(proc: JsonProcess) -> None:
    proc.send(control("req_2_recorder", {"subtype": "interrupt"}))


def interrupt_streaming(run: Run) -> None:
    """Interrupt after the first streamed text delta, then ask again."""
    proc = start(run)
    say(proc, "Give me a slow answer.")
    proc.expect("a text delta", lambda m: is_type("stream_event")(m) and _text_delta(m))
    interrupt(proc)
    proc.expect("result", is_type("result"))
    turn(proc, "Are you still there?")
    finish(run, proc)


def _text_delta(message: dict[str, Any]) -> bool:
    delta = (message.get("event") or {}).get("delta") or {}
    return bool(delta.get("type") == "text_delta")


def interrupt_during_tool(run: Run) -> None:
    """Interrupt while the allowed `sleep 30` runs."""
    proc = start(run, "--allowedTools", "Bash(sleep:*)")
    say(proc, "sleep please")
    wait_until(lambda: run.running("sleep", "30"), "the Bash tool runs sleep 30")
    interrupt(proc)
    proc.expect("result", is_type("result"))
    finish(run, proc)


def interrupt_pending_approval(run: Run) -> None:
    """Interrupt while a permission request is unanswered."""
    proc = start(run)
    say(proc, "Please run: touch marker.txt")
    proc.expect("a permission request", is_type("control_request"))
    interrupt(proc)
    proc.expect("result", is_type("result"))
    finish(run, proc)


def tool_result_shapes(run: Run) -> None:
    (run.work / "existing.txt").write_text("old line\n")
    one_turn("show shapes", "--allowedTools", "Bash,Read,Write,Edit")(run)


# -- scenarios -----------------------------------------------------------------------------------

RUN = "Please run: touch marker.txt && echo hi"
BASH = {"command": "touch marker.txt && echo hi", "description": "Run the requested command"}
TOUCH = {"command": "touch marker.txt", "description": "Run the requested command"}
BASH_STEPS = [
    step(Text("I'll run it."), ToolUse("Bash", BASH)),
    step(Text("The command finished; see the tool result above.")),
]
SLOW = [
    Rule(
        "slow answer",
        [
            step(
                Text("Part one of a slow answer ... and it keeps going for a while longer."),
                chunk_size=10,
                delay_ms=50,
                stall_after_first_delta_ms=8000,
            )
        ],
    ),
    Rule("are you still there", [step(Text("Yes, still here."))]),
    Rule(
        "sleep please",
        # Not a bare `sleep`: claude 2.1.332 refuses a command that starts with one.
        [
            step(ToolUse("Bash", {"command": "true && sleep 30", "description": "sleep"})),
            step(Text("ok")),
        ],
    ),
]
QUESTION = {
    "question": "Which greeting should I use?",
    "header": "Greeting",
    "multiSelect": False,
    "options": [
        {"label": "Hello", "description": "Friendly"},
        {"label": "Good day", "description": "Formal"},
    ],
}


def answer_question(request: dict[str, Any]) -> dict[str, Any]:
    answers = {QUESTION["question"]: "Good day"}
    return {"behavior": "allow", "updatedInput": {**request["input"], "answers": answers}}


def file_rules(work: Path) -> list[Rule]:
    path = str(work / "hello.txt")
    write = ToolUse("Write", {"file_path": path, "content": "hello world\n"})
    edit = ToolUse("Edit", {"file_path": path, "old_string": "world", "new_string": "mock"})
    steps = [
        step(Text("Creating it."), write, chunk_size=4000),
        step(edit, chunk_size=4000),
        step(Text("Created and edited hello.txt.")),
    ]
    return [Rule("create the file", steps)]


def shape_rules(work: Path) -> list[Rule]:
    path = str(work / "existing.txt")
    fail = {"command": "echo out; echo err >&2; exit 3", "description": "fail on purpose"}
    steps = [
        step(ToolUse("Bash", fail), chunk_size=4000),
        step(ToolUse("Read", {"file_path": path}), chunk_size=4000),
        step(ToolUse("Write", {"file_path": path, "content": "new line\n"}), chunk_size=4000),
        step(Text("shapes shown")),
    ]
    return [Rule("show shapes", steps)]


STREAMED = (
    "Streaming works: this answer is split into many small text deltas so that "
    "--include-partial-messages has something to show."
)
THINK = [
    step(
        Thinking("Let me think about listing files."),
        Text("Listing."),
        ToolUse("Bash", {"command": "ls", "description": "List files"}),
    ),
    step(Text("Listed.")),
]
ASK = [step(ToolUse("AskUserQuestion", {"questions": [QUESTION]})), step(Text("Thanks."))]

SCENARIOS = [
    Scenario(
        "01_plain_text_partial",
        [],
        one_turn("Say something streamed."),
        "one answer streamed in 16-character text deltas",
        default=[step(Text(STREAMED), chunk_size=16, delay_ms=20)],
    ),
    Scenario(
        "10_thinking_text_tool",
        [Rule("think first", THINK)],
        one_turn("Think first, then list files."),
        "a thinking block, text and a read-only Bash call (no permission asked)",
    ),
    Scenario(
        "02b_bash_allow",
        [Rule("please run", BASH_STEPS)],
        one_turn(RUN),
        "Bash asked for permission, allowed",
    ),
    Scenario(
        "02c_bash_deny",
        [Rule("please run", BASH_STEPS)],
        one_turn(RUN, respond=deny("The user denied this command.")),
        "Bash asked for permission, denied",
    ),
    Scenario(
        "02d_bash_deny_interrupt",
        [Rule("please run", BASH_STEPS)],
        one_turn(RUN, respond=deny("Denied; stop.", interrupt=True)),
        "Bash denied with interrupt: true",
    ),
    Scenario(
        "04a_interrupt_control",
        SLOW,
        interrupt_streaming,
        "an interrupt control request after the first text delta, then a second turn",
    ),
    Scenario(
        "04b_interrupt_during_tool",
        SLOW,
        interrupt_during_tool,
        "an interrupt while the allowed `sleep 30` runs",
    ),
    Scenario(
        "04c_interrupt_pending_approval",
        [
            Rule(
                "please run", [step(Text("I'll run it."), ToolUse("Bash", TOUCH)), step(Text("ok"))]
            )
        ],
        interrupt_pending_approval,
        "an interrupt while a permission request is unanswered",
    ),
    Scenario(
        "05a_http500_noretry",
        [],
        one_turn("hello"),
        "HTTP 500, no retries",
        default=HttpError(500, "fake internal error"),
    ),
    Scenario(
        "05b_http500_retry2",
        [],
        one_turn("hello", CLAUDE_CODE_MAX_RETRIES="2"),
        "HTTP 500 with two retries",
        default=HttpError(500, "fake internal error"),
    ),
    Scenario(
        "05c_http401",
        [],
        one_turn("hello"),
        "HTTP 401",
        default=HttpError(401, "invalid x-api-key"),
    ),
    Scenario(
        "07a_file_write_edit",
        file_rules,
        one_turn("Please create the file hello.txt"),
        "Write then Edit of one file, both allowed",
    ),
    Scenario(
        "14_max_turns",
        [Rule("please run", BASH_STEPS)],
        one_turn(RUN, "--max-turns", "1"),
        "--max-turns 1 reached after a tool call",
    ),
    Scenario(
        "15_ask_user_question",
        [Rule("ask me", ASK)],
        one_turn("Please ask me a question", respond=answer_question),
        "AskUserQuestion answered through the permission request",
    ),
    Scenario(
        "16_tool_result_shapes",
        shape_rules,
        tool_result_shapes,
        "a failing Bash (exit 3), Read and Write, all pre-allowed",
    ),
]


# -- the CLI -------------------------------------------------------------------------------------


def make_fake(rules: Sequence[Any], default: Any) -> FakeAnthropic:
    return FakeAnthropic(*rules, default=default)


def prepare(run: Run) -> None:
    run.env = ClaudeEnv(cli=run.binary, fake=run.fake, tmp=run.tmp).env()


RECORDER = CliRecorder(
    cli="claude",
    make_fake=make_fake,
    prepare=prepare,
    scenarios=SCENARIOS,
    sanitiser=lambda: Sanitiser(FIXED),
)
