"""One uniform interface per backend for the fault matrix, built on the e2e fixtures
(tests/e2e/<id>_env.py) and their fake model servers.

A test scripts the model with backend-neutral steps (`Say`, `Shell`, `HttpFail`, `Cut`,
`Stall`) under a tag; `Harness.prompt(tag)` is what the test sends as the turn's text. Each
adaptor turns the steps into its fake's script (Anthropic, Responses, Gemini, Chat
Completions); the `mock` backend has no model, so its prompt *is* the script (its directives).

`Harness.fault_cli` puts the fault-injecting wrapper (fault_cli.py) in front of the real CLI
for one thread (`config.cliPath`); `cli_pids` finds the CLI processes of a cwd; `leftovers`
lists every live process of the test (by the fixture's marker variable in /proc/<pid>/environ).

The backends and their modes come from the registry (`ALL_NAMES`: "claude", "claude-print",
..., "mock"); each backend has one `Harness` subclass (its `backend`), found by `make_harness`.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import trio

from tests.e2e.claude_env import ClaudeEnv
from tests.e2e.codex_env import CodexEnv
from tests.e2e.gemini_env import GeminiEnv
from tests.e2e.opencode_env import OpenCodeEnv
from tests.e2e.qwen_env import QwenEnv, qwen_settings, shell_call
from tests.fakes import anthropic as fa
from tests.fakes import gemini as fg
from tests.fakes import openai_chat as fc
from tests.fakes import openai_responses as fr
from tests.support.cli_env import ServerEnv, child_pids
from tests.support.client import Message, ServerProcess, assert_items_balanced, running_server
from tests.support.events import agent_text, items_completed, items_started, requests_in
from threadline.backends.registry import SPECS
from threadline.protocol import BackendCapabilities

__all__ = [
    "ALL_NAMES",
    "BACKENDS",
    "HARNESSES",
    "Bystander",
    "Cells",
    "Collector",
    "Cut",
    "FaultCli",
    "Harness",
    "HttpFail",
    "Rule",
    "Say",
    "Shell",
    "Stall",
    "TurnResult",
    "agent_text",
    "capabilities",
    "is_request",
    "make_harness",
    "record",
    "run_turn",
]

FAULT_CLI = Path(__file__).with_name("fault_cli.py")
STALL_MS = 120_000  # a stream that stalls "forever" after its first delta


# -- the backend-neutral script --------------------------------------------------------------------


@dataclass(frozen=True)
class Say:
    """The model answers with this text (`delay_ms` between streamed chunks)."""

    text: str
    delay_ms: int = 0


@dataclass(frozen=True)
class Shell:
    """The model asks to run this shell command (an approval where the mode can ask)."""

    command: str


@dataclass(frozen=True)
class HttpFail:
    """The model API answers with this HTTP status (and these extra response headers)."""

    status: int
    message: str = "injected API failure"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Cut:
    """The answer's stream is cut: the connection drops after the first delta."""

    text: str


@dataclass(frozen=True)
class Stall:
    """The answer streams its first delta of `text`, then nothing (for minutes)."""

    text: str


Step = Say | Shell | HttpFail | Cut | Stall


@dataclass(frozen=True)
class Rule:
    """Answer with `steps` (one per model call) when the latest human message contains `tag`."""

    tag: str
    steps: tuple[Step, ...]

    def __init__(self, tag: str, *steps: Step) -> None:
        object.__setattr__(self, "tag", tag)
        object.__setattr__(self, "steps", steps)


# -- turns -----------------------------------------------------------------------------------------


@dataclass
class TurnResult:
    turn: dict[str, Any]
    events: list[Any] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.turn["status"])

    @property
    def error(self) -> str:
        return str((self.turn.get("error") or {}).get("message", ""))

    @property
    def text(self) -> str:
        return agent_text(self.events)

    def items(self, kind: str, item_type: str | None = None) -> list[dict[str, Any]]:
        found = items_started if kind == "started" else items_completed
        return found(self.events, item_type)

    def requests(self) -> list[Message]:
        return requests_in(self.events)


class Collector:
    """Collects the events of several running turns at once, routed by turn (and thread) id.
    Server requests are answered with `on_request(message)` → result (None: left
    unanswered). Every finished turn's items must pair up."""

    def __init__(
        self, srv: ServerProcess, on_request: Callable[[Message], Any] | None = None
    ) -> None:
        self.srv = srv
        self.on_request = on_request
        self.events: dict[str, list[Any]] = {}
        self.done: dict[str, TurnResult] = {}
        self._threads: dict[str, str] = {}

    def add(self, turn_id: str, thread_id: str) -> None:
        self.events[turn_id] = []
        self._threads[thread_id] = turn_id

    async def start(self, thread_id: str, text: str) -> str:
        """turn/start; the turn's events are collected from now on."""
        turn_id = await self.srv.start_turn(thread_id, text)
        self.add(turn_id, thread_id)
        return turn_id

    async def _pump(self) -> tuple[str, Any] | None:
        event = await self.srv.events.receive()
        with trio.CancelScope(shield=True):  # a received event is always handled whole
            return await self._handle(event)

    async def _handle(self, event: Any) -> tuple[str, Any] | None:
        if not isinstance(event, dict):
            return None
        params = event.get("params") or {}
        turn = params.get("turnId") or (params.get("turn") or {}).get("id")
        if turn not in self.events:
            turn = self._threads.get(params.get("threadId"))
        if turn is None or turn in self.done:
            return None
        self.events[turn].append(event)
        if "id" in event and "method" in event and self.on_request is not None:
            answer = self.on_request(event)
            if answer is not None:
                await self.srv.send({"id": event["id"], "result": answer})
        if event.get("method") == "turn/completed":
            result = TurnResult(params["turn"], self.events[turn])
            assert_items_balanced(result.events)
            self.done[turn] = result
        return turn, event

    async def wait(self, pred: Callable[[str, Any], bool], timeout: float = 60) -> Any:
        """Collect until an event of one of the turns satisfies `pred(turn_id, event)`."""
        with trio.fail_after(timeout):
            while True:
                got = await self._pump()
                if got is not None and pred(*got):
                    return got[1]

    async def until(self, check: Callable[[], bool], what: str, timeout: float = 60) -> None:
        """Collect (and answer requests) until `check()` (a /proc or file check) holds."""
        with trio.move_on_after(timeout):
            while not check():
                with trio.move_on_after(0.05):
                    await self._pump()
            return
        raise AssertionError(f"not within {timeout} s: {what}")

    async def finish(self, timeout: float = 90) -> dict[str, TurnResult]:
        """Collect until every turn has completed."""
        with trio.fail_after(timeout):
            while len(self.done) < len(self.events):
                await self._pump()
        return self.done


async def run_turn(
    srv: ServerProcess,
    thread_id: str,
    text: str,
    *,
    on_request: Callable[[Message], Any] | None = None,
    timeout: float = 90,
) -> TurnResult:
    """One turn, start to `turn/completed`."""
    collector = Collector(srv, on_request)
    turn = await collector.start(thread_id, text)
    return (await collector.finish(timeout))[turn]


def is_request(turn_id: str) -> Callable[[str, Any], bool]:
    return lambda turn, e: turn == turn_id and "id" in e and "method" in e


# -- the fault wrapper -----------------------------------------------------------------------------


class FaultCli:
    """A launcher for fault_cli.py in front of `real` (armed until `disarm()`)."""

    def __init__(
        self,
        directory: Path,
        name: str,
        real: str,
        fault: str,
        *,
        trigger: str | None = None,
        real_env: Mapping[str, str] | None = None,
    ) -> None:
        directory.mkdir(parents=True)
        self.armed = directory / "armed"
        self.armed.touch()
        env = {
            "FAULT": fault,
            "FAULT_REAL_CLI": real,
            "FAULT_REAL_ENV": json.dumps(dict(real_env or {})),
            "FAULT_ARMED": str(self.armed),
            "FAULT_TRIGGER": trigger or "",
        }
        self.path = directory / name
        self.path.write_text(
            f"#!{sys.executable}\n"
            "import os, runpy\n"
            f"os.environ.update({env!r})\n"
            f"runpy.run_path({str(FAULT_CLI)!r}, run_name='__main__')\n"
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)

    def disarm(self) -> None:
        self.armed.unlink(missing_ok=True)


# -- processes -------------------------------------------------------------------------------------


def _cwd(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


# -- the harness -----------------------------------------------------------------------------------


class Harness:
    """What every backend adaptor offers. `name` is the parameter id ("claude",
    "claude-print", ..., "mock"); `backend` the modelProvider; `mode` None for the default."""

    backend: str
    cli_name: str = ""
    #: whether the mode asks the client for approvals (print/exec/headless/run decide by policy)
    approvals: bool = True
    #: whether a CLI process outlives a turn (stream, app-server, ACP)
    long_lived: bool = True
    #: thread/start params every thread of this backend gets
    base_params: dict[str, Any]
    #: whether a real CLI runs (everything but the mock)
    has_cli = True
    #: response headers that make the CLI's own retries of a 429/5xx immediate (OpenCode
    #: retries 5 times with a backoff from 2 s unless told when; the others retry not at all
    #: under the e2e fixtures' settings)
    no_backoff: tuple[tuple[str, str], ...] = ()

    def __init__(self, name: str, env: Any, tmp: Path) -> None:
        self.name = name
        self.env = env
        self.tmp = tmp
        self.mode = name.partition("-")[2] or None
        self.base_params = {}
        self.approvals = capabilities(name).approvals
        if self.mode is not None:
            self.long_lived = False
        self.work2 = tmp / "work2"
        self.work2.mkdir(exist_ok=True)
        self.rules: dict[str, Rule] = {}
        self._faults = 0

    # -- set-up

    def new_cwd(self, name: str) -> Path:
        """A fresh working directory (a project root of its own, like the work dir)."""
        slug = "".join(c if c.isalnum() else "-" for c in name)
        path = self.tmp / f"cwd-{len(list(self.tmp.glob('cwd-*')))}-{slug}"
        path.mkdir()
        if (self.work / ".git").exists():
            subprocess.run(["git", "init", "-q", str(path)], check=True)
        return path

    @property
    def work(self) -> Path:
        return Path(self.env.work)

    @property
    def home(self) -> Path:
        return Path(self.env.home)

    @property
    def marker(self) -> str:
        return str(self.env.marker)

    def server(self, nursery: trio.Nursery, **extra: str) -> running_server:
        return self.env.server(nursery, **extra)  # type: ignore[no-any-return]

    def params(self, **extra: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"modelProvider": self.backend, **self.base_params}
        config = dict(extra.pop("config", {}) or {})
        if self.mode is not None:
            config["mode"] = self.mode
        params.update(extra)
        if config:
            params["config"] = config
        return params

    async def thread(self, srv: ServerProcess, cwd: Path | None = None, **params: Any) -> str:
        """thread/start in `cwd` (default: the work dir)."""
        result = await srv.call(
            "thread/start", {"cwd": str(cwd or self.work), **self.params(**params)}
        )
        return str(result["thread"]["id"])

    # -- scripting

    def script(self, *rules: Rule) -> None:
        """Replace the model's script. Rules are tried in order on the latest human text."""
        self.rules = {r.tag: r for r in rules}
        self._set_script(rules)

    #: the fake model API the CLI talks to (a tests/fakes module: its Rule, Step, Text, ...)
    fake_api: ModuleType
    #: the `Step` field that stalls the stream after its first delta
    stall_field = "stall_after_first_delta_ms"

    def _set_script(self, rules: Sequence[Rule]) -> None:
        api = self.fake_api
        self.env.script(*[api.Rule(r.tag, [self._fake_step(s) for s in r.steps]) for r in rules])

    def _fake_step(self, step: Step) -> Any:
        """`step` in the fake API's terms."""
        api = self.fake_api
        match step:
            case Say(text, delay):
                return api.Step([api.Text(text)], delay_ms=delay, chunk_size=8)
            case Shell(command):
                return self.shell_step(command)
            case HttpFail(status, message, headers):
                return api.HttpError(status, message, headers=dict(headers))
            case Cut(text):
                return api.Step([api.Text(text)], close_midstream=True)
            case Stall(text):
                return api.Step([api.Text(text)], **{self.stall_field: STALL_MS})
        raise AssertionError(step)

    def shell_step(self, command: str) -> Any:
        """The model's call of the CLI's shell tool running `command`."""
        raise NotImplementedError

    def prompt(self, tag: str) -> str:
        """The turn text that makes the model follow the rule `tag`."""
        return f"{tag} please"

    # -- inspection

    def user_texts(self, after: int = 0) -> list[str]:
        """Every text part of every user message the model was sent (raw, as recorded), in
        the model calls after the first `after`."""
        raise NotImplementedError

    def calls(self, tag: str | None = None) -> int:
        """Model calls the fake answered (with the rule `tag`)."""
        requests = self.env.fake.model_requests
        return sum(1 for r in requests if tag is None or r.rule == tag)

    def leftovers(self) -> list[int]:
        return self.env.leftovers()  # type: ignore[no-any-return]

    async def wait_no_leftovers(self, timeout: float = 2) -> list[int]:
        return await self.env.wait_no_leftovers(timeout)  # type: ignore[no-any-return]

    def cli_pids(self, srv: ServerProcess, cwd: Path | None = None) -> list[int]:
        """The CLI processes threadline started (its direct children) working in `cwd`."""
        where = str(cwd or self.work)
        return child_pids(srv, lambda pid: _cwd(pid) == where)

    async def wait_cli(
        self, srv: ServerProcess, cwd: Path | None = None, timeout: float = 30
    ) -> int:
        with trio.fail_after(timeout):
            while not (pids := self.cli_pids(srv, cwd)):  # noqa: ASYNC110 - polling /proc
                await trio.sleep(0.02)
        return pids[0]

    def sleepers(self, seconds: int) -> list[int]:
        return self.env.sleepers(seconds)  # type: ignore[no-any-return]

    async def wait_until(self, pred: Callable[[], bool], what: str, timeout: float = 30) -> None:
        await self.env.wait_until(pred, what, timeout)

    # -- faults

    @property
    def real_cli(self) -> str:
        return str(self.env.cli)

    def real_cli_env(self) -> dict[str, str]:
        return {}

    def fault_cli(self, fault: str, trigger: str | None = None) -> FaultCli:
        self._faults += 1
        return FaultCli(
            self.tmp / "faults" / f"{self._faults}",
            self.cli_name,
            self.real_cli,
            fault,
            trigger=trigger,
            real_env=self.real_cli_env(),
        )

    #: How long a turn may take before it fails "Query timed out", for a turn that includes
    #: the CLI's start-up.
    timeout_ms = 5000

    #: Thread config that gives a thread a CLI process of its own, not shared with the
    #: bystander's (a fault that kills "the CLI" must hit only the faulted thread's).
    own_process_config: dict[str, Any] = {}

    # -- an unusable model API (extra server environment)

    def unreachable_env(self, url: str) -> dict[str, str]:
        """The CLI calls its model API at `url`, retrying as it does by default."""
        raise NotImplementedError

    def no_credentials_env(self) -> dict[str, str]:
        """The CLI has no credentials (and nothing to fall back to)."""
        raise NotImplementedError

    def scratch(self, name: str) -> Path:
        """A fresh directory for a CLI's home or config."""
        self._faults += 1
        return self.tmp / "scratch" / f"{self._faults}-{name}"


# -- Claude ----------------------------------------------------------------------------------------


class ClaudeHarness(Harness):
    backend = "claude"
    cli_name = "claude"
    env: ClaudeEnv
    fake_api = fa

    def shell_step(self, command: str) -> Any:
        return fa.ToolUse("Bash", {"command": command, "description": "Run the command"})

    def params(self, **extra: Any) -> dict[str, Any]:
        params = super().params(**extra)
        if self.mode == "print":
            # print mode cannot ask: Bash runs under the "never" policy only
            params.setdefault("approvalPolicy", "never")
        return params

    def user_texts(self, after: int = 0) -> list[str]:
        texts = []
        for request in self.env.fake.model_requests[after:]:
            for message in request.messages:
                if message.get("role") != "user":
                    continue
                content = message.get("content")
                if isinstance(content, str):
                    texts.append(content)
                    continue
                texts += [b["text"] for b in content or () if b.get("type") == "text"]
        return texts

    def unreachable_env(self, url: str) -> dict[str, str]:
        # (the fixture's CLAUDE_CODE_MAX_RETRIES=0 back to the CLI's default)
        return {"ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_MAX_RETRIES": "10"}

    def no_credentials_env(self) -> dict[str, str]:
        return {"ANTHROPIC_API_KEY": ""}  # (empty is unset for the CLI)


# -- Codex -----------------------------------------------------------------------------------------


class CodexHarness(Harness):
    backend = "codex"
    cli_name = "codex"
    env: CodexEnv
    fake_api = fr

    # Threads share one app-server per binary and environment: a process-level key (see
    # `codex.invocation.PROCESS_KEYS`) gives the faulted thread its own. What a crash of a
    # shared app-server does to the threads on it is tests/e2e/test_codex_shared.py's.
    own_process_config: dict[str, Any] = {"codexConfig": {"history.persistence": "none"}}

    def __init__(self, name: str, env: Any, tmp: Path) -> None:
        super().__init__(name, env, tmp)
        self.base_params = {"approvalPolicy": "on-request", "sandbox": "read-only"}

    def shell_step(self, command: str) -> Any:
        if self.approvals:  # under read-only + on-request, an escalation asks the client
            return fr.ExecCommand(
                command,
                sandbox_permissions="require_escalated",
                justification="The command must run outside the sandbox",
                yield_time_ms=30_000,
            )
        # (exec runs under "never", which refuses any escalation: a plain command)
        return fr.ExecCommand(command, yield_time_ms=30_000)

    def params(self, **extra: Any) -> dict[str, Any]:
        params = super().params(**extra)
        if self.mode == "exec":
            params["approvalPolicy"] = "never"  # exec cannot ask: commands run unsandboxed
            params.pop("sandbox", None)
        return params

    def user_texts(self, after: int = 0) -> list[str]:
        texts = []
        for request in self.env.fake.model_requests[after:]:
            for item in request.input:
                if item.get("role") != "user" or item.get("type", "message") != "message":
                    continue
                content = item.get("content")
                if isinstance(content, str):
                    texts.append(content)
                else:
                    texts += [p["text"] for p in content or () if isinstance(p.get("text"), str)]
        return texts

    @property
    def real_cli(self) -> str:
        from threadline.backends.codex.invocation import native_binary

        return native_binary(str(self.env.cli))[0]

    def real_cli_env(self) -> dict[str, str]:
        from threadline.backends.codex.invocation import native_binary

        return native_binary(str(self.env.cli))[1]

    def unreachable_env(self, url: str) -> dict[str, str]:
        where = self.scratch("codex")
        home = fr.codex_home(where.parent, url, name=where.name)
        config = home / "config.toml"
        # the CLI's default request and stream retries (the fixture's are 0)
        lines = config.read_text().splitlines(keepends=True)
        config.write_text("".join(x for x in lines if "_max_retries" not in x))
        return {"CODEX_HOME": str(home)}

    def no_credentials_env(self) -> dict[str, str]:
        return {fr.ENV_KEY: ""}  # the provider's env_key: empty is unset for the CLI

    def logged_out_env(self) -> dict[str, str]:
        """Codex's own OpenAI provider (sent to the fake) and no `codex login`."""
        where = self.scratch("codex-openai")
        where.mkdir(parents=True)
        base = json.dumps(self.env.fake.base_url)
        where.joinpath("config.toml").write_text(
            f"openai_base_url = {base}\n[analytics]\nenabled = false\n[features]\nplugins = false\n"
        )
        return {"CODEX_HOME": str(where)}


# -- Gemini ----------------------------------------------------------------------------------------


class GeminiHarness(Harness):
    backend = "gemini"
    cli_name = "gemini"
    env: GeminiEnv
    timeout_ms = 15000  # node start-up of the CLI alone takes seconds on a 2-core box
    fake_api = fg
    stall_field = "stall_after_first_chunk_ms"

    def shell_step(self, command: str) -> Any:
        return fg.ShellCommand(command, description="Run the command")

    def params(self, **extra: Any) -> dict[str, Any]:
        params = super().params(**extra)
        if self.mode == "headless":
            params.setdefault("approvalPolicy", "never")  # headless cannot ask: yolo
        return params

    def user_texts(self, after: int = 0) -> list[str]:
        texts = []
        for request in self.env.fake.model_requests[after:]:
            for content in request.contents:
                if content.get("role", "user") != "user":
                    continue
                texts += [
                    p["text"] for p in content.get("parts") or () if isinstance(p.get("text"), str)
                ]
        return texts

    def _cli_home(self, url: str) -> tuple[Path, dict[str, str]]:
        """A fresh HOME for the CLI with its default retries (the fixture allows 1 attempt)."""
        where = self.scratch("gemini")
        home = fg.gemini_home(where.parent, url, name=where.name)
        path = home / ".gemini" / "settings.json"
        settings = json.loads(path.read_text())
        del settings["general"]["maxAttempts"]
        path.write_text(json.dumps(settings))
        env = fg.gemini_env(home, url)
        env.pop("PATH")
        return home, env

    def unreachable_env(self, url: str) -> dict[str, str]:
        return self._cli_home(url)[1]

    def no_credentials_env(self) -> dict[str, str]:
        home, env = self._cli_home(self.env.fake.url)
        (home / ".gemini" / ".env").unlink()  # (the CLI's fallback for a missing key)
        return {**env, "GEMINI_API_KEY": ""}


# -- OpenCode --------------------------------------------------------------------------------------


class OpenCodeHarness(Harness):
    backend = "opencode"
    cli_name = "opencode"
    env: OpenCodeEnv
    timeout_ms = 15000
    no_backoff = (("retry-after-ms", "0"),)
    fake_api = fc

    def shell_step(self, command: str) -> Any:
        return fc.bash_call(command, "Run the command")

    def params(self, **extra: Any) -> dict[str, Any]:
        params = super().params(**extra)
        if self.mode == "run":
            params.setdefault("approvalPolicy", "never")  # run cannot ask: --auto
        return params

    def user_texts(self, after: int = 0) -> list[str]:
        texts = []
        for request in self.env.fake.model_requests[after:]:
            for message in request.messages:
                if message.get("role") != "user":
                    continue
                content = message.get("content")
                if isinstance(content, str):
                    texts.append(content)
                else:
                    texts += [p["text"] for p in content or () if isinstance(p.get("text"), str)]
        return texts

    def unreachable_env(self, url: str) -> dict[str, str]:
        return {"OPENCODE_CONFIG_CONTENT": json.dumps(fc.opencode_config(url))}

    def no_credentials_env(self) -> dict[str, str]:
        # A provider OpenCode ships, without its key: OpenCode then knows no model at all.
        config = {
            "model": "anthropic/claude-sonnet-4-5",
            "enabled_providers": ["anthropic"],
            "autoupdate": False,
            "share": "disabled",
        }
        return {"OPENCODE_CONFIG_CONTENT": json.dumps(config), "ANTHROPIC_API_KEY": ""}


# -- Qwen Code -------------------------------------------------------------------------------------


class QwenHarness(OpenCodeHarness):
    """On the same Chat Completions fake as OpenCode."""

    backend = "qwen"
    cli_name = "qwen"
    env: QwenEnv  # type: ignore[assignment]
    # qwen honours Retry-After on 429/503 only; threadline stops its 5xx retries itself
    no_backoff = ()

    def shell_step(self, command: str) -> Any:
        return shell_call(command, "Run the command")

    def _cli_home(self) -> dict[str, str]:
        """A fresh HOME for the CLI with its default retries (the fixture's OpenAI client
        makes one request per attempt)."""
        home = self.scratch("qwen")
        settings = qwen_settings()
        del settings["model"]["generationConfig"]["maxRetries"]
        (home / ".qwen").mkdir(parents=True)
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
        return {"HOME": str(home)}

    def unreachable_env(self, url: str) -> dict[str, str]:
        base = url if url.endswith("/v1") else url.rstrip("/") + "/v1"
        return {**self._cli_home(), "OPENAI_BASE_URL": base}

    def no_credentials_env(self) -> dict[str, str]:
        return {**self._cli_home(), "OPENAI_API_KEY": ""}


# -- mock ------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class MockEnv(ServerEnv):
    """What the mock backend needs of an "env": dirs, a marker, servers."""

    backend = "mock"


class MockHarness(Harness):
    """The mock has no CLI and no model: its prompt is the script. `Say` → ``/text``, `Shell`
    → ``/run`` (a real ``sh -c`` behind an approval), `HttpFail`/`Cut` → ``/fail`` with the
    same kind of text (the analogue of an API failure: a backend error), `Stall` → the text,
    then ``/sleep``."""

    backend = "mock"
    env: MockEnv
    long_lived = False
    has_cli = False
    timeout_ms = 2000

    def _set_script(self, rules: Sequence[Rule]) -> None:
        pass

    def prompt(self, tag: str) -> str:
        rule = self.rules.get(tag)
        if rule is None:
            return f"{tag} please"
        lines = []
        for step in rule.steps:
            match step:
                case Say(text, delay):
                    if delay:
                        lines.append(f"/sleep {delay * 5 / 1000}")  # as if it streamed slowly
                    lines.append(f"/text {text}")
                case Shell(command):
                    lines.append(f"/run {command}")
                case HttpFail(status, message):
                    lines.append(f"/fail the model API answered HTTP {status}: {message}")
                    break
                case Cut(text):
                    lines += [f"/text {text[:8]}", "/fail the model's stream was cut"]
                    break
                case Stall(text):
                    lines += [f"/text {text[:8]}", "/sleep 600"]
                    break
        return "\n".join(lines)

    def user_texts(self, after: int = 0) -> list[str]:
        return []

    def calls(self, tag: str | None = None) -> int:
        return 0

    def cli_pids(self, srv: ServerProcess, cwd: Path | None = None) -> list[int]:
        return []


def _subclasses(cls: type[Harness]) -> list[type[Harness]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))]


#: Every backend's harness, by backend id.
HARNESSES = {cls.backend: cls for cls in _subclasses(Harness)}


def make_harness(name: str, env: Any, tmp: Path) -> Harness:
    harness = HARNESSES[name.partition("-")[0]](name, env, tmp)
    if (harness.work / ".git").exists():
        # claude_env made the work dir its own project root; the second one gets the same.
        subprocess.run(["git", "init", "-q", str(harness.work2)], check=True)
    return harness


# -- the bystander ---------------------------------------------------------------------------------


class Bystander:
    """A second thread (the real CLI, in the work dir) whose turns run alongside the faults:
    each must complete with exactly its answer, and its CLI process (long-lived modes) must
    survive. Faults that break a CLI run in a cwd of their own; the others (API errors,
    approvals, prompts) share the work dir, so on the ACP backends the bystander's session
    shares the agent process with the faulty one."""

    TAG = "bystander"
    ANSWER = "Bystander here: all is well."
    RULE = Rule(TAG, Say(ANSWER, delay_ms=40))

    def __init__(self, harness: Harness, srv: ServerProcess) -> None:
        self.h = harness
        self.srv = srv
        self.thread_id = ""
        self.cwd = harness.work
        self.pids: list[int] = []
        self.turns: list[str] = []

    async def open(self) -> None:
        # (gemini headless: a project of its own. gemini 0.61.0 loses one thread's session
        # file when another thread of the same project resumes in a later minute; the first
        # thread's next turn then fails "Invalid session identifier". Documented in
        # tests/matrix/__init__.py, not something threadline can repair.)
        self.cwd = self.h.work2 if self.h.name == "gemini-headless" else self.h.work
        self.thread_id = await self.h.thread(self.srv, self.cwd)
        if self.h.long_lived:
            await self.h.wait_cli(self.srv, self.cwd)
            self.pids = self.h.cli_pids(self.srv, self.cwd)

    async def start(self, collector: Collector) -> str:
        try:
            turn = await collector.start(self.thread_id, self.h.prompt(self.TAG))
        except AssertionError as exc:
            if "already in progress" not in str(exc) or not self.turns:
                raise
            # A cell that failed left the bystander's last turn running: end it, so the
            # next cell is judged on its own.
            params = {"threadId": self.thread_id, "turnId": self.turns[-1]}
            await self.srv.call("turn/interrupt", params)
            await trio.sleep(2)
            turn = await collector.start(self.thread_id, self.h.prompt(self.TAG))
        self.turns.append(turn)
        return turn

    def check(self, results: Mapping[str, TurnResult]) -> None:
        turn = self.turns[-1]
        result = results[turn]
        assert result.status == "completed", f"the bystander was touched: {result.turn}"
        assert result.text == self.ANSWER, result.text
        if self.h.long_lived:
            now = self.h.cli_pids(self.srv, self.cwd)
            assert set(self.pids) <= set(now), f"the bystander's CLI died: {self.pids} -> {now}"


# -- parameters ----------------------------------------------------------------------------------

#: The backends of the registry the matrix drives: those with a harness (every backend with a
#: CLI of its own has one; the generic acp backend runs whatever command it is given).
BACKENDS = tuple(b for b in SPECS if b in HARNESSES)
#: Every such backend in its default mode ("claude"), then in its other modes ("claude-print").
ALL_NAMES = (
    *BACKENDS,
    *(f"{b}-{mode}" for b in BACKENDS for mode in SPECS[b].modes if mode != SPECS[b].default_mode),
)


def capabilities(name: str) -> BackendCapabilities:
    """What the backend's mode named by `name` ("claude", "claude-print", ...) can do."""
    backend, _, mode = name.partition("-")
    spec = SPECS[backend]
    return spec.capabilities[mode or spec.default_mode]


def matrix_params(default: Mapping[str, Sequence[str]], names: Sequence[str] = ALL_NAMES) -> Any:
    """Parameters (backend name, part) for `names`: part "default" runs the faults `default`
    names for that backend (in the default run), part "slow" (marked slow) runs the rest."""
    import pytest

    params = [pytest.param(n, "default", id=f"{n}-default") for n in names if default.get(n)]
    params += [pytest.param(n, "slow", id=f"{n}-slow", marks=pytest.mark.slow) for n in names]
    return pytest.mark.parametrize(("backend_name", "part"), params)


def chosen(part: str, name: str, default: Mapping[str, Sequence[str]], fault: str) -> bool:
    """Whether `fault` runs in this part for backend `name`."""
    return (fault in default.get(name, ())) == (part == "default")


# -- results ---------------------------------------------------------------------------------------

#: (category, fault) → {backend name: outcome}; printed as a matrix at the end of the run.
RESULTS: dict[tuple[str, str], dict[str, str]] = {}


def record(backend: Harness, category: str, fault: str, outcome: str = "pass") -> None:
    """Note what the matrix cell (fault x backend) showed."""
    RESULTS.setdefault((category, fault), {})[backend.name] = outcome


class Cells:
    """Runs the faults of one test one after the other; a failing fault is recorded and the
    next one still runs; `check()` raises with every failure at the end."""

    def __init__(self, harness: Harness, category: str) -> None:
        self.h = harness
        self.category = category
        self.failures: list[str] = []
        self.outcome = "pass"

    @contextlib.asynccontextmanager
    async def cell(self, fault: str) -> AsyncIterator[Cells]:
        self.outcome = "pass"
        t0 = time.monotonic()
        try:
            yield self
        except (AssertionError, trio.TooSlowError) as exc:
            record(self.h, self.category, fault, "FAIL")
            detail = "".join(traceback.format_exception_only(exc)).strip()
            self.failures.append(f"{fault}: {detail}")
        else:
            record(self.h, self.category, fault, self.outcome)
        finally:
            print(f"{self.h.name} {self.category} {fault}: {time.monotonic() - t0:.1f} s")

    def check(self) -> None:
        assert not self.failures, "\n".join(self.failures)
