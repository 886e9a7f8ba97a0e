"""The commands of `threadline run`'s interactive prompt (`/model`, `/fork`, ...).

A line that starts with one of these names is a command; any other line, including other
`/words` (the mock backend's directives, a CLI's own slash commands), is sent to the agent as a
prompt. `//` sends a line that starts with `/` as it is, minus one slash."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COMMANDS", "Command", "Parsed", "help_text", "parse"]


@dataclass(frozen=True)
class Command:
    name: str
    arg: str  # what it takes, for /help ("" for nothing)
    help: str


COMMANDS = {
    c.name: c
    for c in (
        Command("model", "[NAME]", "use this model from the next turn (no name: list them)"),
        Command("effort", "LEVEL", "reasoning effort from the next turn (e.g. low, high)"),
        Command("fork", "", "continue in a copy of this thread (this one stays as it is)"),
        Command("compact", "", "have the agent compact its conversation"),
        Command("name", "TEXT", "name this thread"),
        Command("help", "", "this list"),
        Command("exit", "", "quit (also /quit, Ctrl-D)"),
        Command("quit", "", ""),
    )
}


@dataclass(frozen=True)
class Parsed:
    command: Command
    arg: str


def parse(line: str) -> Parsed | str:
    """The command a line holds, or the prompt it is (`//x` → `/x`)."""
    text = line.strip()
    if text.startswith("//"):
        return line.lstrip()[1:]
    if text.startswith("/"):
        name, _, arg = text[1:].partition(" ")
        command = COMMANDS.get(name)
        if command is not None:
            return Parsed(command, arg.strip())
    return line


def help_text() -> str:
    rows = [
        f"  /{c.name}{' ' + c.arg if c.arg else ''}".ljust(22) + c.help
        for c in COMMANDS.values()
        if c.help
    ]
    rows.append("  //TEXT".ljust(22) + "send /TEXT to the agent as it is")
    return "\n".join(["commands (any other line is sent to the agent):", *rows])
