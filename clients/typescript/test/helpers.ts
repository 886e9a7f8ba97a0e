/** Shared test setup: a real threadline process with the mock backend, in temp directories. */
import { spawn as spawnProcess } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import {
  ThreadlineClient,
  defaultCommand,
  type ConnectOptions,
  type ThreadlineClientOptions,
} from "../src/index.js";

/** The repository root (this file runs as clients/typescript/dist/test/helpers.js). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** `$THREADLINE_COMMAND` if set, else the repo's `.venv/bin/threadline`. */
export function threadlineCommand(): { command: string; args: string[] } {
  if ((process.env.THREADLINE_COMMAND ?? "").trim() !== "") return defaultCommand();
  return { command: join(repoRoot, ".venv/bin/threadline"), args: [] };
}

export function tempDir(prefix: string): string {
  return realpathSync(mkdtempSync(join(tmpdir(), `threadline-ts-${prefix}-`)));
}

/** A running `threadline app-server --listen URL` (mock backend). */
export interface Listener {
  /** The bound URL from the banner (`ws://127.0.0.1:0` becomes the picked port). */
  url: string;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  stderr(): string;
  /** SIGTERM (or `signal`), then the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** A test's own THREADLINE_HOME and working directory; `cleanup()` closes the clients, stops
 * the servers and removes both directories. */
export interface Sandbox {
  home: string;
  cwd: string;
  /** Spawns threadline (mock backend) with this sandbox's THREADLINE_HOME. */
  spawn(options?: ThreadlineClientOptions): ThreadlineClient;
  /** Starts `threadline app-server --listen url ...extra` (mock backend, this THREADLINE_HOME)
   * and waits for its banner. */
  listen(url: string, extra?: readonly string[]): Promise<Listener>;
  /** {@link ThreadlineClient.connect}, closed at cleanup. */
  connect(url: string, options?: ConnectOptions): Promise<ThreadlineClient>;
  cleanup(): Promise<void>;
}

export function sandbox(): Sandbox {
  const home = tempDir("home");
  const cwd = tempDir("cwd");
  const clients: ThreadlineClient[] = [];
  const listeners: Listener[] = [];
  return {
    home,
    cwd,
    spawn(options = {}) {
      const { command, args } = threadlineCommand();
      const client = new ThreadlineClient({
        command,
        args,
        cwd: repoRoot,
        ...options,
        env: {
          THREADLINE_HOME: home,
          AGENT_BACKEND: "mock",
          THREADLINE_LOG_LEVEL: "INFO",
          ...options.env,
        },
      });
      clients.push(client);
      return client;
    },
    async listen(url, extra = []) {
      const { command, args } = threadlineCommand();
      const server = spawnProcess(command, [...args, "app-server", "--listen", url, ...extra], {
        cwd: repoRoot,
        env: { ...process.env, THREADLINE_HOME: home, AGENT_BACKEND: "mock" },
        stdio: ["ignore", "ignore", "pipe"],
      });
      const exited = new Promise<number | null>((done) => server.on("exit", (code) => done(code)));
      let stderr = "";
      const bound = await new Promise<string>((ready, failed) => {
        server.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString();
          const match = /listening on: (\S+)/.exec(stderr);
          if (match?.[1] !== undefined) ready(match[1]);
        });
        void exited.then(() => failed(new Error(`the server exited: ${stderr}`)));
      });
      const listener: Listener = {
        url: bound,
        exited,
        stderr: () => stderr,
        async stop(signal = "SIGTERM") {
          if (server.exitCode === null && server.signalCode === null) server.kill(signal);
          return exited;
        },
      };
      listeners.push(listener);
      return listener;
    },
    async connect(url, options) {
      const client = await ThreadlineClient.connect(url, options);
      clients.push(client);
      return client;
    },
    async cleanup() {
      await Promise.all(clients.map((c) => c.close({ timeoutMs: 3000, killTimeoutMs: 1000 })));
      await Promise.all(listeners.map((l) => l.stop()));
      rmSync(home, { recursive: true, force: true });
      rmSync(cwd, { recursive: true, force: true });
    },
  };
}

/** Starts a mock thread in `cwd`; returns its id. */
export async function startMockThread(client: ThreadlineClient, cwd: string): Promise<string> {
  const { thread } = await client.request("thread/start", { modelProvider: "mock", cwd });
  return thread.id;
}
