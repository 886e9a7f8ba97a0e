"""What the qwen backend is, without loading it (no trio): read by the registry."""

from __future__ import annotations

from ..spec import BackendSpec, NpmCli, mode_capabilities

__all__ = ["SPEC"]

SPEC = BackendSpec(
    id="qwen",
    display_name="Qwen Code",
    capabilities={
        "acp": mode_capabilities(
            "one `qwen --acp` per working directory and model shared by its threads (ACP over"
            " stdio); resume with `session/load`",
            "bootstrap text block prepended to the first prompt",
            # (ACP `image` blocks; the model must take images: qwen's
            # model.generationConfig.modalities, else it sends a text placeholder.)
            images=True,
            image_urls=False,  # (an ACP image block carries the data: no http(s) URL)
            # model: session/set_model when qwen lists it, else a new `qwen --acp --model`
            # (restart); approvalPolicy: session/set_mode default|yolo.
            # effort: qwen's `/effort <tier>` command before the turn (low|medium|high|xhigh).
            overrides={"model": "restart", "effort": "native"},
            # `/compress`; input added mid-turn goes in at qwen's next tool round
            # (craft/drainMidTurnQueue) or as a follow-up prompt of the same turn.
            compact=True,
            steer=True,
        ),
        "tui": mode_capabilities(
            "the interactive `qwen` in a tmux session named after the thread (`tmux -L "
            "threadline-<pid> attach -t <thread>`); prompts through its `--input-file`, items "
            "from its `--json-file` stream-json and its HTTP hooks; approvals answered in the "
            "input file; resume with `--resume`",
            "bootstrap text prepended to the first prompt",
            # Text prompts only; a new model restarts qwen with `--resume`.
            image_urls=False,
        ),
    },
    npm=NpmCli("qwen", "@qwen-code/qwen-code", "0.24.4"),
    login_fix=(
        "set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible provider), or "
        "configure `security.auth` in ~/.qwen/settings.json"
    ),
    credentials=(("OPENAI_API_KEY", "OPENAI_API_KEY set"),),
    # Qwen Code takes any OpenAI-compatible model name: no patterns.
    models=(
        (
            "default",
            "Qwen Code default",
            "The model qwen is configured with (OPENAI_MODEL or its settings); any other name is "
            "passed to qwen --model",
        ),
    ),
)
