"""The fixed text of the generated pages: method summaries and the pages' paragraphs. What
varies with the code (backend ids, versions, capabilities) comes from the registry."""

from __future__ import annotations

from ...backends.registry import SPECS
from .normalise import FIXED_DURATION_MS, FIXED_MS, FIXED_SECONDS, HOME_DIR, PROJECT_DIR

__all__ = [
    "BACKENDS_COLUMNS",
    "BACKENDS_INTRO",
    "CONTROL_COLUMNS",
    "CONTROL_INTRO",
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
    "- **images** — image inputs (`image`, `localImage`) reach the model; *no*: a turn",
    "  with one is refused (`-32602`, naming the item type) before it starts. *files and",
    "  data: URLs*: `localImage` and `data:` URLs do, an http(s) URL is refused",
    "  (`capabilities.imageUrls`: false).",
]

CONTROL_INTRO = [
    "How each backend mode takes `turn/start`'s per-turn overrides and the requests that act",
    "on a conversation (`initialize` reports the same per mode: `capabilities.overrides`,",
    "`outputSchema`, `steer`, `fork`, `compact`, `injectItems`). Image input is the",
    "matrix's **images** column.",
]

CONTROL_COLUMNS = [
    "What the columns mean:",
    "",
    "- **`model` … `cwd`** — how the override reaches the CLI. *native*: applied to the",
    "  running CLI (or at its next per-turn start) without a restart; *restart*: the CLI is",
    "  reopened, resuming its conversation, before the turn; *warning*: not applied — a",
    "  `warning` notification names the field and the turn runs with the thread's settings.",
    "  An applied override sticks for the thread's later turns. A model name of another",
    "  provider (a Codex `gpt-…` on a claude thread) is never passed on: the backend's",
    "  default model is used and a `warning` says so.",
    "- **`outputSchema`** — *yes*: the turn's final message is constrained to the schema;",
    "  *warning*: it is not, and a `warning` says so.",
    "- **steer** — `turn/steer` adds input to the running turn; *no*: it is refused (send",
    "  the input with the next `turn/start`).",
    "- **fork** — `thread/fork` copies the CLI's conversation into a new thread; *no*: a",
    "  thread that has talked to its CLI cannot be forked (one that has not can).",
    "- **compact** — `thread/compact/start` compacts the CLI's context; *no*: refused.",
    "- **injectItems** — how `thread/inject_items` reaches the agent. *native*: put into",
    "  the CLI's own context; *transcript*: a transcript block at the head of the next",
    "  turn's prompt, sent once.",
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
    "thread/unsubscribe": "Stop receiving a thread's notifications on this connection "
    "(`unsubscribed`; `notSubscribed` if it was not; `notLoaded`). The thread stays loaded "
    "and its turns go on; `thread/start`, `thread/resume` and `thread/fork` subscribe. With "
    "several connections (`--listen`) it also stops the thread's server requests coming "
    "here. A thread no connection follows is unloaded after `THREADLINE_UNLOAD_AFTER` "
    "seconds (30 min) without a running turn (`thread/closed`).",
    "turn/start": "Start a turn on a loaded thread. Answered at once with `status: "
    "inProgress`; the turn is then reported by notifications and ends with exactly one "
    "`turn/completed`. `input` holds `text`, `image` (an http(s) or base64 data URL) and "
    "`localImage` (a path, relative to the thread's cwd) items; an image on a backend mode "
    "without `images`, a missing file or a non-image is refused (`-32602`) before the turn "
    "starts. The overrides `model`, `effort`, `summary`, `approvalPolicy`, `sandboxPolicy` "
    "and `cwd` stick for later turns (also after a restart); `outputSchema` constrains this "
    "turn's final message only. Each reaches the CLI as the mode's "
    "`capabilities.overrides` says (`native`, `restart`); one it cannot apply, and a model "
    "name of another provider, is not applied and a `warning` names it. A second "
    "`turn/start` while a turn runs is refused (use `turn/steer`).",
    "turn/steer": "Add input to the running turn (`expectedTurnId` must be its id; "
    "`-32600` when another turn, or none, runs). The input reaches the agent within that "
    "turn as a new `userMessage` item, on backend modes whose capabilities say `steer`; "
    "elsewhere the request is refused naming the backend and nothing changes.",
    "thread/fork": "A new thread with the source's history (the CLI's conversation is "
    "copied where the mode's capabilities say `fork`; a thread with no conversation yet "
    "forks anywhere). By `threadId` only (`path` is refused); `lastTurnId`, when given, "
    "must be the source's last turn. The source is left as it is and must be idle; the "
    "settings given override the source's. `thread/started` follows; the result's "
    "`thread.forkedFromId` names the source.",
    "thread/unarchive": "Mark an archived thread active again (listed by `thread/list`, "
    "resumable). `thread/unarchived` follows when it was archived.",
    "thread/delete": "Unload the thread (stopping its CLI) and remove threadline's record "
    "and log of it; `thread/deleted` follows. The CLI's own session files are removed only "
    "with `deleteBackendSession: true` (a `warning` says when the backend cannot).",
    "thread/name/set": "Name the thread (trimmed; empty clears it), loaded or not; "
    "`thread/name/updated` follows.",
    "thread/metadata/update": "Update the thread's `gitInfo` (`branch`, `sha`, "
    "`originUrl`): a field left out stays, `null` clears it, a string replaces it.",
    "thread/turns/list": "The thread's turns from threadline's store (also after a "
    "restart, loaded or not), newest first unless `sortDirection: asc`; paged with `limit` "
    "and `cursor` (`nextCursor`, `backwardsCursor`). `itemsView` `summary` (the default) "
    "keeps each turn's final agent message, `full` every item, `notLoaded` none.",
    "thread/items/list": "The thread's items (or one turn's, `turnId`) from threadline's "
    "store with their `turnId`, oldest first unless `sortDirection: desc`; paged like "
    "`thread/turns/list`, or from an `{type: item, itemId}` anchor within a turn.",
    "thread/inject_items": "Put earlier conversation (Responses API items: user and "
    "assistant `message`s, tool calls and outputs) into the thread's context before its "
    "next turn. Natively where the mode's `capabilities.injectItems` is `native`; "
    "otherwise (`transcript`) as a transcript block at the head of the next turn's prompt, "
    "sent once. Stored with the thread, and copied by `thread/fork`.",
    "thread/compact/start": "Compact the CLI's conversation, on backend modes whose "
    "capabilities say `compact` (elsewhere refused naming the backend). Answered `{}`; the "
    "compaction then runs as a turn of its own: `turn/started`, a `contextCompaction` item, "
    "`thread/compacted`, `turn/completed`.",
    "turn/interrupt": "Stop the running turn; it ends with `turn/completed` `interrupted` (a "
    "pending approval is withdrawn and its tool never runs). Interrupting a turn that already "
    "finished is a harmless `{}`.",
    "turn/cancel": "threadline's alias of `turn/interrupt`: same params, same effect.",
    "model/list": "The models each backend offers (`modelProvider` filters to one backend).",
    "mailbox/send": "Send mail to a thread's address (`<thread id>@threadline.local` or an "
    "alias): from the thread `threadId`, or from the client (`client@threadline.local`) when "
    "it is left out; `inReplyTo` answers a message of `threadId`'s mailbox, threaded. "
    "Delivered atomically into the recipient's Maildir (see mailbox.md).",
    "mailbox/list": "The messages in a thread's mailbox, oldest first, without bodies "
    "(`unreadOnly` for the unread ones).",
    "mailbox/read": "One message of a thread's mailbox, with its body (it stays unread).",
    "mailbox/markRead": "Mark a message of a thread's mailbox read.",
    "mailbox/messageReceived": "Mail arrived for a loaded thread (from this server or another "
    "sharing its state directory); to the thread's followers.",
    "thread/started": "A thread was created (sent after the `thread/start` response).",
    "thread/status/changed": "The thread's status: `idle`, `active` (with `activeFlags`: "
    "`waitingOnApproval`, `waitingOnUserInput`) or `notLoaded`.",
    "thread/archived": "A thread was archived.",
    "thread/unarchived": "A thread was unarchived (`thread/unarchive`).",
    "thread/deleted": "A thread was deleted (`thread/delete`).",
    "thread/name/updated": "A thread's name changed (`thread/name/set`); `threadName` is "
    "absent when it was cleared.",
    "thread/compacted": "Codex's older notice that the thread's context was compacted (sent "
    "in a compaction turn, after its `contextCompaction` item completed).",
    "thread/closed": "A thread was unloaded because no connection followed it for "
    "`THREADLINE_UNLOAD_AFTER` seconds (30 min) with no turn running; sent to every "
    "connection, subscribed or not. `thread/resume` loads it again.",
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
    "item/tool/call": "The agent calls a client-defined tool (`thread/start.dynamicTools`). "
    "Answer `{contentItems, success}`; an error response, a malformed answer, no answer "
    "within `config.toolCallTimeoutMs` (default 300 s) or a client that went away is a "
    "failed call the model reads.",
    "item/tool/requestApproval": "threadline extension: may the agent use this tool (neither "
    "a command nor a file change)? Answer `{decision}`.",
}
