"""Codex against `tests.fakes.openai_responses.FakeResponses` (a custom provider in a fresh
CODEX_HOME, `tests.fakes.openai_responses.codex_home`), in both of threadline's modes:

* ``exec_*.jsonl``: the stdout events of `codex exec --json`, run as threadline runs it (prompt
  on stdin, `--disable unbounded_connection_retries`); tests/unit/test_codex_mapping.py.
* ``app-server-*.jsonl``: both directions of `codex app-server` driven through the handshake,
  turns, approvals, interrupts and errors (``{"dir": "c2s" | "s2c" | "note", ...}``);
  tests/unit/test_codex_conformance.py checks that Codex's own output passes the checker."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable, Sequence
from typing import Any

from tests.fakes.openai_responses import (
    ENV_KEY,
    ApplyPatch,
    ExecCommand,
    FakeResponses,
    HttpError,
    Reasoning,
    ResponseFailed,
    Rule,
    Step,
    Text,
    codex_env,
    codex_home,
)

from .codex_app_server import APP_SERVER_SCENARIOS
from .core import CliRecorder, JsonProcess, Run, Sanitiser, Scenario, wait_until

TOKENS = {"input_tokens": 100, "output_tokens": 20}
BYPASS = "--dangerously-bypass-approvals-and-sandbox"


def step(*items: Any, **options: Any) -> Step:
    return Step(items, **{**TOKENS, **options})


def exec_argv(run: Run, *flags: str, resume: str | None = None) -> list[str]:
    argv = ["exec", "--json", "--skip-git-repo-check", "--cd", str(run.work), *flags]
    if resume is not None:
        argv += ["resume", resume]
    return [*argv, "-"]


Stop = Callable[[Run, JsonProcess], None]


def exec_turn(
    run: Run,
    prompt: str,
    *flags: str,
    resume: str | None = None,
    env: dict[str, str] | None = None,
    stop: Stop | None = None,
) -> list[Any]:
    """One `codex exec` run (prompt on stdin); its stdout events. `stop` may cut it short."""
    argv = exec_argv(run, "--disable", "unbounded_connection_retries", *flags, resume=resume)
    proc = run.spawn(*argv, env=env)
    proc.send_line(prompt)
    proc.close_stdin()
    if stop is not None:
        stop(run, proc)
    proc.finish()
    return proc.outputs()


def one_exec(prompt: str, *flags: str, stop: Stop | None = None) -> Callable[[Run], None]:
    return lambda run: run.write(exec_turn(run, prompt, *flags, stop=stop))


def plain_then_resume(run: Run) -> None:
    first = exec_turn(run, "Say hello", "-s", "read-only")
    run.write(first, "exec_a_plain")
    thread = next(e["thread_id"] for e in first if e.get("type") == "thread.started")
    run.write(exec_turn(run, "Say hello again", "-s", "read-only", resume=thread), "exec_c_resume")


def sigint_when(what: str, ready: Callable[[Run, JsonProcess], bool]) -> Stop:
    def stop(run: Run, proc: JsonProcess) -> None:
        wait_until(lambda: ready(run, proc), what)
        proc.signal(signal.SIGINT)

    return stop


def sleeping(run: Run, proc: JsonProcess, seconds: str) -> bool:
    """`sleep <seconds>` runs, and Codex has announced the command."""
    started = any(e.get("type") == "item.started" for e in proc.outputs() if isinstance(e, dict))
    return started and run.running("sleep", seconds)


def missing_key(run: Run) -> None:
    env = {k: v for k, v in run.env.items() if k != ENV_KEY}
    run.write(exec_turn(run, "hello", "-s", "read-only", env=env))


def unreachable(run: Run, *, bounded: bool) -> None:
    """A provider nobody listens on. Unbounded connection retries never end: stopped after
    two notices."""
    home = codex_home(run.tmp, closed_url(), name="codex_home_unreachable")
    env = {**run.env, "CODEX_HOME": str(home)}
    if bounded:
        run.write(exec_turn(run, "hello", "-s", "read-only", env=env))
        return
    proc = run.spawn(*exec_argv(run, "--enable", "unbounded_connection_retries"), env=env)
    proc.send_line("hello")
    proc.close_stdin()
    for _ in range(2):
        proc.expect("a retry notice", lambda m: isinstance(m, dict) and m.get("type") == "error")
    proc.kill_group()
    run.write(proc.outputs())


def closed_url() -> str:
    """The URL of a 127.0.0.1 port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


SLOW = Step([Text("A slow answer that takes its time. " * 4)], stall_after_first_delta_ms=30000)
SHELL_OUT = "echo bypass-ok > out.txt && cat out.txt"


def shell(cmd: str) -> list[Step]:
    return [step(ExecCommand(cmd, login=False)), step(Text("The command finished."))]


EXEC_SCENARIOS = [
    Scenario(
        "exec_resume",
        [Rule("say hello", [step(Text("Hello! You said hello."))])],
        plain_then_resume,
        "exec_a_plain: a plain answer; exec_c_resume: `exec resume` of that thread",
    ),
    Scenario(
        "exec_b1_shell_bypass",
        [Rule("", shell(SHELL_OUT))],
        one_exec("write and read a file", BYPASS),
        "a shell command with --dangerously-bypass-approvals-and-sandbox",
    ),
    Scenario(
        "exec_b2_shell_readonly",
        [Rule("", shell("echo ro > out.txt; echo status=$?"))],
        one_exec("write a file", "-s", "read-only"),
        "a write refused by the read-only sandbox",
    ),
    Scenario(
        "exec_h_apply_patch",
        [Rule("", [step(ApplyPatch("added.txt", "added\n")), step(Text("Patched."))])],
        one_exec("add a file", "-s", "workspace-write"),
        "apply_patch adding a file (a file_change item)",
    ),
    Scenario(
        "exec_h_reasoning",
        [Rule("", [step(Reasoning("Thinking about the request step by step."), Text("Done."))])],
        one_exec("think", "-s", "read-only"),
        "a reasoning item, then the answer",
    ),
    Scenario(
        "exec_d_SIGINT_during_command",
        [Rule("", shell("sleep 27.5; echo done"))],
        one_exec(
            "sleep",
            BYPASS,
            stop=sigint_when("sleep runs", lambda run, proc: sleeping(run, proc, "27.5")),
        ),
        "SIGINT while the shell tool runs `sleep`",
    ),
    Scenario(
        "exec_d_SIGINT_streaming",
        [Rule("", [SLOW])],
        one_exec(
            "answer slowly",
            "-s",
            "read-only",
            stop=sigint_when("the answer streams", lambda run, _: bool(run.fake.model_requests)),
        ),
        "SIGINT while the answer streams",
    ),
    Scenario(
        "exec_e_http_401",
        [Rule("", [HttpError(401, "fake forced HTTP 401")])],
        one_exec("hello", "-s", "read-only"),
        "HTTP 401 (no retries)",
    ),
    Scenario(
        "exec_e_http_429",
        [Rule("", [HttpError(429, "fake rate limit")])],
        one_exec("hello", "-s", "read-only"),
        "HTTP 429 (no retries)",
    ),
    Scenario(
        "exec_e_http_500",
        [Rule("", [HttpError(500, "fake internal error")])],
        one_exec("hello", "-s", "read-only"),
        "HTTP 500 (no retries)",
    ),
    Scenario(
        "exec_e_http_500_stream_retries",
        [Rule("", [HttpError(500, "fake internal error")])],
        one_exec("hello", "-s", "read-only", "-c", "model_providers.mock.stream_max_retries=5"),
        "HTTP 500 with five stream retries (Codex's default count)",
    ),
    Scenario("exec_e_missing_env_key", [], missing_key, "the provider's env_key is unset"),
    Scenario(
        "exec_e_response_failed_event",
        [Rule("", [Step(failed=ResponseFailed("fake forced response.failed"))])],
        one_exec("hello", "-s", "read-only"),
        "HTTP 200, then a response.failed event",
    ),
    Scenario(
        "exec_e_unreachable_bounded_retries",
        [],
        lambda run: unreachable(run, bounded=True),
        "nothing listens on the provider's port",
    ),
    Scenario(
        "exec_e_unreachable",
        [],
        lambda run: unreachable(run, bounded=False),
        "nothing listens, unbounded connection retries: stopped after two notices",
    ),
]


def make_fake(rules: Sequence[Any], default: Any) -> FakeResponses:
    return FakeResponses(*rules, default=default)


def prepare(run: Run) -> None:
    home = codex_home(run.tmp, run.fake.url)
    run.env = codex_env(home, scratch_home=run.tmp / "home")


#: Clock times and durations (seconds or ms), the host's name.
FIXED = {
    **dict.fromkeys(("createdAt", "updatedAt", "recencyAt", "startedAt", "completedAt"), 0),
    **dict.fromkeys(("emittedAtMs", "startedAtMs", "completedAtMs", "durationMs"), 0),
    "serverName": "<hostname>",
    "processId": "0",
}
#: Codex files its sessions by the date and time they were created.
SESSION_FILES = (
    (r"sessions/\d{4}/\d\d/\d\d/", "sessions/2000/01/01/"),
    (r"rollout-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d", "rollout-2000-01-01T00-00-00"),
)


def sanitiser() -> Sanitiser:
    sanitise = Sanitiser(FIXED)
    for regex, replacement in SESSION_FILES:
        sanitise.pattern(regex, replacement)
    return sanitise


RECORDER = CliRecorder(
    cli="codex",
    make_fake=make_fake,
    prepare=prepare,
    scenarios=[*EXEC_SCENARIOS, *APP_SERVER_SCENARIOS],
    sanitiser=sanitiser,
)
