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

/** How the threadline process ended. */
export interface ExitInfo {
  /** Exit code, or null when it was killed by a signal or never started. */
  code: number | null;
  /** The signal that ended it, if any. */
  signal: NodeJS.Signals | null;
  /** Set when the process could not be started (e.g. ENOENT) or a stream failed. */
  error?: Error;
}

/** The process exited (or never started) before the operation completed. */
export class ThreadlineExitedError extends Error {
  override readonly name = "ThreadlineExitedError";
  readonly exit: ExitInfo;
  /** The last part of threadline's stderr, for diagnostics. */
  readonly stderr: string;

  constructor(what: string, exit: ExitInfo, stderr: string) {
    const how = exit.error
      ? `could not run threadline: ${exit.error.message}`
      : exit.signal
        ? `threadline was killed by ${exit.signal}`
        : `threadline exited with code ${String(exit.code)}`;
    super(`${how} before ${what}` + (stderr ? `\n--- stderr (tail) ---\n${stderr}` : ""));
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
