/** Shared test setup: a real threadline process with the mock backend, in temp directories. */
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { ThreadlineClient, defaultCommand, type ThreadlineClientOptions } from "../src/index.js";

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

/** A test's own THREADLINE_HOME and working directory; `cleanup()` removes both. */
export interface Sandbox {
  home: string;
  cwd: string;
  /** Spawns threadline (mock backend) with this sandbox's THREADLINE_HOME. */
  spawn(options?: ThreadlineClientOptions): ThreadlineClient;
  cleanup(): Promise<void>;
}

export function sandbox(): Sandbox {
  const home = tempDir("home");
  const cwd = tempDir("cwd");
  const clients: ThreadlineClient[] = [];
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
    async cleanup() {
      await Promise.all(clients.map((c) => c.close({ timeoutMs: 3000, killTimeoutMs: 1000 })));
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
