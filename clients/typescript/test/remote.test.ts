/** The client against a remote threadline: a server listening on a unix socket
 * (`app-server --listen unix://…`), reached by spawning `threadline proxy` as the command. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { textInput } from "../src/index.js";
import { sandbox, startMockThread, threadlineCommand } from "./helpers.js";

const T = { timeout: 30_000 };

test("through threadline proxy: a turn with an approval; the server and its threads outlive the client", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const server = await box.listen(`unix://${join(box.home, "tl.sock")}`);

  const proxy = { args: [...threadlineCommand().args, "proxy", "--listen", server.url] };
  const client = box.spawn({ ...proxy, onServerRequest: async () => ({ decision: "accept" }) });
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const result = await client.runTurn({ threadId, input: textInput("/write f.txt hi\n/text ok") });
  assert.equal(result.turn.status, "completed");
  assert.deepEqual(
    result.serverRequests.map((r) => r.method),
    ["item/fileChange/requestApproval"],
  );
  assert.equal(readFileSync(join(box.cwd, "f.txt"), "utf8"), "hi\n");
  await client.close({ timeoutMs: 5000, killTimeoutMs: 1000 });

  // A second client through the proxy finds the thread loaded on the server.
  const again = box.spawn(proxy);
  await again.initialize();
  const loaded = await again.request("thread/loaded/list", {});
  assert.deepEqual(loaded.data, [threadId]);
  await again.close({ timeoutMs: 5000, killTimeoutMs: 1000 });

  assert.equal(await server.stop(), 0);
});
