/** The stdio transport: threadline as a child process, newline-delimited JSON-RPC on its
 * stdin/stdout, logs on its stderr. */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";

import type { ExitInfo } from "./errors.js";
import { LineSplitter } from "./framing.js";
import { settleWithin, type Transport, type TransportEvents } from "./transport.js";

export interface StdioTransportOptions {
  command: string;
  args: readonly string[];
  /** Laid over this process's environment (`undefined` removes a variable), or over an empty
   * one with `replaceEnv`. */
  env?: Readonly<Record<string, string | undefined>>;
  replaceEnv?: boolean;
  cwd?: string;
}

export class StdioTransport implements Transport {
  readonly command: string;
  readonly args: readonly string[];
  private readonly options: StdioTransportOptions;
  private readonly splitter = new LineSplitter();
  private child: ChildProcessWithoutNullStreams | undefined;
  private readonly ended: Promise<void>;
  private markEnded!: () => void;

  constructor(options: StdioTransportOptions) {
    this.options = options;
    this.command = options.command;
    this.args = [...options.args];
    this.ended = new Promise((resolve) => {
      this.markEnded = resolve;
    });
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(events: TransportEvents): void {
    const env: Record<string, string> = {};
    const { options } = this;
    const layers = options.replaceEnv ? [options.env ?? {}] : [process.env, options.env ?? {}];
    for (const layer of layers) {
      for (const [key, value] of Object.entries(layer)) {
        if (value === undefined) delete env[key];
        else env[key] = value;
      }
    }
    const child = spawn(this.command, [...this.args], {
      cwd: options.cwd,
      env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.child = child;

    let done = false;
    const finish = (info: ExitInfo): void => {
      if (done) return;
      done = true;
      for (const line of this.splitter.end()) events.message(line);
      events.ended(info);
      this.markEnded();
    };
    let exitCode: number | null = null;
    let exitSignal: NodeJS.Signals | null = null;
    let exitTimer: NodeJS.Timeout | undefined;
    child.on("error", (error) => {
      // Spawn failures (ENOENT, EACCES) come here, and there is no 'exit' then.
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) {
        finish({ code: child.exitCode, signal: child.signalCode, error });
      } else {
        events.diagnostic({ kind: "processError", error });
      }
    });
    child.on("exit", (code, signal) => {
      exitCode = code;
      exitSignal = signal;
      // 'close' follows once stdout is drained; a grandchild holding the pipes open must not
      // keep the client waiting forever.
      exitTimer = setTimeout(() => finish({ code, signal }), 2000);
      exitTimer.unref();
    });
    child.on("close", (code: number | null, signal: NodeJS.Signals | null) => {
      if (exitTimer) clearTimeout(exitTimer);
      finish({ code: code ?? exitCode, signal: signal ?? exitSignal });
    });

    child.stdout.on("data", (chunk: Buffer) => {
      for (const line of this.splitter.push(chunk)) events.message(line);
    });
    child.stdout.on("end", () => {
      for (const line of this.splitter.end()) events.message(line);
    });
    child.stdout.on("error", (error) => events.diagnostic({ kind: "streamError", stream: "stdout", error }));
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text: string) => events.log(text));
    child.stderr.on("error", (error) => events.diagnostic({ kind: "streamError", stream: "stderr", error }));
    // EPIPE after the server exited must not crash the host process.
    child.stdin.on("error", (error) => events.diagnostic({ kind: "streamError", stream: "stdin", error }));
  }

  send(text: string): void {
    const stdin = this.child?.stdin;
    if (!stdin?.writable) return;
    stdin.write(text + "\n");
  }

  /** Closes stdin and waits for the exit; then SIGTERM, then SIGKILL. */
  async close(timeoutMs: number, killTimeoutMs: number): Promise<void> {
    const child = this.child;
    if (!child) return;
    if (!child.stdin.destroyed) child.stdin.end();
    if (await settleWithin(this.ended, timeoutMs)) return;
    child.kill("SIGTERM");
    if (await settleWithin(this.ended, killTimeoutMs)) return;
    child.kill("SIGKILL");
    await this.ended;
  }

  kill(signal: NodeJS.Signals): boolean {
    return this.child?.kill(signal) ?? false;
  }
}
