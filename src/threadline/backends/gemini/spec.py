"""What the gemini backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="gemini",
    display_name="Gemini CLI",
    capabilities={
        "acp": mode_capabilities(
            "one `gemini --acp` per working directory shared by its threads (ACP over stdio);"
            " resume with `session/load`",
            "bootstrap text block prepended to the first prompt",
            # (ACP `image` blocks: its initialize offers promptCapabilities.image.)
            images=True,
            image_urls=False,  # (an ACP image block carries the data: no http(s) URL)
            # model: session/set_model; approvalPolicy: session/set_mode default|yolo. No
            # effort option, no session/fork, no compaction command over ACP (0.61.0).
            overrides={"model": "native"},
        ),
        "headless": mode_capabilities(
            ("`gemini -p -o stream-json` spawned per turn, `--resume <session>` from the 2nd turn"),
            "bootstrap text prepended to the first prompt",
            # Per turn: approvals by policy only, a turn is stopped by killing the process.
            approvals=False,
            interrupt=False,
            reasoning=False,
            images=True,  # `@<path>` in the prompt (a data: URL image through a temporary file)
            image_urls=False,  # (files only: no http(s) URL)
            overrides={"model": "native"},  # `-m` at the next spawn
        ),
        "tui": mode_capabilities(
            "the interactive `gemini` in a tmux session named after the thread (`tmux -L "
            "threadline-<pid> attach -t <thread>`); prompts pasted, tool calls from its hooks "
            "(a blocking `BeforeTool` hook is the approval gate, under `--approval-mode "
            "yolo`), text from its chat record; resume with `--resume`",
            "bootstrap text prepended to the first prompt",
            # Whole messages and thoughts, each as its model response ends; pasted text only.
            deltas=False,
            image_urls=False,
        ),
    },
    npm=NpmCli("gemini", "@google/gemini-cli", "0.61.0"),
    login_fix="set GEMINI_API_KEY (or run `gemini` once to sign in with Google)",
    credential_files=("~/.gemini/oauth_creds.json",),
    credentials=(
        ("GEMINI_API_KEY", "GEMINI_API_KEY set"),
        ("GOOGLE_API_KEY", "GOOGLE_API_KEY set"),
    ),
    no_credentials="no GEMINI_API_KEY (a logged-in CLI may still work)",
    model_patterns=(r"gemini-", r"gemma-"),
    models=(
        ("default", "default", "Gemini CLI's automatic model routing"),
        ("gemini-2.5-pro", "gemini-2.5-pro", "passed to gemini -m"),
        ("gemini-2.5-flash", "gemini-2.5-flash", "passed to gemini -m"),
    ),
)
