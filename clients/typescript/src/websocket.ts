/** The WebSocket transport: a connection to a running threadline (`--listen ws://IP:PORT` or
 * `unix://PATH`, the same upgrade over a unix socket), one JSON-RPC message per text frame,
 * `Authorization: Bearer <token>` on the upgrade. */
import { STATUS_CODES, type IncomingMessage } from "node:http";
import { connect as connectUnix } from "node:net";
import { resolve as resolvePath } from "node:path";

import WebSocket from "ws";

import { ThreadlineConnectError, type ExitInfo } from "./errors.js";
import { settleWithin, type Diagnostic, type Transport, type TransportEvents } from "./transport.js";

export interface WebSocketOptions {
  /** Sent as `Authorization: Bearer <token>` (servers started with `--ws-auth`). */
  token?: string;
  /** Give up on the connection and upgrade after this many ms. Default 10000. */
  timeoutMs?: number;
}

/** The largest message accepted from the server (its own cap on requests is 16 MiB). */
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** How much of a refused upgrade's body goes into the error. */
const REFUSAL_BODY_LIMIT = 1000;

type Buffered = { kind: "message"; text: string } | { kind: "diagnostic"; diagnostic: Diagnostic };

/** Opens a connection to `url` (`ws://HOST:PORT[/path]` or `unix://PATH`); rejects with
 * {@link ThreadlineConnectError} when nothing listens there or the upgrade is refused. */
export async function openWebSocket(
  url: string,
  options: WebSocketOptions = {},
): Promise<WebSocketTransport> {
  let address: string;
  let socketPath: string | undefined;
  if (url.startsWith("unix://")) {
    const path = url.slice("unix://".length);
    if (path === "") {
      throw new ThreadlineConnectError(url, "unix:// needs the socket's path (unix:///path/to/tl.sock)");
    }
    socketPath = resolvePath(path);
    address = "ws://localhost/";
  } else if (url.startsWith("ws://")) {
    address = url;
  } else {
    throw new ThreadlineConnectError(url, "expected a ws://HOST:PORT or unix://PATH URL");
  }
  const headers: Record<string, string> = {};
  if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
  const unixPath = socketPath;
  let ws: WebSocket;
  try {
    ws = new WebSocket(address, {
      headers,
      handshakeTimeout: options.timeoutMs ?? 10_000,
      maxPayload: MAX_MESSAGE_BYTES,
      perMessageDeflate: false,
      followRedirects: false,
      ...(unixPath === undefined ? {} : { createConnection: () => connectUnix(unixPath) }),
    });
  } catch (error) {
    throw new ThreadlineConnectError(url, error instanceof Error ? error.message : String(error));
  }
  // Listens from here on: errors after a failed upgrade land there, unseen, not unhandled.
  const transport = new WebSocketTransport(url, ws);
  await new Promise<void>((resolve, reject) => {
    const onError = (error: Error): void => {
      cleanup();
      const hint = socketPath === undefined ? "" : " (is a threadline server listening on that socket?)";
      reject(new ThreadlineConnectError(url, error.message + hint));
    };
    const onOpen = (): void => {
      cleanup();
      resolve();
    };
    const onRefused = (_request: unknown, response: IncomingMessage): void => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        if (body.length < REFUSAL_BODY_LIMIT) body += chunk;
      });
      response.on("end", () => {
        const status = response.statusCode ?? 0;
        const text = body.trim().slice(0, REFUSAL_BODY_LIMIT);
        const hint = status === 401 ? " (pass the server's token: connect(url, { token }))" : "";
        const phrase = response.statusMessage || STATUS_CODES[status] || "";
        const reason =
          `the server refused the WebSocket upgrade with ${status} ${phrase}`.trimEnd() +
          (text ? `: ${text}` : "") +
          hint;
        cleanup();
        reject(new ThreadlineConnectError(url, reason, status));
        ws.terminate();
      });
    };
    const cleanup = (): void => {
      ws.off("open", onOpen);
      ws.off("unexpected-response", onRefused);
      ws.off("error", onError);
    };
    ws.on("open", onOpen);
    ws.on("unexpected-response", onRefused);
    ws.on("error", onError);
  });
  return transport;
}

export class WebSocketTransport implements Transport {
  /** The URL connected to. */
  readonly command: string;
  readonly args: readonly string[] = [];
  readonly pid = undefined;
  private readonly ws: WebSocket;
  private events: TransportEvents | undefined;
  /** What arrived before `start`. */
  private early: Buffered[] = [];
  private lastError: Error | undefined;
  /** Set at the close; reported at `start` if that comes later. */
  private endInfo: ExitInfo | undefined;
  private readonly ended: Promise<void>;
  private markEnded!: () => void;

  constructor(url: string, ws: WebSocket) {
    this.command = url;
    this.ws = ws;
    this.ended = new Promise((resolve) => {
      this.markEnded = resolve;
    });
    ws.on("message", (data: WebSocket.RawData, isBinary: boolean) => {
      const bytes = Buffer.isBuffer(data)
        ? data
        : Array.isArray(data)
          ? Buffer.concat(data)
          : Buffer.from(data);
      if (isBinary) {
        this.deliver({ kind: "diagnostic", diagnostic: { kind: "binaryFrame", bytes: bytes.length } });
      } else this.deliver({ kind: "message", text: bytes.toString("utf8") });
    });
    ws.on("error", (error: Error) => {
      this.lastError = error;
      if (ws.readyState !== WebSocket.CONNECTING) {
        this.deliver({ kind: "diagnostic", diagnostic: { kind: "streamError", stream: "socket", error } });
      }
    });
    ws.on("close", (closeCode: number, reason: Buffer) => {
      const info: ExitInfo = {
        code: null,
        signal: null,
        connection: { url, closeCode, closeReason: reason.toString("utf8") },
      };
      if (this.lastError) info.error = this.lastError;
      this.endInfo = info;
      if (this.events) this.events.ended(info);
      this.markEnded();
    });
  }

  start(events: TransportEvents): void {
    this.events = events;
    const early = this.early;
    this.early = [];
    for (const item of early) this.deliver(item);
    if (this.endInfo) events.ended(this.endInfo);
  }

  send(text: string): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(text);
  }

  /** Sends a close frame (1000) and waits `timeoutMs` for the server's; then drops the
   * connection. */
  async close(timeoutMs: number): Promise<void> {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.close(1000);
    if (await settleWithin(this.ended, timeoutMs)) return;
    this.ws.terminate();
    await this.ended;
  }

  /** Drops the connection at once, without a close frame (the signal is ignored). */
  kill(): boolean {
    if (this.ws.readyState === WebSocket.CLOSED) return false;
    this.ws.terminate();
    return true;
  }

  private deliver(item: Buffered): void {
    if (!this.events) {
      this.early.push(item);
      return;
    }
    if (item.kind === "message") this.events.message(item.text);
    else this.events.diagnostic(item.diagnostic);
  }
}
