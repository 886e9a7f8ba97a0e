/**
 * A client for threadline: spawns the server and speaks newline-delimited JSON-RPC over its
 * stdio, or connects to a running one over WebSocket (`ws://`, `unix://`); types every request,
 * notification and server request from the generated protocol.
 */
import { ThreadlineExitedError, ThreadlineTimeoutError, JsonRpcError, type ExitInfo } from "./errors.js";
import { StdioTransport } from "./stdio.js";
import type { Diagnostic, Transport } from "./transport.js";
import { openWebSocket } from "./websocket.js";
import {
  SERVER_NOTIFICATION_METHODS,
  SERVER_REQUEST_METHODS,
  type ClientRequests,
  type ClientRequestMethod,
  type DynamicToolCallParams,
  type DynamicToolCallResponse,
  type DynamicToolSpec,
  type ImageInput,
  type InitializeParams,
  type InitializeResponse,
  type ItemCompletedNotification,
  type LocalImageInput,
  type RequestId,
  type ServerNotificationMethod,
  type ServerNotifications,
  type ServerRequestMethod,
  type ServerRequests,
  type TextInput,
  type ThreadForkParams,
  type ThreadItemsListParams,
  type ThreadMetadataGitInfoUpdate,
  type ThreadTurnsListParams,
  type Turn,
  type TurnCompletedNotification,
  type TurnStartParams,
  type TurnStartResponse,
  type TurnSteerResponse,
} from "./generated/protocol.js";

// ---- derived protocol types --------------------------------------------------------------------

export type RequestParams<M extends ClientRequestMethod> = ClientRequests[M]["params"];
export type RequestResult<M extends ClientRequestMethod> = ClientRequests[M]["result"];

/** One item of a turn's input: `text`, `image` (URL or data URL), `localImage` (a path on the
 * server's machine), `skill` or `mention`. */
export type UserInput = TurnStartParams["input"][number];

/** A turn's input: text, or a list of text and input items (see {@link imageInput}). */
export type Prompt = string | ReadonlyArray<string | UserInput>;

/** `turn/start` without `threadId` and `input`: the per-turn overrides (`model`, `effort`,
 * `summary`, `approvalPolicy`, `sandboxPolicy`, `cwd`, `outputSchema`). Each sticks for the
 * thread's later turns except `outputSchema`; a backend that cannot apply one sends a `warning`. */
export type TurnOverrides = Omit<TurnStartParams, "threadId" | "input">;

/** Any item of a turn (`userMessage`, `agentMessage`, `commandExecution`, `fileChange`, …),
 * discriminated by `type`. */
export type ThreadItem = ItemCompletedNotification["item"];

/** Any server notification, discriminated by `method`. */
export type Notification = {
  [M in ServerNotificationMethod]: { method: M; params: ServerNotifications[M] };
}[ServerNotificationMethod];

/** Any server → client request, discriminated by `method`. */
export type IncomingServerRequest = {
  [M in ServerRequestMethod]: { id: RequestId; method: M; params: ServerRequests[M]["params"] };
}[ServerRequestMethod];

/** Any valid answer to a server request. */
export type ServerRequestResult = ServerRequests[ServerRequestMethod]["result"];

/** Params of any server request. */
export type ServerRequestParams = ServerRequests[ServerRequestMethod]["params"];

/** Passed to server request handlers. */
export interface ServerRequestContext {
  /** The JSON-RPC id of the request. */
  id: RequestId;
  /** The whole request, discriminated by `method`: `switch (context.request.method)` narrows
   * `context.request.params` to that method's params type. */
  request: IncomingServerRequest;
  /** Aborted when threadline withdraws the request (turn interrupted, approval timed out, …). */
  signal: AbortSignal;
}

/** Answers server requests (approvals, questions) that have no per-method handler. Throwing,
 * or no handler at all, answers `{"decision": "decline"}` — threadline also treats anything
 * unexpected as a decline. For params typed exactly per method, use
 * {@link ThreadlineClient.handle} or narrow on `context.request.method`. */
export type ServerRequestHandler = (
  method: ServerRequestMethod,
  params: ServerRequestParams,
  context: ServerRequestContext,
) => Promise<ServerRequestResult> | ServerRequestResult;

/** A handler for one server request method (see {@link ThreadlineClient.handle}). */
export type MethodHandler<M extends ServerRequestMethod> = (
  params: ServerRequests[M]["params"],
  context: ServerRequestContext,
) => Promise<ServerRequests[M]["result"]> | ServerRequests[M]["result"];

/** What a tool handler returns: text, output items, or a whole `DynamicToolCallResponse`. */
export type ToolResult = string | DynamicToolCallResponse["contentItems"] | DynamicToolCallResponse;

/** A client-defined tool: offered to the agent with {@link ThreadlineClient.registerTools}
 * (its spec goes in `thread/start.dynamicTools`); the agent's calls (`item/tool/call`) are
 * answered by `handler`. A handler that throws answers a failed call with the error's text. */
export interface ClientTool {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (an object schema; default `{type: "object"}`). */
  inputSchema?: Record<string, unknown>;
  /** Tools sharing a namespace are offered as one Codex `namespace` spec. */
  namespace?: string;
  handler: (args: unknown, context: ServerRequestContext) => Promise<ToolResult> | ToolResult;
}

export type { Diagnostic, Transport, TransportEvents } from "./transport.js";

export interface ThreadlineClientOptions {
  /** Executable to run. Default: the first word of `$THREADLINE_COMMAND`, else `threadline`. */
  command?: string;
  /** Arguments. Default: the remaining words of `$THREADLINE_COMMAND`, else none. When
   * `command` is given, `args` defaults to none. */
  args?: readonly string[];
  /** Variables for the child, laid over this process's environment (a value of `undefined`
   * removes a variable). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Start from an empty environment instead of this process's (default: false). */
  replaceEnv?: boolean;
  /** Working directory of the child. */
  cwd?: string;
  /** Answers server requests that have no per-method handler (see {@link ThreadlineClient.handle}). */
  onServerRequest?: ServerRequestHandler;
  /** How much of stderr (characters) {@link ThreadlineClient.stderr} keeps. Default 64 KiB. */
  stderrLimit?: number;
  /** Carry the session over this transport instead of spawning (`command`, `args`, `env`,
   * `replaceEnv` and `cwd` are then ignored). {@link ThreadlineClient.connect} makes one. */
  transport?: Transport;
}

/** Options of {@link ThreadlineClient.connect}. */
export interface ConnectOptions {
  /** Sent as `Authorization: Bearer <token>` with the upgrade (servers started with
   * `--ws-auth`). */
  token?: string;
  /** Give up connecting after this many ms. Default 10000. */
  timeoutMs?: number;
  /** Answers server requests that have no per-method handler (see {@link ThreadlineClient.handle}). */
  onServerRequest?: ServerRequestHandler;
}

export interface RequestOptions {
  /** Reject with {@link ThreadlineTimeoutError} after this many ms (the request stays sent). */
  timeoutMs?: number;
  /** Reject with the signal's reason when aborted. */
  signal?: AbortSignal;
}

export interface TurnOptions {
  /** Reject `completed` with {@link ThreadlineTimeoutError} after this many ms. */
  timeoutMs?: number;
}

/** The outcome of a turn: its final state and everything threadline reported about it. */
export interface TurnResult {
  /** The turn from `turn/completed` (`status`: completed | interrupted | failed). */
  turn: Turn;
  /** The `turn/completed` notification's params. */
  completed: TurnCompletedNotification;
  /** The turn's notifications in arrival order (including `turn/completed`). */
  notifications: Notification[];
  /** The server requests (approvals, questions) made during the turn. */
  serverRequests: IncomingServerRequest[];
}

/** A started turn (see {@link ThreadlineClient.startTurn}, {@link ThreadlineClient.compactThread}). */
export interface TurnHandle {
  threadId: string;
  turnId: string;
  /** The turn as it started (`turn/start`'s result, or a compaction's `turn/started`). */
  started: TurnStartResponse;
  /** The turn's notifications so far (grows until the turn completes). */
  readonly notifications: readonly Notification[];
  /** Resolves at the turn's `turn/completed`; rejects if threadline exits first or on timeout. */
  completed: Promise<TurnResult>;
  /** Sends `turn/cancel` for this turn. */
  cancel(): Promise<void>;
  /** Sends `turn/steer`: more input for this turn while it runs. */
  steer(prompt: Prompt): Promise<TurnSteerResponse>;
}

export interface CloseOptions {
  /** How long to wait for a clean exit after closing stdin before SIGTERM (for a connection:
   * for the server's close frame before dropping the connection). Default 5000. */
  timeoutMs?: number;
  /** How long to wait after SIGTERM before SIGKILL. Default 2000. */
  killTimeoutMs?: number;
}

function toolKey(namespace: string | undefined, name: string): string {
  return JSON.stringify([namespace ?? null, name]);
}

/** `[{type: "text", text}]`: the usual `turn/start` input. */
export function textInput(text: string): TextInput[] {
  return [{ type: "text", text }];
}

/** The `input` of `turn/start` / `turn/steer`: each string becomes a `text` item. */
export function toInput(prompt: Prompt): UserInput[] {
  if (typeof prompt === "string") return textInput(prompt);
  return prompt.map((part) => (typeof part === "string" ? { type: "text", text: part } : part));
}

/** An image input: an `http(s)://` or `data:` URL as `image`, anything else as a file path
 * (`localImage`, relative to the thread's cwd on the server). */
export function imageInput(source: string, detail?: string): ImageInput | LocalImageInput {
  const extra = detail === undefined ? {} : { detail };
  if (/^(https?:\/\/|data:)/.test(source)) return { type: "image", url: source, ...extra };
  return { type: "localImage", path: source, ...extra };
}

/** One message of earlier conversation for {@link ThreadlineClient.injectItems}, in the
 * Responses API shape Codex takes. */
export function messageItem(
  role: "user" | "assistant" | "developer",
  text: string,
): Record<string, unknown> {
  const part = role === "assistant" ? "output_text" : "input_text";
  return { type: "message", role, content: [{ type: part, text }] };
}

/** The command and arguments used when none are given: `$THREADLINE_COMMAND` split on
 * whitespace, else `threadline`. */
export function defaultCommand(
  env: Readonly<Record<string, string | undefined>> = process.env,
): { command: string; args: string[] } {
  const words = (env.THREADLINE_COMMAND ?? "").split(/\s+/).filter((w) => w.length > 0);
  const [command, ...args] = words;
  return command === undefined ? { command: "threadline", args: [] } : { command, args };
}

// ---- internals ---------------------------------------------------------------------------------

type Json = Record<string, unknown>;

interface Pending {
  method: string;
  resolve(value: unknown): void;
  reject(error: Error): void;
  cleanup(): void;
}

interface TurnWatch {
  threadId: string;
  turnId: string | undefined;
  /** Notifications of the thread that arrived before the turn id was known. */
  early: Notification[];
  earlyRequests: IncomingServerRequest[];
  notifications: Notification[];
  serverRequests: IncomingServerRequest[];
  /** Set for a turn whose id arrives with its `turn/started` (a compaction). */
  adopt?: (turn: Turn) => void;
  finish(result: TurnResult): void;
  fail(error: Error): void;
}

const NOTIFICATION_SET: ReadonlySet<string> = new Set(SERVER_NOTIFICATION_METHODS);
const SERVER_REQUEST_SET: ReadonlySet<string> = new Set(SERVER_REQUEST_METHODS);
const DECLINE = { decision: "decline" } as const;
const METHOD_NOT_FOUND = -32601;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isRequestId(value: unknown): value is RequestId {
  return typeof value === "string" || (typeof value === "number" && Number.isInteger(value));
}

function idKey(id: RequestId): string {
  return typeof id === "number" ? `n:${id}` : `s:${id}`;
}

/** `params.threadId` and `params.turnId` (or `params.turn.id`) of a message, if present. */
function scopeOf(params: unknown): { threadId?: string; turnId?: string } {
  if (!isObject(params)) return {};
  const scope: { threadId?: string; turnId?: string } = {};
  if (typeof params.threadId === "string") scope.threadId = params.threadId;
  if (typeof params.turnId === "string") scope.turnId = params.turnId;
  else if (isObject(params.turn) && typeof params.turn.id === "string") scope.turnId = params.turn.id;
  return scope;
}

function belongs(watch: TurnWatch, params: unknown): boolean {
  const scope = scopeOf(params);
  if (scope.threadId !== watch.threadId) return false;
  return scope.turnId === undefined || scope.turnId === watch.turnId;
}

// ---- the client --------------------------------------------------------------------------------

/**
 * One JSON-RPC session with threadline: a process it spawned (`new ThreadlineClient(options)`)
 * or a connection to a running server (`await ThreadlineClient.connect(url, options)`).
 *
 * ```ts
 * const client = new ThreadlineClient({ env: { AGENT_BACKEND: "mock" } });
 * await client.initialize();
 * const { thread } = await client.request("thread/start", { modelProvider: "mock", cwd });
 * const result = await client.runTurn({ threadId: thread.id, input: textInput("/text hi") });
 * await client.close();
 * ```
 */
export class ThreadlineClient {
  /** Resolves when the process has exited and its stdout is drained, or the connection has
   * closed (never rejects). */
  readonly exited: Promise<ExitInfo>;
  /** The command line that was run; for a connection, its URL (and no args). */
  readonly command: string;
  readonly args: readonly string[];

  private readonly transport: Transport;
  private nextId = 1;
  private readonly pending = new Map<string, Pending>();
  private readonly listeners = new Map<string, Set<(params: never) => void>>();
  private readonly anyListeners = new Set<(notification: Notification) => void>();
  private readonly stderrListeners = new Set<(text: string) => void>();
  private readonly diagnosticListeners = new Set<(diagnostic: Diagnostic) => void>();
  private readonly methodHandlers = new Map<string, MethodHandler<ServerRequestMethod>>();
  private readonly tools = new Map<string, ClientTool>();
  private readonly openServerRequests = new Map<string, AbortController>();
  private readonly turnWatches = new Set<TurnWatch>();
  private generalHandler: ServerRequestHandler | undefined;
  private stderrTail = "";
  private readonly stderrLimit: number;
  private exitInfo: ExitInfo | undefined;
  private resolveExited!: (info: ExitInfo) => void;

  constructor(options: ThreadlineClientOptions = {}) {
    const fallback = defaultCommand();
    const command = options.command ?? fallback.command;
    const args = options.args ? [...options.args] : options.command ? [] : fallback.args;
    this.transport = options.transport ?? new StdioTransport({ ...options, command, args });
    this.command = this.transport.command;
    this.args = this.transport.args;
    this.generalHandler = options.onServerRequest;
    this.stderrLimit = options.stderrLimit ?? 64 * 1024;
    this.exited = new Promise<ExitInfo>((resolve) => {
      this.resolveExited = resolve;
    });

    this.transport.start({
      message: (text) => this.handleLine(text),
      log: (text) => {
        this.stderrTail = (this.stderrTail + text).slice(-this.stderrLimit);
        for (const listener of this.stderrListeners) this.callListener(() => listener(text));
      },
      diagnostic: (diagnostic) => this.diagnose(diagnostic),
      ended: (info) => this.finish(info),
    });
  }

  /** Connects to a running threadline (`app-server --listen ws://IP:PORT` or `unix://PATH`):
   * a WebSocket upgrade, over TCP or the unix socket, carrying `token` as a bearer token; one
   * JSON-RPC message per text frame. Rejects with `ThreadlineConnectError` when nothing
   * listens there or the server refuses the upgrade (401: missing or wrong token). `close()`
   * ends only this connection; the server and its turns go on. */
  static async connect(url: string, options: ConnectOptions = {}): Promise<ThreadlineClient> {
    const transport = await openWebSocket(url, options);
    const clientOptions: ThreadlineClientOptions = { transport };
    if (options.onServerRequest) clientOptions.onServerRequest = options.onServerRequest;
    return new ThreadlineClient(clientOptions);
  }

  /** The process id (undefined if it could not be started, or for a connection). */
  get pid(): number | undefined {
    return this.transport.pid;
  }

  /** The last `stderrLimit` characters threadline wrote to stderr (logs; never protocol;
   * empty for a connection). */
  get stderr(): string {
    return this.stderrTail;
  }

  /** Set once the process has exited or the connection has closed. */
  get exitStatus(): ExitInfo | undefined {
    return this.exitInfo;
  }

  // ---- requests --------------------------------------------------------------------------------

  /** Sends a request; resolves with its typed result, rejects with {@link JsonRpcError} on an
   * error response, {@link ThreadlineExitedError} if the process exits (or the connection
   * closes) first. */
  request<M extends ClientRequestMethod>(
    method: M,
    params: RequestParams<M>,
    options: RequestOptions = {},
  ): Promise<RequestResult<M>> {
    return this.requestUntyped(method, params, options) as Promise<RequestResult<M>>;
  }

  /** Like {@link request} for any method name; the result is `unknown`. */
  requestUntyped(method: string, params?: unknown, options: RequestOptions = {}): Promise<unknown> {
    if (this.exitInfo) {
      return Promise.reject(new ThreadlineExitedError(`sending ${method}`, this.exitInfo, this.stderrTail));
    }
    if (options.signal?.aborted) return Promise.reject(options.signal.reason);
    const id = this.nextId++;
    const key = idKey(id);
    return new Promise<unknown>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = (): void => {
        this.pending.get(key)?.cleanup();
        reject(options.signal?.reason);
      };
      const entry: Pending = {
        method,
        resolve,
        reject,
        cleanup: () => {
          this.pending.delete(key);
          if (timer) clearTimeout(timer);
          options.signal?.removeEventListener("abort", onAbort);
        },
      };
      this.pending.set(key, entry);
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          entry.cleanup();
          reject(new ThreadlineTimeoutError(method, options.timeoutMs ?? 0));
        }, options.timeoutMs);
      }
      options.signal?.addEventListener("abort", onAbort, { once: true });
      const message: Json = { jsonrpc: "2.0", id, method };
      if (params !== undefined) message.params = params;
      this.write(message);
    });
  }

  /** Sends a client notification (no answer). */
  notify(method: string, params?: unknown): void {
    const message: Json = { jsonrpc: "2.0", method };
    if (params !== undefined) message.params = params;
    this.write(message);
  }

  /** `initialize` (with a default `clientInfo`), then the `initialized` notification. */
  async initialize(params: Partial<InitializeParams> = {}): Promise<InitializeResponse> {
    const result = await this.request("initialize", {
      ...params,
      clientInfo: params.clientInfo ?? { name: "threadline-ts", version: "0.1.0" },
    });
    this.notify("initialized");
    return result;
  }

  // ---- notifications ---------------------------------------------------------------------------

  /** Listens to one notification method; returns a function that removes the listener. */
  on<M extends ServerNotificationMethod>(
    method: M,
    listener: (params: ServerNotifications[M]) => void,
  ): () => void {
    let set = this.listeners.get(method);
    if (!set) {
      set = new Set();
      this.listeners.set(method, set);
    }
    set.add(listener);
    return () => this.off(method, listener);
  }

  off<M extends ServerNotificationMethod>(
    method: M,
    listener: (params: ServerNotifications[M]) => void,
  ): void {
    this.listeners.get(method)?.delete(listener);
  }

  /** Listens to every notification; returns a function that removes the listener. */
  onNotification(listener: (notification: Notification) => void): () => void {
    this.anyListeners.add(listener);
    return () => this.anyListeners.delete(listener);
  }

  /** Resolves with the params of the next `method` notification that satisfies `predicate`. */
  waitFor<M extends ServerNotificationMethod>(
    method: M,
    predicate: (params: ServerNotifications[M]) => boolean = () => true,
    options: { timeoutMs?: number } = {},
  ): Promise<ServerNotifications[M]> {
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        off();
        offExit();
        if (timer) clearTimeout(timer);
      };
      const off = this.on(method, (params) => {
        if (!predicate(params)) return;
        done();
        resolve(params);
      });
      const offExit = this.onExitInternal((info) => {
        done();
        reject(new ThreadlineExitedError(`${method} arrived`, info, this.stderrTail));
      });
      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          done();
          reject(new ThreadlineTimeoutError(`waiting for ${method}`, options.timeoutMs ?? 0));
        }, options.timeoutMs);
      }
    });
  }

  /** stderr text as it arrives (threadline's logs; never parsed). */
  onStderr(listener: (text: string) => void): () => void {
    this.stderrListeners.add(listener);
    return () => this.stderrListeners.delete(listener);
  }

  /** Non-protocol events worth logging (see {@link Diagnostic}). */
  onDiagnostic(listener: (diagnostic: Diagnostic) => void): () => void {
    this.diagnosticListeners.add(listener);
    return () => this.diagnosticListeners.delete(listener);
  }

  // ---- server requests -------------------------------------------------------------------------

  /** Sets (or clears) the general server request handler. */
  setServerRequestHandler(handler: ServerRequestHandler | undefined): void {
    this.generalHandler = handler;
  }

  /** Answers one server request method with `handler` (takes precedence over the general
   * handler); returns a function that removes it. */
  handle<M extends ServerRequestMethod>(method: M, handler: MethodHandler<M>): () => void {
    const stored = handler as unknown as MethodHandler<ServerRequestMethod>;
    this.methodHandlers.set(method, stored);
    return () => {
      if (this.methodHandlers.get(method) === stored) this.methodHandlers.delete(method);
    };
  }

  /** Registers client-defined tools and returns their `dynamicTools` specs for
   * `thread/start`: the agent's calls of them are answered by their handlers. */
  registerTools(tools: readonly ClientTool[]): DynamicToolSpec[] {
    const specs: DynamicToolSpec[] = [];
    const namespaces = new Map<string, DynamicToolSpec[]>();
    for (const tool of tools) {
      this.tools.set(toolKey(tool.namespace, tool.name), tool);
      const spec: DynamicToolSpec = {
        name: tool.name,
        description: tool.description ?? "",
        inputSchema: tool.inputSchema ?? { type: "object" },
      };
      if (tool.namespace === undefined) specs.push(spec);
      else namespaces.set(tool.namespace, [...(namespaces.get(tool.namespace) ?? []), spec]);
    }
    for (const [name, inner] of namespaces) specs.push({ name, type: "namespace", tools: inner });
    return specs;
  }

  private async answerToolCall(
    params: DynamicToolCallParams,
    context: ServerRequestContext,
  ): Promise<DynamicToolCallResponse> {
    const tool = this.tools.get(toolKey(params.namespace ?? undefined, params.tool));
    const failed = (text: string): DynamicToolCallResponse => ({
      contentItems: [{ type: "inputText", text }],
      success: false,
    });
    if (!tool) return failed(`this client has no tool ${JSON.stringify(params.tool)}`);
    try {
      const result = await tool.handler(params.arguments, context);
      if (typeof result === "string") return { contentItems: [{ type: "inputText", text: result }], success: true };
      if (Array.isArray(result)) return { contentItems: result, success: true };
      return result;
    } catch (error) {
      this.diagnose({ kind: "handlerError", method: "item/tool/call", error });
      return failed(`${params.tool} failed: ${error instanceof Error ? error.message : String(error)}`);
    }
  }

  // ---- turns -----------------------------------------------------------------------------------

  /** Sends `turn/start` and returns a handle whose `completed` resolves at `turn/completed`,
   * with the turn's notifications (collection starts before the request is sent). */
  async startTurn(params: TurnStartParams, options: TurnOptions = {}): Promise<TurnHandle> {
    const watch = this.watchTurn(params.threadId, options);
    let started: TurnStartResponse;
    try {
      started = await this.request("turn/start", params);
    } catch (error) {
      this.turnWatches.delete(watch.watch);
      throw error;
    }
    return watch.begin(started.turn);
  }

  /** `thread/compact/start`: the CLI compacts its context in a turn of its own (a
   * `contextCompaction` item). Resolves with that turn's handle once its `turn/started` arrived. */
  async compactThread(threadId: string, options: TurnOptions = {}): Promise<TurnHandle> {
    const watch = this.watchTurn(threadId, options);
    const announced = new Promise<Turn>((resolve, reject) => {
      watch.watch.adopt = resolve;
      watch.watch.fail = ((fail) => (error: Error) => {
        reject(error);
        fail(error);
      })(watch.watch.fail);
    });
    announced.catch(() => undefined);
    try {
      await this.request("thread/compact/start", { threadId });
    } catch (error) {
      this.turnWatches.delete(watch.watch);
      throw error;
    }
    return watch.begin(await announced);
  }

  /** `turn/steer`: more input for the running turn `turnId` (refused when another turn, or
   * none, runs, and on backends whose capabilities say `steer: false`). */
  steerTurn(
    threadId: string,
    turnId: string,
    prompt: Prompt,
    options: RequestOptions = {},
  ): Promise<TurnSteerResponse> {
    const params = { threadId, expectedTurnId: turnId, input: toInput(prompt) };
    return this.request("turn/steer", params, options);
  }

  /** Collects a thread's next turn from now on; `begin(turn)` once its id is known. */
  private watchTurn(
    threadId: string,
    options: TurnOptions,
  ): { watch: TurnWatch; begin: (turn: Turn) => TurnHandle } {
    let finish!: (result: TurnResult) => void;
    let fail!: (error: Error) => void;
    const completed = new Promise<TurnResult>((resolve, reject) => {
      finish = resolve;
      fail = reject;
    });
    // A caller that never awaits `completed` must not get an unhandled rejection.
    completed.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const watch: TurnWatch = {
      threadId,
      turnId: undefined,
      early: [],
      earlyRequests: [],
      notifications: [],
      serverRequests: [],
      finish: (result) => {
        this.turnWatches.delete(watch);
        if (timer) clearTimeout(timer);
        finish(result);
      },
      fail: (error) => {
        this.turnWatches.delete(watch);
        if (timer) clearTimeout(timer);
        fail(error);
      },
    };
    this.turnWatches.add(watch);
    const begin = (turn: Turn): TurnHandle => {
      const turnId = turn.id;
      if (watch.turnId === undefined) this.settleWatch(watch, turnId);
      if (this.turnWatches.has(watch) && options.timeoutMs !== undefined) {
        const ms = options.timeoutMs;
        timer = setTimeout(() => watch.fail(new ThreadlineTimeoutError(`turn ${turnId}`, ms)), ms);
      }
      return {
        threadId,
        turnId,
        started: { turn },
        notifications: watch.notifications,
        completed,
        cancel: async () => {
          await this.request("turn/cancel", { threadId, turnId });
        },
        steer: (prompt) => this.steerTurn(threadId, turnId, prompt),
      };
    };
    return { watch, begin };
  }

  /** The watch's turn id is known: route what arrived before it. */
  private settleWatch(watch: TurnWatch, turnId: string): void {
    watch.turnId = turnId;
    const early = watch.early;
    const earlyRequests = watch.earlyRequests;
    watch.early = [];
    watch.earlyRequests = [];
    for (const n of early) this.routeToWatch(watch, n);
    for (const r of earlyRequests) if (belongs(watch, r.params)) watch.serverRequests.push(r);
  }

  // ---- threads ---------------------------------------------------------------------------------

  /** `thread/fork`: a new thread with this one's history (the source is left as it is).
   * `lastTurnId`, when given, must be the source's last turn. */
  forkThread(
    params: ThreadForkParams,
    options: RequestOptions = {},
  ): Promise<RequestResult<"thread/fork">> {
    return this.request("thread/fork", params, options);
  }

  /** `thread/name/set` (trimmed by the server; `thread/name/updated` follows). */
  setThreadName(threadId: string, name: string): Promise<RequestResult<"thread/name/set">> {
    return this.request("thread/name/set", { threadId, name });
  }

  unarchiveThread(threadId: string): Promise<RequestResult<"thread/unarchive">> {
    return this.request("thread/unarchive", { threadId });
  }

  /** `thread/delete`: threadline's record and log go; the CLI's own session files too only with
   * `deleteBackendSession`. */
  deleteThread(
    threadId: string,
    options: { deleteBackendSession?: boolean } = {},
  ): Promise<RequestResult<"thread/delete">> {
    return this.request("thread/delete", { threadId, ...options });
  }

  /** `thread/metadata/update` of the thread's Git info: a field left out stays, `null` clears
   * it, a string replaces it. */
  updateThreadMetadata(
    threadId: string,
    gitInfo: ThreadMetadataGitInfoUpdate,
  ): Promise<RequestResult<"thread/metadata/update">> {
    return this.request("thread/metadata/update", { threadId, gitInfo });
  }

  /** `thread/inject_items`: earlier conversation (Responses API items, e.g. from
   * {@link messageItem}) for the model to see before the thread's next turn. */
  injectItems(
    threadId: string,
    items: readonly unknown[],
  ): Promise<RequestResult<"thread/inject_items">> {
    return this.request("thread/inject_items", { threadId, items: [...items] });
  }

  /** One page of `thread/turns/list` (newest first unless `sortDirection: "asc"`). */
  listTurns(params: ThreadTurnsListParams): Promise<RequestResult<"thread/turns/list">> {
    return this.request("thread/turns/list", params);
  }

  /** One page of `thread/items/list` (oldest first unless `sortDirection: "desc"`). */
  listItems(params: ThreadItemsListParams): Promise<RequestResult<"thread/items/list">> {
    return this.request("thread/items/list", params);
  }

  /** Runs a turn to its end: {@link startTurn}, then its `completed`. */
  async runTurn(params: TurnStartParams, options: TurnOptions = {}): Promise<TurnResult> {
    const handle = await this.startTurn(params, options);
    return handle.completed;
  }

  // ---- closing ---------------------------------------------------------------------------------

  /** Closes stdin and waits for threadline to exit; after `timeoutMs` sends SIGTERM, after
   * `killTimeoutMs` more SIGKILL. For a connection: sends a close frame and waits `timeoutMs`
   * for the server's, then drops the connection; the server and its turns go on. Pending
   * requests are rejected when the process exits or the connection closes. */
  async close(options: CloseOptions = {}): Promise<ExitInfo> {
    const { timeoutMs = 5000, killTimeoutMs = 2000 } = options;
    if (this.exitInfo) return this.exitInfo;
    await this.transport.close(timeoutMs, killTimeoutMs);
    return this.exited;
  }

  /** Sends a signal to the process; for a connection, drops it at once (no close frame). */
  kill(signal: NodeJS.Signals = "SIGTERM"): boolean {
    return this.transport.kill(signal);
  }

  // ---- internals -------------------------------------------------------------------------------

  private write(message: Json): void {
    if (this.exitInfo) return;
    this.transport.send(JSON.stringify(message));
  }

  private handleLine(line: string): void {
    if (line.trim() === "") return;
    let message: unknown;
    try {
      message = JSON.parse(line);
    } catch (error) {
      this.diagnose({ kind: "invalidLine", line, error: String(error) });
      return;
    }
    if (Array.isArray(message)) {
      for (const m of message) this.handleMessage(m);
    } else {
      this.handleMessage(message);
    }
  }

  private handleMessage(message: unknown): void {
    if (!isObject(message)) {
      this.diagnose({ kind: "unexpectedMessage", message });
      return;
    }
    const { method, id } = message;
    if (typeof method === "string") {
      if (isRequestId(id)) void this.handleServerRequest(id, method, message.params);
      else if (id === undefined || id === null) this.handleNotification(method, message.params);
      else this.diagnose({ kind: "unexpectedMessage", message });
      return;
    }
    const entry = isRequestId(id) ? this.pending.get(idKey(id)) : undefined;
    if (!entry) {
      this.diagnose({ kind: "unexpectedMessage", message });
      return;
    }
    entry.cleanup();
    const error = message.error;
    if (isObject(error)) {
      const code = typeof error.code === "number" ? error.code : -32603;
      const text = typeof error.message === "string" ? error.message : JSON.stringify(error);
      entry.reject(new JsonRpcError(entry.method, code, text, error.data));
    } else if ("result" in message) {
      entry.resolve(message.result);
    } else {
      entry.reject(new JsonRpcError(entry.method, -32603, "response without result or error"));
    }
  }

  private handleNotification(method: string, params: unknown): void {
    if (!NOTIFICATION_SET.has(method)) {
      this.diagnose({ kind: "unknownNotification", method, params });
      return;
    }
    const notification = { method, params } as Notification;
    if (notification.method === "serverRequest/resolved") {
      const rid = notification.params.requestId;
      if (isRequestId(rid)) this.openServerRequests.get(idKey(rid))?.abort();
    }
    for (const watch of [...this.turnWatches]) {
      if (watch.turnId === undefined) {
        if (scopeOf(params).threadId !== watch.threadId) continue;
        watch.early.push(notification);
        if (watch.adopt && notification.method === "turn/started") {
          this.settleWatch(watch, notification.params.turn.id);
          watch.adopt(notification.params.turn);
        }
      } else {
        this.routeToWatch(watch, notification);
      }
    }
    const set = this.listeners.get(method);
    if (set) {
      for (const listener of [...set]) {
        this.callListener(() => (listener as (p: unknown) => void)(params));
      }
    }
    for (const listener of [...this.anyListeners]) this.callListener(() => listener(notification));
  }

  private routeToWatch(watch: TurnWatch, notification: Notification): void {
    if (!belongs(watch, notification.params)) return;
    watch.notifications.push(notification);
    if (notification.method === "turn/completed" && notification.params.turn.id === watch.turnId) {
      watch.finish({
        turn: notification.params.turn,
        completed: notification.params,
        notifications: watch.notifications,
        serverRequests: watch.serverRequests,
      });
    }
  }

  private async handleServerRequest(id: RequestId, method: string, params: unknown): Promise<void> {
    if (!SERVER_REQUEST_SET.has(method)) {
      this.diagnose({ kind: "unknownServerRequest", method, params });
      this.write({
        jsonrpc: "2.0",
        id,
        error: { code: METHOD_NOT_FOUND, message: `Method not found: ${method}` },
      });
      return;
    }
    const request = { id, method, params } as IncomingServerRequest;
    for (const watch of this.turnWatches) {
      if (watch.turnId === undefined) {
        if (scopeOf(params).threadId === watch.threadId) watch.earlyRequests.push(request);
      } else if (belongs(watch, params)) {
        watch.serverRequests.push(request);
      }
    }
    const key = idKey(id);
    const controller = new AbortController();
    this.openServerRequests.set(key, controller);
    const context: ServerRequestContext = { id, request, signal: controller.signal };
    let result: unknown;
    try {
      const specific = this.methodHandlers.get(method);
      if (!specific && request.method === "item/tool/call") {
        result = await this.answerToolCall(request.params, context);
      } else if (specific) {
        result = await specific(request.params as never, context);
      } else if (this.generalHandler) {
        result = await this.generalHandler(request.method, request.params, context);
      } else {
        result = DECLINE;
      }
      if (!isObject(result)) throw new TypeError(`handler answered ${JSON.stringify(result)}`);
    } catch (error) {
      this.diagnose({ kind: "handlerError", method, error });
      result = DECLINE;
    } finally {
      this.openServerRequests.delete(key);
    }
    // A request threadline withdrew (serverRequest/resolved) needs no answer.
    if (controller.signal.aborted) return;
    this.write({ jsonrpc: "2.0", id, result });
  }

  private callListener(call: () => void): void {
    try {
      call();
    } catch (error) {
      this.diagnose({ kind: "listenerError", error });
    }
  }

  private diagnose(diagnostic: Diagnostic): void {
    for (const listener of [...this.diagnosticListeners]) {
      try {
        listener(diagnostic);
      } catch {
        // a diagnostic listener that throws has nowhere to report to
      }
    }
  }

  private readonly exitListeners = new Set<(info: ExitInfo) => void>();

  private onExitInternal(listener: (info: ExitInfo) => void): () => void {
    if (this.exitInfo) {
      const info = this.exitInfo;
      queueMicrotask(() => listener(info));
      return () => undefined;
    }
    this.exitListeners.add(listener);
    return () => this.exitListeners.delete(listener);
  }

  private finish(info: ExitInfo): void {
    if (this.exitInfo) return;
    this.exitInfo = info;
    const stderr = this.stderrTail.slice(-4000);
    for (const entry of [...this.pending.values()]) {
      entry.cleanup();
      entry.reject(new ThreadlineExitedError(`answering ${entry.method}`, info, stderr));
    }
    for (const watch of [...this.turnWatches]) {
      watch.fail(new ThreadlineExitedError(`turn ${watch.turnId ?? "(starting)"} completed`, info, stderr));
    }
    for (const controller of this.openServerRequests.values()) controller.abort();
    for (const listener of [...this.exitListeners]) this.callListener(() => listener(info));
    this.exitListeners.clear();
    this.resolveExited(info);
  }
}
