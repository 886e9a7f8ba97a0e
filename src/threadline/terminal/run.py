"""The `threadline run` loop: start a server, open or resume a thread, run turns, ask for
approvals on the terminal.

Content (the rendered turn, or raw notifications with `--json`) goes to stdout; everything else
(thread id, prompts, progress) goes to stderr, so stdout can be piped. Ctrl-C cancels the
running turn; a second Ctrl-C (or one while idle) quits. The server runs in its own session so
the terminal's Ctrl-C reaches only this client.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import trio

from ..client import (
    Client,
    RpcError,
    ServerClosed,
    ServerRequest,
    TurnOverrides,
    TurnStream,
    image,
    spawn,
)
from ..invocation import command_name
from ..protocol import (
    CommandExecutionItem,
    CommandExecutionRequestApprovalParams,
    FileChangeRequestApprovalParams,
    ThreadStartResponse,
    ToolRequestApprovalParams,
    ToolRequestUserInputParams,
    UserInput,
)
from .commands import Parsed, help_text, parse
from .render import Renderer, Style

__all__ = ["RunOptions", "image_args", "mcp_servers", "run_main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_CHOICES = {
    "y": "accept",
    "yes": "accept",
    "n": "decline",
    "no": "decline",
    "a": "acceptForSession",
    "always": "acceptForSession",
    "c": "cancel",
    "cancel": "cancel",
}


def mcp_servers(specs: list[str]) -> dict[str, Any]:
    """`--mcp` values → `config.mcp_servers` (raises ValueError for a malformed one)."""
    servers: dict[str, Any] = {}
    for spec in specs:
        name, sep, command = spec.partition("=")
        if not sep or not name or not command.strip():
            raise ValueError(f"--mcp {spec!r}: expected NAME=COMMAND [ARGS…] or NAME=URL")
        if command.startswith(("http://", "https://")):
            servers[name] = {"url": command}
        else:
            argv = shlex.split(command)
            servers[name] = {"command": argv[0], "args": argv[1:]}
    return servers


def image_args(values: list[str]) -> list[str]:
    """`--image` values → absolute paths (URLs as they are); raises ValueError for a file that
    is not there."""
    out = []
    for value in values:
        if value.startswith(("http://", "https://", "data:")):
            out.append(value)
            continue
        path = os.path.abspath(os.path.expanduser(value))
        if not os.path.isfile(path):
            raise ValueError(f"--image {value}: no such file")
        out.append(path)
    return out


@dataclass
class RunOptions:
    prompt: str | None = None
    backend: str | None = None
    model: str | None = None
    cwd: str | None = None
    resume: str | None = None
    json: bool = False
    approval_policy: str | None = None
    mode: str | None = None
    #: `NAME=COMMAND ARGS…` (a stdio MCP server) or `NAME=http(s)://…` (`--mcp`).
    mcp: list[str] = field(default_factory=list)
    #: Image paths or URLs attached to the first prompt (`--image`).
    images: list[str] = field(default_factory=list)
    #: The server command (default: this interpreter running threadline).
    server_argv: list[str] | None = None


def run_main(options: RunOptions) -> int:
    with _no_control_echo():
        return trio.run(_Session(options).main)


@contextmanager
def _no_control_echo() -> Iterator[None]:
    """The terminal does not echo Ctrl-C as `^C`: the session prints its own `^C …` line,
    and the two together read `^C^C`."""
    try:
        import termios
    except ImportError:
        yield
        return
    try:
        fd = sys.stdin.fileno()
        saved = termios.tcgetattr(fd)
    except (OSError, ValueError, termios.error):
        yield  # not a terminal
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHOCTL
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


class _StdinLines:
    """Lines typed on stdin, read by one daemon thread so a read never has to be abandoned:
    a prompt cancelled by Ctrl-C leaves the next line for the next reader."""

    def __init__(self) -> None:
        self.send, self.recv = trio.open_memory_channel[str | None](64)

    def start(self) -> None:
        token = trio.lowlevel.current_trio_token()

        def pump() -> None:
            try:
                for raw in sys.stdin:
                    trio.from_thread.run(self.send.send, raw.rstrip("\r\n"), trio_token=token)
                trio.from_thread.run(self.send.send, None, trio_token=token)
            except trio.RunFinishedError:
                pass

        threading.Thread(target=pump, name="threadline-stdin", daemon=True).start()

    async def receive(self) -> str | None:
        """The next line; None at EOF (and for ever after)."""
        line = await self.recv.receive()
        if line is None:
            self.send.send_nowait(None)
        return line


@dataclass
class _TurnState:
    stream: TurnStream
    started: float = field(default_factory=time.monotonic)
    cancelling: bool = False


class _Session:
    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.renderer = Renderer(sys.stdout, json_mode=options.json)
        self.err = Style.for_stream(sys.stderr)
        self.lines = _StdinLines()
        self.turn: _TurnState | None = None
        self.thread_id = ""
        self.backend = ""
        self.model = ""
        #: Images for the next prompt (the first one only).
        self.images: list[UserInput] = [image(i) for i in options.images]
        #: `/model` and `/effort` settings for the next turn (the server keeps them after).
        self.overrides: TurnOverrides = {}
        self.prompt_scope: trio.CancelScope | None = None
        self.status_shown = False
        self.exit_code = EXIT_OK

    def say(self, text: str) -> None:
        """A line of chrome on stderr (after clearing the progress line)."""
        self.clear_status()
        self.renderer.newline()
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    async def main(self) -> int:
        self.lines.start()
        env = {"THREADLINE_LOG_LEVEL": "ERROR"} if _quiet_default() else {}
        try:
            async with (
                spawn(self.options.server_argv, env=env, start_new_session=True) as client,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(self._signals, nursery.cancel_scope)
                nursery.start_soon(self._progress)
                self.exit_code = await self._session(client)
                nursery.cancel_scope.cancel()
        except ServerClosed as exc:
            self.say(self.err.red(f"threadline: the server stopped ({exc})"))
            return EXIT_FAILED
        return self.exit_code

    async def _session(self, client: Client) -> int:
        o = self.options
        opened: ThreadStartResponse
        try:
            if o.resume:
                opened = await client.resume_thread(
                    o.resume, cwd=o.cwd, model=o.model, approval_policy=o.approval_policy
                )
            else:
                config: dict[str, Any] = {"mode": o.mode} if o.mode else {}
                if o.mcp:
                    config["mcp_servers"] = mcp_servers(o.mcp)
                opened = await client.start_thread(
                    model_provider=o.backend,
                    model=o.model,
                    cwd=o.cwd,
                    approval_policy=o.approval_policy,
                    config=config or None,
                )
        except RpcError as exc:
            self.say(self.err.red(f"threadline: {exc.message}"))
            return EXIT_USAGE
        thread = opened.thread
        self.thread_id, self.backend, self.model = thread.id, opened.model_provider, opened.model
        self.say(
            self.err.dim(
                f"thread {thread.id} · {opened.model_provider} · {opened.model} · {opened.cwd}\n"
                f"continue it with: {command_name()} run --resume {thread.id}"
            )
        )
        if o.prompt is not None:
            return await self._turn(client, o.prompt)
        return await self._interactive(client)

    async def _interactive(self, client: Client) -> int:
        code = EXIT_OK
        while True:
            self.clear_status()
            sys.stderr.write(self.err.bold("> "))
            sys.stderr.flush()
            line = await self.lines.receive()
            if line is None:
                return code
            parsed = parse(line)
            if isinstance(parsed, str):
                if parsed.strip():
                    code = await self._turn(client, parsed)
            elif parsed.command.name in ("exit", "quit"):
                return code
            else:
                try:
                    code = await self._command(client, parsed, code)
                except RpcError as exc:
                    self.say(self.err.red(f"threadline: {exc.message}"))

    async def _command(self, client: Client, parsed: Parsed, code: int) -> int:
        """Run a prompt command; the session's exit status after it."""
        name, arg, s = parsed.command.name, parsed.arg, self.err
        if name == "help":
            self.say(help_text())
        elif not arg and name in ("effort", "name"):
            self.say(s.yellow(f"usage: /{name} {parsed.command.arg}"))
        elif name == "model" and not arg:
            await self._list_models(client)
        elif name == "model":
            self.overrides["model"] = arg
            self.say(s.dim(f"model {arg} from the next turn"))
        elif name == "effort":
            self.overrides["effort"] = arg
            self.say(s.dim(f"effort {arg} from the next turn"))
        elif name == "name":
            await client.set_thread_name(self.thread_id, arg)
            self.say(s.dim(f"thread named {arg!r}"))
        elif name == "fork":
            forked = await client.fork_thread(self.thread_id, exclude_turns=True)
            source, self.thread_id = self.thread_id, forked.thread.id
            self.say(
                s.dim(
                    f"forked thread {self.thread_id} from {source}; this session continues in"
                    f" the fork\ncontinue it with: {command_name()} run --resume {self.thread_id}"
                )
            )
        elif name == "compact":
            stream = await client.compact_thread(self.thread_id, on_request=self._on_request)
            return await self._follow(stream)
        return code

    async def _list_models(self, client: Client) -> None:
        """The backend's models (the name `/model` takes, then what it is), marked."""
        listed = await client.list_models(self.backend)
        chosen = self.overrides.get("model")
        for model in listed.data:
            marks = [
                mark
                for mark, on in (
                    ("default", model.is_default),
                    ("this thread's", model.model == self.model),
                    ("from the next turn", model.model == chosen),
                )
                if on
            ]
            about = model.display_name + (f" ({', '.join(marks)})" if marks else "")
            self.say(f"  {model.model:24} {about}")
        if self.model not in [m.model for m in listed.data]:
            self.say(self.err.dim(f"this thread's model: {self.model}"))
        self.say(self.err.dim("choose one with /model NAME"))

    async def _turn(self, client: Client, prompt: str) -> int:
        images, self.images = self.images, []
        overrides, self.overrides = self.overrides, {}
        try:
            stream = await client.start_turn(
                self.thread_id, [prompt, *images], on_request=self._on_request, **overrides
            )
        except RpcError as exc:
            self.say(self.err.red(f"threadline: {exc.message}"))
            if overrides:
                unset = ", ".join(f"/{k} {v}" for k, v in overrides.items())
                self.say(self.err.yellow(f"(not applied: {unset})"))
            return EXIT_FAILED
        self.model = overrides.get("model", self.model)
        return await self._follow(stream)

    async def _follow(self, stream: TurnStream) -> int:
        """Render a turn to its end; the exit status its outcome means."""
        self.turn = _TurnState(stream)
        try:
            async for notification in stream:
                self.clear_status()
                self.renderer.notification(notification)
        finally:
            self.turn = None
        completed = stream.completed
        assert completed is not None
        status = completed.turn.status
        return {"completed": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(status, EXIT_FAILED)

    # -- Ctrl-C and progress ---------------------------------------------------------------------

    async def _signals(self, quit_scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                turn = self.turn
                if turn is not None and not turn.cancelling and turn.stream.turn is not None:
                    turn.cancelling = True
                    self.say(self.err.yellow("^C cancelling the turn (Ctrl-C again to quit)"))
                    if self.prompt_scope is not None:
                        self.prompt_scope.cancel()
                    with suppress(RpcError, ServerClosed):  # the turn may have ended
                        await turn.stream.cancel()
                else:
                    self.say(self.err.yellow("^C"))
                    self.exit_code = EXIT_INTERRUPTED
                    quit_scope.cancel()
                    return

    async def _progress(self) -> None:
        """Show that long silent work is still going: a spinner with the elapsed time on a
        terminal, a line every 15 s otherwise."""
        tty = sys.stderr.isatty()
        frame = 0
        last_line = time.monotonic()
        while True:
            await trio.sleep(0.25 if tty else 1.0)
            turn = self.turn
            if turn is None or self.prompt_scope is not None:
                continue
            now = time.monotonic()
            quiet = now - self.renderer.last_output
            what = self.renderer.current or "working"
            elapsed = int(now - turn.started)
            if tty and quiet > 1.0:
                # The spinner line is cleared and redrawn: it must not sit on streamed text.
                self.renderer.newline()
                frame = (frame + 1) % len(_SPINNER)
                sys.stderr.write(f"\r\x1b[2K{_SPINNER[frame]} {what} · {elapsed}s")
                sys.stderr.flush()
                self.status_shown = True
            elif not tty and quiet > 15 and now - last_line > 15:
                last_line = now
                sys.stderr.write(f"… still {what} ({elapsed}s)\n")
                sys.stderr.flush()

    def clear_status(self) -> None:
        if self.status_shown:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
            self.status_shown = False

    # -- approvals -------------------------------------------------------------------------------

    async def _on_request(self, request: ServerRequest) -> Any:
        params = request.params
        item_id = getattr(params, "item_id", None)
        with trio.move_on_after(1.0):  # let the stream render the item being asked about
            while item_id is not None and item_id not in self.renderer.items:  # noqa: ASYNC110
                await trio.sleep(0.01)
        s = self.err
        if isinstance(params, ToolRequestUserInputParams):
            return await self._questions(params)
        # What [a] covers is what the approval router remembers: the same command, any file
        # change, or the same tool, in this thread until threadline exits.
        if isinstance(params, CommandExecutionRequestApprovalParams):
            item = self.renderer.items.get(params.item_id)
            command = params.command or (
                item.command if isinstance(item, CommandExecutionItem) else "?"
            )
            what = f"run {s.cyan(command)}" + (f" in {params.cwd}" if params.cwd else "")
            always = "[a]lways allow this exact command in this thread"
        elif isinstance(params, FileChangeRequestApprovalParams):
            what = "apply the file change above"
            always = "[a]lways allow file changes in this thread"
        elif isinstance(params, ToolRequestApprovalParams):
            what = f"use the tool {s.cyan(params.tool)}"
            always = f"[a]lways allow {params.tool} in this thread"
        else:
            what = f"answer {request.method}"
            always = "[a]lways allow this in this thread"
        reason = getattr(params, "reason", None)
        self.say(
            s.bold("approval: ") + f"the agent wants to {what}" + (f" — {reason}" if reason else "")
        )
        while True:
            answer = await self._ask(f"allow? [y]es / [n]o / {always} / [c]ancel turn: ")
            if answer is None:
                self.say(s.yellow("(no answer: declined)"))
                return {"decision": "decline"}
            if answer == "\x03":
                return {"decision": "cancel"}
            decision = _CHOICES.get(answer.strip().lower())
            if decision is not None:
                return {"decision": decision}
            self.say("please answer y, n, a or c")

    async def _questions(self, params: ToolRequestUserInputParams) -> Any:
        answers: dict[str, Any] = {}
        for q in params.questions:
            self.say(self.err.bold(f"question ({q.header}): ") + q.question)
            options = q.options or []
            for index, option in enumerate(options, 1):
                self.say(
                    f"  {index}. {option.label}"
                    + (f" — {option.description}" if option.description else "")
                )
            answer = await self._ask("answer: ")
            if answer is None or answer == "\x03":
                return {"answers": answers}  # unanswered questions: the agent is told no answer
            choice = answer.strip()
            if choice.isdigit() and 1 <= int(choice) <= len(options):
                choice = options[int(choice) - 1].label
            answers[q.id] = {"answers": [choice]}
        return {"answers": answers}

    async def _ask(self, prompt: str) -> str | None:
        """Read one line from the user; None at EOF, "\\x03" when Ctrl-C cancelled the turn."""
        self.clear_status()
        self.renderer.newline()
        sys.stderr.write(self.err.bold(prompt))
        sys.stderr.flush()
        with trio.CancelScope() as scope:
            self.prompt_scope = scope
            try:
                line = await self.lines.receive()
            finally:
                self.prompt_scope = None
            # A terminal echoed the answer and its newline; a piped answer is shown here, so
            # the transcript reads.
            if line is None or not sys.stdin.isatty():
                sys.stderr.write((line or "") + "\n")
            return line
        sys.stderr.write("\n")
        return "\x03"


def _quiet_default() -> bool:
    """Server warnings would interleave with the rendered turn; keep them out unless the user
    asked for a log level."""
    return "THREADLINE_LOG_LEVEL" not in os.environ
