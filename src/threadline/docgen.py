"""Generated documentation pages: `threadline docs --out docs` writes

- `backends.md`: the backend matrix, from what each backend's code reports (`modes`,
  `default_mode`, `capabilities(mode)`), never hand-kept claims.

Output is byte-for-byte deterministic; `tests/unit/test_docs_fresh.py` fails when the committed
pages are stale.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["GENERATED", "HEADER", "render_backends", "write_docs"]

#: The pages this module owns (relative to the docs directory).
GENERATED = ("backends.md",)
HEADER = "<!-- generated — do not edit; run `threadline docs --out docs` -->\n"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_backends() -> str:
    """The backend matrix, from `create_backends()`: one row per backend and mode."""
    from .backends.registry import create_backends

    backends = create_backends()
    out = [
        HEADER,
        "# Backends",
        "",
        "Generated from what each backend's code reports (`Backend.modes`, `default_mode` and",
        "`capabilities(mode)`): the same data a client gets at runtime in the `initialize`",
        "result (`backends[].capabilities`, per mode) and that `threadline doctor` prints.",
        "Pick a backend with `thread/start.modelProvider` and a mode with",
        "`thread/start.config.mode` (omitted: the default mode). See",
        "[configuration.md](configuration.md) for options and credentials and",
        "[approvals.md](approvals.md) for how approvals reach the client.",
        "",
        "## Matrix",
        "",
        "| backend | mode | approvals | cancel | resume | streamed deltas | reasoning | images |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in backends.values():
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            mark = " (default)" if mode == backend.default_mode else ""
            out.append(
                f"| `{backend.id}` | `{mode}`{mark} "
                f"| {'interactive' if caps.approvals else 'policy only'} "
                f"| {'native interrupt' if caps.interrupt else 'kill process group'} "
                f"| {_yes(caps.resume)} | {_yes(caps.deltas)} | {_yes(caps.reasoning)} "
                f"| {_yes(caps.images)} |"
            )
    out += [
        "",
        "What the columns mean:",
        "",
        "- **approvals** — *interactive*: the CLI asks before it runs a command, edits a file or",
        "  uses another tool, and threadline turns each question into a server→client request",
        "  (`item/commandExecution/requestApproval`, `item/fileChange/requestApproval`,",
        "  `item/tool/requestApproval`, `item/tool/requestUserInput`) routed by the thread's",
        "  `approvalPolicy` and rules. *policy only*: the CLI cannot ask in this mode;",
        "  `approvalPolicy` is turned into the CLI's own flags and nothing reaches the client.",
        "- **cancel** — what `turn/interrupt` / `turn/cancel` does. *native interrupt*: the",
        "  CLI's own interrupt (the process, and the conversation, survive); if the turn has",
        "  not ended after the grace period (`THREADLINE_INTERRUPT_GRACE`, default 5 s), the",
        "  CLI's process group is killed. *kill process group*: the per-turn process is killed",
        "  at once. Either way the turn ends `interrupted` and every open item is completed.",
        "- **resume** — `thread/resume` continues the CLI's own conversation after a restart.",
        "- **streamed deltas** — agent text arrives as `item/agentMessage/delta` while it is",
        "  written; *no*: one delta with the whole text when the message is complete.",
        "- **reasoning** — the CLI's reasoning is reported as `reasoning` items.",
        "- **images** — image inputs (`image`, `localImage`) reach the model.",
        "",
        "## Invocation and role injection",
        "",
        "How threadline runs each CLI, and how a thread's role (`baseInstructions` /",
        "`developerInstructions` on `thread/start`) reaches the agent — once per thread, never",
        "repeated on resume.",
        "",
    ]
    for backend in backends.values():
        out += [f"### `{backend.id}` — {backend.display_name}", ""]
        out += ["| mode | invocation | role injection |", "|---|---|---|"]
        for mode in backend.modes:
            caps = backend.capabilities(mode)
            mark = " (default)" if mode == backend.default_mode else ""
            out.append(
                f"| `{mode}`{mark} | {_cell(caps.invocation) or '—'} "
                f"| {_cell(caps.role_injection) or '—'} |"
            )
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def write_docs(out: Path, schemas: Path | None = None) -> list[Path]:
    """Write every generated page into `out`; return the paths written. `schemas` is the
    directory of the committed JSON Schemas the protocol reference is rendered from."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "backends.md"
    path.write_text(render_backends(), encoding="utf-8")
    return [path]
