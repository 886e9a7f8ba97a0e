/** Client behaviour that the real server cannot provoke, against tiny scripted fake servers. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { ThreadlineClient, type Diagnostic } from "../src/index.js";

/** A fake server: node running `script` (CommonJS) with helpers `send(obj)`, `sendBytewise(obj)`
 * and `onMessage(fn)` defined. */
function fake(script: string): ThreadlineClient {
  const prelude = `
    const send = (m) => process.stdout.write(JSON.stringify(m) + "\\n");
    const sendBytewise = async (m) => {
      for (const b of Buffer.from(JSON.stringify(m) + "\\n")) {
        process.stdout.write(Buffer.of(b));
        await new Promise((r) => setTimeout(r, 1));
      }
    };
    const handlers = [];
    const onMessage = (fn) => handlers.push(fn);
    let buf = "";
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", (d) => {
      buf += d;
      let i;
      while ((i = buf.indexOf("\\n")) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        for (const h of handlers) h(JSON.parse(line));
      }
    });
  `;
  return new ThreadlineClient({ command: process.execPath, args: ["-e", prelude + script] });
}

test("framing over a pipe: byte-wise writes, multi-byte UTF-8, stderr is never protocol", { timeout: 15_000 }, async () => {
  const client = fake(`
    process.stderr.write('{"jsonrpc":"2.0","id":1,"result":"from stderr"}\\n');
    process.stdout.write("this is not json\\n\\n");
    onMessage(async (m) => {
      if (m.method === "initialize") {
        await sendBytewise({ jsonrpc: "2.0", method: "warning", params: { message: "ünïcødé 🎉 日本" } });
        await sendBytewise({ jsonrpc: "2.0", id: m.id, result: { serverInfo: { name: "fake 🎉", version: "0" } } });
      }
    });
  `);
  const diagnostics: Diagnostic[] = [];
  client.onDiagnostic((d) => diagnostics.push(d));
  const warnings: string[] = [];
  client.on("warning", (p) => warnings.push(p.message));
  const result = await client.initialize();
  assert.equal(result.serverInfo.name, "fake 🎉");
  assert.deepEqual(warnings, ["ünïcødé 🎉 日本"]);
  assert.ok(diagnostics.some((d) => d.kind === "invalidLine" && d.line === "this is not json"));
  assert.deepEqual(await client.close(), { code: 0, signal: null });
  assert.match(client.stderr, /from stderr/);
});

test("server requests: unknown method → -32601, no handler → decline", { timeout: 15_000 }, async () => {
  const client = fake(`
    const answers = {};
    send({ jsonrpc: "2.0", id: "s-1", method: "item/unknown/ask", params: {} });
    send({ jsonrpc: "2.0", id: 7, method: "item/commandExecution/requestApproval",
           params: { threadId: "t", turnId: "u", itemId: "i", startedAtMs: 0 } });
    onMessage((m) => {
      if (m.method === undefined) answers[String(m.id)] = m;
      if (Object.keys(answers).length === 2) {
        send({ jsonrpc: "2.0", method: "warning", params: { message: JSON.stringify(answers) } });
      }
    });
  `);
  const warning = await client.waitFor("warning", undefined, { timeoutMs: 10_000 });
  const answers = JSON.parse(warning.message) as Record<string, unknown>;
  assert.deepEqual(answers["s-1"], {
    jsonrpc: "2.0",
    id: "s-1",
    error: { code: -32601, message: "Method not found: item/unknown/ask" },
  });
  assert.deepEqual(answers["7"], { jsonrpc: "2.0", id: 7, result: { decision: "decline" } });
  await client.close();
});

test("close() escalates to SIGKILL when the server ignores EOF and SIGTERM", { timeout: 15_000 }, async () => {
  const client = fake(`
    process.on("SIGTERM", () => {});
    process.stdin.on("end", () => {});
    setInterval(() => {}, 1000);
    send({ jsonrpc: "2.0", method: "warning", params: { message: "ready" } });
  `);
  await client.waitFor("warning", undefined, { timeoutMs: 10_000 });
  const pending = client.requestUntyped("never/answered");
  const t0 = performance.now();
  const exit = await client.close({ timeoutMs: 200, killTimeoutMs: 200 });
  assert.equal(exit.signal, "SIGKILL");
  assert.ok(performance.now() - t0 < 5000);
  await assert.rejects(pending, /killed by SIGKILL before answering never\/answered/);
});

test("a compaction turn is collected from its turn/started, even one that beats the answer", { timeout: 15_000 }, async () => {
  const client = fake(`
    const turn = (id, status) => ({ id, status, items: [] });
    onMessage((m) => {
      if (m.method !== "thread/compact/start") return;
      const threadId = m.params.threadId;
      // Another thread's turn first: not this compaction's.
      send({ jsonrpc: "2.0", method: "turn/started", params: { threadId: "other", turn: turn("x", "inProgress") } });
      send({ jsonrpc: "2.0", method: "turn/started", params: { threadId, turn: turn("c1", "inProgress") } });
      send({ jsonrpc: "2.0", id: m.id, result: {} });
      const item = { type: "contextCompaction", id: "i1" };
      send({ jsonrpc: "2.0", method: "item/completed", params: { threadId, turnId: "c1", item, completedAtMs: 1 } });
      send({ jsonrpc: "2.0", method: "turn/completed", params: { threadId, turn: turn("c1", "completed") } });
    });
  `);
  const handle = await client.compactThread("t1");
  assert.equal(handle.turnId, "c1");
  const result = await handle.completed;
  assert.equal(result.turn.status, "completed");
  assert.deepEqual(
    result.notifications.map((n) => n.method),
    ["turn/started", "item/completed", "turn/completed"],
  );
  await client.close();
});
