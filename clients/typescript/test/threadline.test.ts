/** End-to-end tests against a real threadline process with the mock backend. */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  JsonRpcError,
  ThreadlineExitedError,
  textInput,
  type Diagnostic,
  type Notification,
  type ThreadItem,
} from "../src/index.js";
import { sandbox, startMockThread } from "./helpers.js";

const T = { timeout: 30_000 };

function completedItems(notifications: readonly Notification[]): ThreadItem[] {
  const items: ThreadItem[] = [];
  for (const n of notifications) if (n.method === "item/completed") items.push(n.params.item);
  return items;
}

function assertItemsBalanced(notifications: readonly Notification[]): void {
  const started = notifications.flatMap((n) => (n.method === "item/started" ? [n.params.item.id] : []));
  const completed = completedItems(notifications).map((i) => i.id);
  assert.deepEqual([...started].sort(), [...completed].sort());
}

test("a streamed turn: the deltas add up to the final agentMessage text", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  const init = await client.initialize();
  assert.ok(init.backends.some((b) => b.id === "mock" && b.available));
  const threadId = await startMockThread(client, box.cwd);

  const viaListener: string[] = [];
  const off = client.on("item/agentMessage/delta", (p) => viaListener.push(p.delta));
  const text = "hello wörld — 日本語 🎉 done";
  const result = await client.runTurn({ threadId, input: textInput(`/reason hmm\n/text ${text}`) });
  off();

  assert.equal(result.turn.status, "completed");
  assert.equal(result.completed.threadId, threadId);
  const deltas = result.notifications.flatMap((n) =>
    n.method === "item/agentMessage/delta" ? [n.params.delta] : [],
  );
  assert.ok(deltas.length > 1, "the message streamed in several deltas");
  const messages = completedItems(result.notifications).flatMap((i) =>
    i.type === "agentMessage" ? [i.text] : [],
  );
  assert.deepEqual(messages, [text]);
  assert.equal(deltas.join(""), text);
  assert.equal(viaListener.join(""), text);
  const methods = result.notifications.map((n) => n.method);
  const firstItem = methods.findIndex((m) => m.startsWith("item/"));
  assert.ok(methods.indexOf("turn/started") >= 0 && methods.indexOf("turn/started") < firstItem);
  assert.equal(methods.at(-1), "turn/completed");
  assert.ok(methods.includes("item/reasoning/summaryTextDelta"));
  assertItemsBalanced(result.notifications);
  assert.deepEqual(result.serverRequests, []);
});

test("approval accepted: the file is written", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const asked: string[] = [];
  const client = box.spawn({
    onServerRequest: async (method, params, { request }) => {
      asked.push(method);
      assert.equal(request.params, params);
      if (request.method === "item/fileChange/requestApproval") {
        assert.equal(request.params.turnId.length > 0, true);
        return { decision: "accept" };
      }
      return { decision: "decline" };
    },
  });
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const result = await client.runTurn({ threadId, input: textInput("/write f.txt hi") });

  assert.equal(result.turn.status, "completed");
  assert.deepEqual(asked, ["item/fileChange/requestApproval"]);
  assert.deepEqual(
    result.serverRequests.map((r) => r.method),
    ["item/fileChange/requestApproval"],
  );
  assert.equal(readFileSync(join(box.cwd, "f.txt"), "utf8"), "hi\n");
  const change = completedItems(result.notifications).find((i) => i.type === "fileChange");
  assert.equal(change?.type, "fileChange");
  assert.equal(change.status, "completed");
  assertItemsBalanced(result.notifications);
});

test("approval declined: no file, item declined", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  client.handle("item/fileChange/requestApproval", () => ({ decision: "decline" }));
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const result = await client.runTurn({ threadId, input: textInput("/write f.txt hi") });

  assert.equal(result.turn.status, "completed");
  assert.equal(existsSync(join(box.cwd, "f.txt")), false);
  const change = completedItems(result.notifications).find((i) => i.type === "fileChange");
  assert.equal(change?.type, "fileChange");
  assert.equal(change.status, "declined");
});

test("no handler, or a handler that throws, answers decline", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  const diagnostics: Diagnostic[] = [];
  client.onDiagnostic((d) => diagnostics.push(d));
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);

  const first = await client.runTurn({ threadId, input: textInput("/run echo ran > ran.txt") });
  const cmd1 = completedItems(first.notifications).find((i) => i.type === "commandExecution");
  assert.equal(cmd1?.type === "commandExecution" && cmd1.status, "declined");

  client.setServerRequestHandler(() => {
    throw new Error("handler bug");
  });
  const second = await client.runTurn({ threadId, input: textInput("/run echo ran > ran.txt") });
  const cmd2 = completedItems(second.notifications).find((i) => i.type === "commandExecution");
  assert.equal(cmd2?.type === "commandExecution" && cmd2.status, "declined");
  assert.equal(existsSync(join(box.cwd, "ran.txt")), false);
  assert.ok(diagnostics.some((d) => d.kind === "handlerError"));

  client.setServerRequestHandler((method) =>
    method === "item/commandExecution/requestApproval" ? { decision: "accept" } : { decision: "decline" },
  );
  const third = await client.runTurn({ threadId, input: textInput("/run echo ran") });
  const cmd3 = completedItems(third.notifications).find((i) => i.type === "commandExecution");
  assert.equal(cmd3?.type, "commandExecution");
  assert.equal(cmd3.status, "completed");
  assert.equal(cmd3.aggregatedOutput, "ran\n");
});

test("cancel: /sleep 30 then turn/cancel ends the turn as interrupted, quickly", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  // The "/text sleeping" message tells that the mock is inside its turn. (A cancel that lands
  // before that — right after turn/start — currently costs threadline's 5 s interrupt grace:
  // the mock's interrupt() is a no-op until its cancel scope exists.)
  const inside = client.waitFor("item/completed", (p) => p.item.type === "agentMessage", {
    timeoutMs: 10_000,
  });
  const turn = await client.startTurn({ threadId, input: textInput("/text sleeping\n/sleep 30") });
  await inside;
  const t0 = performance.now();
  assert.deepEqual(await client.request("turn/cancel", { threadId, turnId: turn.turnId }), {});
  const result = await turn.completed;
  const elapsed = performance.now() - t0;
  assert.equal(result.turn.status, "interrupted");
  assert.ok(elapsed < 3000, `interrupt took ${elapsed.toFixed(0)} ms`);
  assertItemsBalanced(result.notifications);
  // the thread keeps working
  const next = await client.runTurn({ threadId, input: textInput("/text still here") });
  assert.equal(next.turn.status, "completed");
});

test("resume: a new process picks the thread up from THREADLINE_HOME", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const first = box.spawn();
  await first.initialize();
  const threadId = await startMockThread(first, box.cwd);
  const turn1 = await first.runTurn({ threadId, input: textInput("/text first answer") });
  assert.equal(turn1.turn.status, "completed");
  assert.deepEqual(await first.close(), { code: 0, signal: null });

  const second = box.spawn();
  await second.initialize();
  const resumed = await second.request("thread/resume", { threadId });
  assert.equal(resumed.thread.id, threadId);
  assert.notEqual(resumed.thread.status.type, "notLoaded");
  const turn2 = await second.runTurn({ threadId, input: textInput("/text second answer") });
  assert.equal(turn2.turn.status, "completed");

  const { thread } = await second.request("thread/read", { threadId, includeTurns: true });
  assert.deepEqual(
    thread.turns.map((turn) => [turn.id, turn.status]),
    [
      [turn1.turn.id, "completed"],
      [turn2.turn.id, "completed"],
    ],
  );
  const texts = thread.turns.map((turn) =>
    turn.items.flatMap((i) => (i.type === "agentMessage" ? [i.text] : [])),
  );
  assert.deepEqual(texts, [["first answer"], ["second answer"]]);
  assert.deepEqual(await second.close(), { code: 0, signal: null });
});

test("JSON-RPC errors reject with JsonRpcError carrying code and message", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  await assert.rejects(client.request("thread/list", {}), (err: unknown) => {
    assert.ok(err instanceof JsonRpcError);
    assert.equal(err.code, -32600);
    assert.equal(err.rpcMessage, "Not initialized");
    return true;
  });
  await client.initialize();
  await assert.rejects(client.requestUntyped("no/such/method", {}), (err: unknown) => {
    assert.ok(err instanceof JsonRpcError);
    assert.equal(err.code, -32601);
    assert.equal(err.method, "no/such/method");
    assert.match(err.rpcMessage, /no\/such\/method/);
    return true;
  });
  await assert.rejects(client.requestUntyped("turn/start", { threadId: 5 }), (err: unknown) => {
    assert.ok(err instanceof JsonRpcError);
    assert.equal(err.code, -32602);
    return true;
  });
  // the session goes on
  const listed = await client.request("thread/list", {});
  assert.deepEqual(listed.data, []);
});

test("pending requests and turns are rejected when the process dies", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const turn = await client.startTurn({ threadId, input: textInput("/sleep 30") });
  client.kill("SIGKILL");
  await assert.rejects(turn.completed, ThreadlineExitedError);
  const exit = await client.exited;
  assert.equal(exit.signal, "SIGKILL");
  await assert.rejects(client.request("thread/list", {}), ThreadlineExitedError);
});

test("a command that cannot be started rejects initialize", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn({ command: join(box.cwd, "no-such-threadline"), args: [] });
  await assert.rejects(client.initialize(), (err: unknown) => {
    assert.ok(err instanceof ThreadlineExitedError);
    assert.match(String(err.exit.error?.message), /ENOENT/);
    return true;
  });
});

test("client-defined tools: registered handlers answer item/tool/call, a throwing one fails the call", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  await client.initialize();
  const dynamicTools = client.registerTools([
    {
      name: "lookup",
      description: "Look a word up.",
      inputSchema: { type: "object", properties: { q: { type: "string" } } },
      handler: (args) => `${(args as { q: string }).q} means hello`,
    },
    {
      name: "broken",
      namespace: "kb",
      handler: () => {
        throw new Error("the index is offline");
      },
    },
  ]);
  const started = await client.request("thread/start", { modelProvider: "mock", cwd: box.cwd, dynamicTools });
  const prompt = '/mcp threadline lookup {"q": "hola"}\n/mcp threadline kb__broken {}';
  const turn = await client.startTurn({ threadId: started.thread.id, input: textInput(prompt) });
  const result = await turn.completed;
  assert.equal(result.turn.status, "completed");
  const items = completedItems(result.notifications);
  const calls = items.flatMap((i) => (i.type === "dynamicToolCall" ? [[i.tool, i.namespace ?? null, i.status]] : []));
  assert.deepEqual(calls, [
    ["lookup", null, "completed"],
    ["broken", "kb", "failed"],
  ]);
  const text = items.flatMap((i) => (i.type === "agentMessage" ? [i.text] : [])).join("\n");
  assert.match(text, /lookup: hola means hello/);
  assert.match(text, /kb__broken: broken failed: the index is offline/);
  assertItemsBalanced(result.notifications);
});
