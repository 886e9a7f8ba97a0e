/** How the client's JSON-RPC messages reach threadline and come back: a spawned child's stdio
 * ({@link StdioTransport}) or a WebSocket connection to a running server (`WebSocketTransport`). */
import type { ExitInfo } from "./errors.js";

/** Things worth knowing that are not protocol messages: garbage on stdout, a response nobody
 * waits for, a listener or handler that threw, a notification method this client does not know,
 * a binary WebSocket frame. */
export type Diagnostic =
  | { kind: "invalidLine"; line: string; error: string }
  | { kind: "unexpectedMessage"; message: unknown }
  | { kind: "unknownNotification"; method: string; params: unknown }
  | { kind: "unknownServerRequest"; method: string; params: unknown }
  | { kind: "listenerError"; error: unknown }
  | { kind: "handlerError"; method: string; error: unknown }
  | { kind: "streamError"; stream: "stdin" | "stdout" | "stderr" | "socket"; error: Error }
  | { kind: "processError"; error: Error }
  | { kind: "binaryFrame"; bytes: number };

/** What a transport reports to the client. */
export interface TransportEvents {
  /** The text of one incoming message: a line of stdout, or one text frame. */
  message(text: string): void;
  /** Log text (a child's stderr); never protocol. */
  log(text: string): void;
  diagnostic(diagnostic: Diagnostic): void;
  /** The transport has ended, after its last message; reported once. */
  ended(info: ExitInfo): void;
}

/** One JSON-RPC session's carrier. The client calls `start` once, then `send` per message. */
export interface Transport {
  /** For a child process: its command line; for a connection: its URL and no args. */
  readonly command: string;
  readonly args: readonly string[];
  /** The child's process id; undefined for a connection. */
  readonly pid: number | undefined;
  start(events: TransportEvents): void;
  /** Sends one serialized message; dropped once the transport has ended. */
  send(text: string): void;
  /** Ends the session gracefully (stdin EOF, or a close frame) and escalates after the
   * timeouts; resolves once `ended` has been reported. */
  close(timeoutMs: number, killTimeoutMs: number): Promise<void>;
  /** Sends a signal to the child, or drops the connection at once; false if there was nothing
   * to end. */
  kill(signal: NodeJS.Signals): boolean;
}

/** Resolves true when `promise` settles within `ms`, else false (the timer is cleared). */
export function settleWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    void promise.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}
