"""What the codex backend is, without loading it (no trio): read by the registry.

Control surface, measured on codex 0.169.0 against the fake Responses API: the app-server
takes every `turn/start` override (model, effort, summary, approvalPolicy, sandboxPolicy,
cwd, outputSchema) and keeps them for later turns, and has `turn/steer`, `thread/fork`,
`thread/compact/start` and `thread/inject_items` of its own. `codex exec` takes the same
settings as flags on each spawn (`-m`, `-c model_reasoning_effort=…`, `--output-schema`,
`-s`, `--cd`, `-i`) and forks with `codex exec fork <session>`; it cannot be steered (its
stdin is closed once the prompt is in) and has no compaction command."""

from __future__ import annotations

from typing import Literal

from ..spec import OVERRIDE_FIELDS, BackendSpec, NpmCli, mode_capabilities

__all__ = ["SPEC"]

#: Every `turn/start` override reaches the running CLI (app-server) or the next spawn (exec).
_NATIVE: dict[str, Literal["native", "restart", "unsupported"]] = dict.fromkeys(
    OVERRIDE_FIELDS, "native"
)

SPEC = BackendSpec(
    id="codex",
    display_name="Codex",
    capabilities={
        "app-server": mode_capabilities(
            (
                "one `codex app-server` (native binary) shared by the server's codex threads "
                "with the same binary and environment (`THREADLINE_CODEX_SHARED=0`: one per "
                "thread), each thread a Codex thread on it with its own settings (`codexConfig` "
                "in its `thread/start` config), proxied 1:1; resume with `thread/resume`"
            ),
            "native: `developerInstructions` / `baseInstructions` on thread/start",
            images=True,
            image_urls=False,
            overrides=_NATIVE,
            output_schema=True,
            steer=True,
            fork=True,
            compact=True,
            inject_items="native",
        ),
        "tui": mode_capabilities(
            (
                "the interactive Codex TUI in a tmux session named after the thread "
                "(`tmux -L threadline-<pid> attach -t <thread>`), started as `codex --remote "
                "ws://127.0.0.1:<port> resume <thread>` against a `codex app-server` of the "
                "thread's own that threadline drives as a second WebSocket client: turns are "
                "its `turn/start` (the TUI shows them), the structured stream is that "
                "app-server's v2 notifications, approvals its requests; a prompt a person "
                "types in the TUI is a turn of the thread"
            ),
            "native: `developerInstructions` / `baseInstructions` on thread/start",
            images=True,
            image_urls=False,
            overrides=_NATIVE,
            output_schema=True,
            steer=True,
            fork=True,
            compact=True,
            inject_items="native",
        ),
        # A mode run once per turn: approvals by policy only, no native interrupt.
        "exec": mode_capabilities(
            (
                "`codex exec --json` spawned per turn (prompt on stdin), `codex exec resume "
                "<session>` from the 2nd turn, `codex exec fork <session>` for a fork"
            ),
            "native: `-c developer_instructions=…` / `-c instructions=…`",
            approvals=False,
            interrupt=False,
            deltas=False,
            images=True,
            image_urls=False,
            overrides=_NATIVE,
            output_schema=True,
            fork=True,
        ),
    },
    npm=NpmCli("codex", "@openai/codex", "0.169.0"),
    # Codex's own OpenAI provider reads only its login (auth.json), never OPENAI_API_KEY.
    login_fix="run `codex login` (or `printenv OPENAI_API_KEY | codex login --with-api-key`)",
    credential_files=("$CODEX_HOME/auth.json", "~/.codex/auth.json"),
    models=(("default", "Codex default", "The model configured for the codex CLI"),),
    efforts=tuple((e, f"{e} effort") for e in ("low", "medium", "high")),
    # OpenAI's names as Codex's `model/list` shows them (gpt-…, codex-…) and the o-series.
    model_patterns=(r"gpt-", r"o\d", r"codex-", r"chatgpt-"),
)
