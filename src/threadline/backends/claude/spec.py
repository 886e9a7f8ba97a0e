"""What the claude backend is, without loading it (no trio): read by the registry.

The control surface as measured on claude 2.1.332 (tests/e2e/test_claude_control.py):
- stream mode applies a model live with the `set_model` control request and an effort with
  `apply_flag_settings {effortLevel}` (the next model request carries both); the approval
  policy is applied by threadline's approval router to every `can_use_tool`, so a change
  needs nothing of the CLI; a new cwd restarts the CLI (`--resume` works from another
  directory; its `set_cwd` request moves the session but not the Bash tool's shell);
- print mode reads all of them at its next spawn, and gives `--json-schema` per turn;
- a user message written while a turn runs joins it at the next model call (after the
  current tool calls), else it runs right after as a turn of its own: threadline reports the
  two as one turn (steer);
- `--resume <id> --fork-session` forks, `/compact` compacts (`compact_boundary`);
- images go as Anthropic image blocks (base64 or url source) in the stream-json user message,
  in both modes (print mode writes one stream-json message too);
- Codex's `sandboxPolicy` has no honest counterpart (claude's sandbox is a settings file
  feature with its own rules) and a reasoning `summary` has none either."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities

__all__ = ["EFFORTS", "SPEC"]

#: The efforts the CLI takes (`--effort`, `effortLevel`); Codex's lower ones map to `low`.
EFFORTS = ("low", "medium", "high", "xhigh", "max")
#: What `model/list` offers: the ones `turn/start.effort` can name (Codex's; no `max`).
_OFFERED = EFFORTS[:-1]
_ROLE = "`--append-system-prompt` plus one bootstrap message on the first turn"

SPEC = BackendSpec(
    id="claude",
    display_name="Claude Code",
    capabilities={
        "stream": mode_capabilities(
            (
                "one live `claude -p --input-format stream-json --output-format stream-json` "
                "per thread; approvals over its control protocol (`--permission-prompt-tool "
                "stdio`); resume with `--resume`"
            ),
            _ROLE,
            images=True,
            overrides={"model": "native", "effort": "native", "cwd": "restart"},
            steer=True,
            fork=True,
            compact=True,
        ),
        "print": mode_capabilities(
            (
                "`claude -p --input-format stream-json --output-format stream-json` spawned "
                "per turn, `--resume <session>` from the 2nd turn; tools limited by "
                "`--allowedTools`"
            ),
            _ROLE,
            # A process per turn: approvals by policy only, a turn is stopped by killing it.
            approvals=False,
            interrupt=False,
            images=True,
            overrides={"model": "native", "effort": "native", "cwd": "native"},
            output_schema=True,
            fork=True,
            compact=True,
        ),
        "tui": mode_capabilities(
            (
                "the interactive `claude` in a tmux session named after the thread "
                "(`tmux -L threadline-<pid> attach -t <thread>`); prompts pasted, items "
                "from its HTTP hooks and session transcript; approvals through its "
                "`PermissionRequest` hook; resume with `--resume`"
            ),
            _ROLE,
            # Whole messages from the transcript (one delta each); pasted text only.
            image_urls=False,
            overrides={"model": "restart", "effort": "restart", "cwd": "restart"},
        ),
    },
    npm=NpmCli("claude", "@anthropic-ai/claude-code", "2.1.332", oldest_tested="2.1.197"),
    login_fix="set ANTHROPIC_API_KEY, or run `claude login`",
    credential_files=("$CLAUDE_CONFIG_DIR/.credentials.json", "~/.claude/.credentials.json"),
    credentials=(
        ("ANTHROPIC_API_KEY", "ANTHROPIC_API_KEY set"),
        ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN set"),
    ),
    no_credentials="no API key in the environment (a logged-in CLI may still work)",
    # The aliases the CLI resolves itself (its `initialize` lists them with the models they
    # stand for); `default` is the CLI's configured default.
    models=(
        ("default", "Claude Code default", "The CLI's configured default model"),
        ("opus", "Claude Opus", "Alias resolved by the claude CLI"),
        ("fable", "Claude Fable", "Alias resolved by the claude CLI"),
        ("sonnet", "Claude Sonnet", "Alias resolved by the claude CLI"),
        ("haiku", "Claude Haiku", "Alias resolved by the claude CLI"),
        ("opusplan", "Opus to plan, Sonnet to act", "Alias resolved by the claude CLI"),
    ),
    efforts=tuple((e, f"{e} effort") for e in _OFFERED),
    default_effort="medium",
    model_patterns=(
        r"claude",  # claude-opus-5-5, claude-sonnet-4-5@20250929 (Vertex), ...
        r"(best|opus|sonnet|haiku|fable|opusplan)(\[1m\])?$",
        # Bedrock ids and inference profiles, ARNs: anthropic.claude-…, us.anthropic.claude-…
        r"([a-z]{2,6}\.)?anthropic\.",
        r"arn:aws[a-z-]*:bedrock:",
    ),
)
