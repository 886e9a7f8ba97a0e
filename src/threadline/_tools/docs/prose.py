"""The fixed text of the generated pages: method summaries and the pages' paragraphs. What
varies with the code (backend ids, versions, capabilities) comes from the registry."""

from __future__ import annotations

from ...backends.registry import SPECS
from .normalise import FIXED_DURATION_MS, FIXED_MS, FIXED_SECONDS, HOME_DIR, PROJECT_DIR

__all__ = [
    "BACKENDS_COLUMNS",
    "BACKENDS_INTRO",
    "ERRORS_INTRO",
    "INVOCATION_INTRO",
    "SERVER_REQUESTS_INTRO",
    "TURN_INTRO",
    "TYPES_INTRO",
    "VERSIONS_INTRO",
    "method_summaries",
    "protocol_intro",
]


def method_summaries() -> dict[str, str]:
    """method → what it does, for every method, notification and server request."""
    backends = ", ".join(f"`{backend_id}`" for backend_id in SPECS)
    thread_start = (
        f"Create a thread on a backend (`modelProvider`: {backends}; default `AGENT_BACKEND`) "
        "in `cwd` (absolute, an existing directory). Backend options go in `config`. Answered "
        "at once; `thread/started` follows."
    )
    return {**_SUMMARIES, "thread/start": thread_start}


def protocol_intro(version: str) -> list[str]:
    return [
        "# Protocol reference",
        "",
        f"threadline {version} speaks newline-delimited JSON-RPC 2.0 on stdin/stdout,",
        "wire-compatible with the core of the Codex app-server v2 protocol (differences and",
        "additions: [protocol-notes.md](protocol-notes.md)). This page is generated from the",
        "JSON Schemas in `schemas/` (`threadline.schema.json`, draft 2020-12, and",
        "`methods.json`) — the types a client can validate against.",
        "",
        "- One JSON message per line, UTF-8. Every example below is one line too, exactly as",
        "  it goes over the wire.",
        '- Requests may omit `"jsonrpc": "2.0"`; every message threadline writes carries it.',
        "  Ids are strings or integers. Unknown fields are ignored.",
        "- `initialize` first. Requests are answered in any order (each runs in its own task);",
        "  match responses by id.",
        "- Notifications carry `emittedAtMs` (server clock, ms) next to `params`.",
        "- Server→client requests (approvals, questions) must be answered with a response",
        "  carrying the same id; see [approvals.md](approvals.md).",
        "",
        "The examples were captured from a scripted session against the real server with the",
        "offline `mock` backend (its server was started with only that backend, so",
        "`initialize` lists just `mock`), then normalized: UUIDs are replaced by placeholders",
        "numbered in order of appearance (still valid UUIDs), times by 2026-01-01T00:00:00Z",
        f"(`{FIXED_SECONDS}` s, `{FIXED_MS}` ms), durations by `{FIXED_DURATION_MS}` ms,",
        f"the project directory by `{PROJECT_DIR}` (so a captured `thread/start` runs as shown)",
        f"and the state directory by `{HOME_DIR}`.",
        "Examples the mock backend cannot produce are synthesized from the schema and marked so.",
    ]


TURN_INTRO = [
    "The first turn of the captured session (→ client to server, ← server to client):",
    "reasoning, a plan, a command, a file change, another tool and a question, each",
    "approval answered by the client, then the final answer. Its prompt:",
]

SERVER_REQUESTS_INTRO = [
    "Requests threadline sends to the client. Each must be answered (a response with the",
    "same id); until then the thread's status is `active` with `waitingOnApproval` or",
    "`waitingOnUserInput`. An error response, a malformed answer, a timeout or a client",
    "that went away counts as `decline`. See [approvals.md](approvals.md).",
]

ERRORS_INTRO = [
    "Errors are JSON-RPC error responses (`JSONRPCError`); the server keeps serving after",
    "every one of them. Codes: `-32700` unparsable line (id `null`), `-32600` invalid",
    "request or state (not initialized, unknown thread, a turn already running, ...),",
    "`-32601` unknown method, `-32602` invalid params (the message names the field),",
    "`-32603` internal error. A turn that fails is not an error response: `turn/start`",
    "succeeded, and the failure arrives as an `error` notification and a `failed`",
    "`turn/completed`.",
]

TYPES_INTRO = [
    "Types shared by the methods above, once each. A union (`ThreadItem`, `UserInput`,",
    "...) is an object whose discriminator field (`type`) selects the variant.",
]

BACKENDS_INTRO = [
    "# Backends",
    "",
    "Generated from what each backend's code reports (`Backend.modes`, `default_mode` and",
    "`capabilities(mode)`): the same data a client gets at runtime in the `initialize`",
    "result (`backends[].capabilities`, per mode) and that `threadline doctor` prints.",
    "Pick a backend with `thread/start.modelProvider` and a mode with",
    "`thread/start.config.mode` (omitted: the default mode). See",
    "[configuration.md](configuration.md) for options and credentials and",
    "[approvals.md](approvals.md) for how approvals reach the client.",
]

BACKENDS_COLUMNS = [
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
]

INVOCATION_INTRO = [
    "How threadline runs each CLI, and how a thread's role (`baseInstructions` /",
    "`developerInstructions` on `thread/start`) reaches the agent — once per thread, never",
    "repeated on resume.",
]

VERSIONS_INTRO = [
    "Each CLI comes from npm. The tests run against the pinned version",
    "(`scripts/install-clis` installs it into `.tools/`) and have passed on the oldest",
    "tested one too; `threadline doctor` and `initialize` flag an installed CLI older than",
    "that. `scripts/test-latest` runs the same real-CLI tests against the newest release of",
    "each CLI (installed into `.tools-latest/`).",
]

ACP_AGENTS_INTRO = [
    "The `acp` backend runs any agent that speaks the Agent Client Protocol over stdio:",
    '`thread/start` with `modelProvider: "acp"` and `config.command` (the agent and its',
    "arguments, as a list) and optionally `config.env` (variables set over threadline's",
    "environment), or, for every thread by default, `AGENT_BACKEND=acp` with",
    "`BACKEND_CLI_PATH` (the agent) and `BACKEND_CLI_ARGS` (its arguments, split as a shell",
    "would). Resume (`session/load`) and images are used when the agent's `initialize`",
    "answer offers them; otherwise a resumed thread's turns fail saying so, and images are",
    "left out with a warning. Agents with quirks of their own run better on their own",
    "backend (the note says what it adds).",
]

_SUMMARIES = {
    "initialize": "The handshake; the first request on every connection (anything before it "
    "is answered `-32600 Not initialized`, a second one `-32600 Already initialized`). The "
    "result adds threadline's `serverInfo` and `backends[]`: availability, version, path, "
    "modes and capabilities per mode of every backend.",
    "thread/resume": "Load a stored thread (e.g. after a restart) and continue the CLI's own "
    "conversation; from the thread's original `cwd` only. The result carries its turns unless "
    "`excludeTurns`. On a loaded thread it only updates `approvalPolicy`.",
    "thread/list": "Stored and loaded threads, newest first (`sortKey`, `sortDirection`), "
    "filtered by `archived`, `cwd`, `modelProviders`, `searchTerm`; paged with `limit` and "
    "`cursor` (`nextCursor`).",
    "thread/read": "One thread, loaded or not; `includeTurns` adds its turns and their items "
    "from the thread's log.",
    "thread/archive": "Stop the thread's CLI, unload it and mark it archived (hidden from "
    "`thread/list` unless `archived: true`; cannot be resumed). `thread/archived` follows.",
    "thread/loaded/list": "The ids of the threads loaded in this server process.",
    "turn/start": "Start a turn on a loaded thread. Answered at once with `status: "
    "inProgress`; the turn is then reported by notifications and ends with exactly one "
    "`turn/completed`. `approvalPolicy` and `model` given here stick for later turns. A "
    "second `turn/start` while one runs is refused.",
    "turn/interrupt": "Stop the running turn; it ends with `turn/completed` `interrupted` (a "
    "pending approval is withdrawn and its tool never runs). Interrupting a turn that already "
    "finished is a harmless `{}`.",
    "turn/cancel": "threadline's alias of `turn/interrupt`: same params, same effect.",
    "model/list": "The models each backend offers (`modelProvider` filters to one backend).",
    "thread/started": "A thread was created (sent after the `thread/start` response).",
    "thread/status/changed": "The thread's status: `idle`, `active` (with `activeFlags`: "
    "`waitingOnApproval`, `waitingOnUserInput`) or `notLoaded`.",
    "thread/archived": "A thread was archived.",
    "thread/closed": "Codex's notice that a thread was unloaded; in the schema for Codex "
    "clients, not sent by threadline today.",
    "turn/started": "A turn began (after the `turn/start` response).",
    "turn/completed": "The turn ended: `completed`, `interrupted` or `failed` (with `error`). "
    "Exactly one per turn, after every item was completed. A completed turn carries its final "
    "agent message as a summary (`itemsView: summary`).",
    "item/started": "An item began: the `userMessage` first in every turn, then agent "
    "messages, reasoning, commands, file changes, tool calls.",
    "item/completed": "An item's final state. Every `item/started` gets exactly one, also "
    "when the turn is interrupted or fails.",
    "item/agentMessage/delta": "Agent text as it is written; the deltas of an item "
    "concatenate to its completed `text`.",
    "item/plan/delta": "Text of a `plan` item as it is written.",
    "item/reasoning/summaryTextDelta": "Reasoning summary text (section `summaryIndex`).",
    "item/reasoning/summaryPartAdded": "A new reasoning summary section begins.",
    "item/reasoning/textDelta": "Raw reasoning text (part `contentIndex`).",
    "item/commandExecution/outputDelta": "Output of a running command.",
    "item/fileChange/outputDelta": "Output of a file change being applied.",
    "item/mcpToolCall/progress": "Progress message of a running MCP tool call.",
    "turn/plan/updated": "The agent's plan (its todo list) changed.",
    "turn/diff/updated": "The turn's aggregated diff changed.",
    "thread/tokenUsage/updated": "Token usage of the last request and the thread's total.",
    "error": "The turn failed (sent before its `turn/completed`); `willRetry` is always "
    "`false`. The thread stays usable.",
    "warning": "Something the client should know that does not end the turn.",
    "serverRequest/resolved": "A server→client request was answered or withdrawn "
    "(timeout, interrupt, turn end).",
    "item/approval/autoDecided": "threadline extension: an approval decided without asking "
    "the client — `reason` `policy` (`approvalPolicy: never`), `rule` (an approval rule or "
    "an earlier `acceptForSession`; `rule` names it), `timeout` or `noClient`.",
    "item/commandExecution/requestApproval": "May the agent run this command? Answer `{decision}`.",
    "item/fileChange/requestApproval": "May the agent apply this file change (announced by "
    "its `fileChange` item)? Answer `{decision}`.",
    "item/tool/requestUserInput": "The agent asks the user questions. Answer `{answers: "
    "{<question id>: {answers: [...]}}}`; anything else leaves them unanswered.",
    "item/tool/requestApproval": "threadline extension: may the agent use this tool (neither "
    "a command nor a file change)? Answer `{decision}`.",
}
