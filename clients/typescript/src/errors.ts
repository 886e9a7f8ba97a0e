/** Errors raised by the client. */

/** A JSON-RPC error response from threadline (`{"error": {code, message, data?}}`). */
export class JsonRpcError extends Error {
  override readonly name = "JsonRpcError";
  /** The JSON-RPC error code, e.g. -32601 (method not found), -32602 (invalid params). */
  readonly code: number;
  /** The `data` member of the error, if any. */
  readonly data: unknown;
  /** The request's method. */
  readonly method: string;
  /** The error's `message` exactly as threadline sent it. */
  readonly rpcMessage: string;

  constructor(method: string, code: number, message: string, data?: unknown) {
    super(`${method}: ${message} (${code})`);
    this.code = code;
    this.data = data;
    this.method = method;
    this.rpcMessage = message;
  }
}

/** How the threadline process, or the connection to a running threadline, ended. */
export interface ExitInfo {
  /** Exit code, or null when it was killed by a signal, never started, or was a connection. */
  code: number | null;
  /** The signal that ended it, if any. */
  signal: NodeJS.Signals | null;
  /** Set when the process could not be started (e.g. ENOENT), a stream failed, or the
   * connection failed. */
  error?: Error;
  /** Set for a connection (`ThreadlineClient.connect`): its URL and the WebSocket close
   * code and reason (1000: closed normally, 1006: dropped without a close frame). */
  connection?: { url: string; closeCode: number; closeReason: string };
}

function describeEnd(exit: ExitInfo): string {
  const { connection } = exit;
  if (connection) {
    const reason = connection.closeReason ? `: ${connection.closeReason}` : "";
    const how = `the connection to ${connection.url} closed (code ${connection.closeCode}${reason})`;
    return exit.error ? `${how} after an error: ${exit.error.message}` : how;
  }
  if (exit.error) return `could not run threadline: ${exit.error.message}`;
  if (exit.signal) return `threadline was killed by ${exit.signal}`;
  return `threadline exited with code ${String(exit.code)}`;
}

/** The process exited (or never started), or the connection closed, before the operation
 * completed. */
export class ThreadlineExitedError extends Error {
  override readonly name = "ThreadlineExitedError";
  readonly exit: ExitInfo;
  /** The last part of threadline's stderr, for diagnostics. */
  readonly stderr: string;

  constructor(what: string, exit: ExitInfo, stderr: string) {
    super(`${describeEnd(exit)} before ${what}` + (stderr ? `\n--- stderr (tail) ---\n${stderr}` : ""));
    this.exit = exit;
    this.stderr = stderr;
  }
}

/** A request or turn took longer than the caller's timeout. */
export class ThreadlineTimeoutError extends Error {
  override readonly name = "ThreadlineTimeoutError";
  constructor(what: string, timeoutMs: number) {
    super(`${what} timed out after ${timeoutMs} ms`);
  }
}

/** `ThreadlineClient.connect` could not open the connection: nothing listens at the
 * address, or the server refused the WebSocket upgrade (`status` 401: a missing or wrong
 * token; 403: an `Origin` header). */
export class ThreadlineConnectError extends Error {
  override readonly name = "ThreadlineConnectError";
  /** The URL given to `connect`. */
  readonly url: string;
  /** The HTTP status of a refused upgrade; undefined when there was no HTTP answer. */
  readonly status: number | undefined;

  constructor(url: string, reason: string, status?: number) {
    super(`could not connect to ${url}: ${reason}`);
    this.url = url;
    this.status = status;
  }
}
