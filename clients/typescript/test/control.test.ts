/** The control surface end to end against a real threadline process (mock backend): images and
 * per-turn overrides, steer, fork, compaction, injected history, thread management and the paged
 * history lists. The mock echoes what its session sees (`/settings`, `/history`). */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  JsonRpcError,
  imageInput,
  messageItem,
  textInput,
  toInput,
  type Notification,
  type ThreadItem,
  type ThreadlineClient,
  type TurnResult,
} from "../src/index.js";
import { sandbox, startMockThread } from "./helpers.js";

const T = { timeout: 30_000 };
const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64",
);

function items(notifications: readonly Notification[]): ThreadItem[] {
  return notifications.flatMap((n) => (n.method === "item/completed" ? [n.params.item] : []));
}

function text(result: TurnResult): string {
  return items(result.notifications)
    .flatMap((i) => (i.type === "agentMessage" ? [i.text] : []))
    .join("\n");
}

async function say(client: ThreadlineClient, threadId: string, prompt: string): Promise<string> {
  return text(await client.runTurn({ threadId, input: textInput(prompt) }));
}

test("images and typed overrides reach the agent; the overrides stick", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  writeFileSync(join(box.cwd, "shot.png"), PNG);
  const client = box.spawn();
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const dataUrl = `data:image/png;base64,${PNG.toString("base64")}`;
  const input = toInput(["What is in these?", imageInput(dataUrl), imageInput("shot.png")]);
  assert.deepEqual(
    input.map((i) => i.type),
    ["text", "image", "localImage"],
  );
  const seen = await client.runTurn({ threadId, input });
  assert.equal(text(seen).split(`[image: image/png, ${PNG.length} bytes]`).length - 1, 2, text(seen));

  const settings = await client.runTurn({
    threadId,
    input: textInput("/settings"),
    model: "mock-2",
    effort: "high",
    sandboxPolicy: { type: "readOnly" },
    outputSchema: { type: "object" },
  });
  for (const part of ["model=mock-2", "effort=high", "sandbox=read-only", "outputSchema=True"]) {
    assert.ok(text(settings).includes(part), text(settings));
  }
  const later = await say(client, threadId, "/settings");
  assert.ok(later.includes("model=mock-2") && later.includes("outputSchema=False"), later);

  await assert.rejects(
    client.startTurn({ threadId, input: [imageInput("missing.png")] }),
    (err: unknown) =>
      err instanceof JsonRpcError && err.code === -32602 && /missing\.png/.test(err.rpcMessage),
  );
  assert.equal(await say(client, threadId, "/text still fine"), "still fine");
});

test("steer, injected history, fork and compaction", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const client = box.spawn();
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  await client.injectItems(threadId, [
    messageItem("user", "Hi"),
    messageItem("assistant", "The word is PLUM."),
  ]);

  const working = client.waitFor("item/agentMessage/delta", (p) => p.threadId === threadId, {
    timeoutMs: 10_000,
  });
  const prompt = "/text working\n/sleep 1\nfirst part";
  const turn = await client.startTurn({ threadId, input: textInput(prompt) });
  await working; // the agent is at work
  assert.deepEqual(await turn.steer("also this"), { turnId: turn.turnId });
  const done = await turn.completed;
  assert.equal(done.turn.status, "completed");
  assert.ok(text(done).includes("steered: also this"), text(done));
  await assert.rejects(
    turn.steer("too late"),
    (err: unknown) => err instanceof JsonRpcError && /no active turn/.test(err.rpcMessage),
  );

  const history = await say(client, threadId, "/history");
  const said = history.split("\n").filter((line) => line.startsWith("user:"));
  assert.deepEqual(
    said.map((line) => line.includes("PLUM")),
    [true, false],
  ); // injected once

  const forked = await client.forkThread({ threadId, excludeTurns: true });
  const fork = forked.thread.id;
  assert.notEqual(fork, threadId);
  assert.equal(forked.thread.forkedFromId, threadId);
  await assert.rejects(
    client.forkThread({ threadId, lastTurnId: turn.turnId }),
    (err: unknown) =>
      err instanceof JsonRpcError && err.code === -32602 && /lastTurnId/.test(err.rpcMessage),
  );
  const inFork = await say(client, fork, "the fork speaks\n/history");
  assert.ok(inFork.includes("first part") && inFork.includes("the fork speaks"), inFork);
  assert.ok(!(await say(client, threadId, "/history")).includes("the fork speaks"));

  const compacted = client.waitFor("thread/compacted", (p) => p.threadId === threadId, {
    timeoutMs: 10_000,
  });
  const compaction = await client.compactThread(threadId);
  const result = await compaction.completed;
  assert.equal(result.turn.status, "completed");
  assert.equal(result.turn.id, compaction.turnId);
  assert.deepEqual(
    items(result.notifications).map((i) => i.type),
    ["contextCompaction"],
  );
  await compacted;
  const after = await say(client, threadId, "/history");
  assert.ok(after.includes("[compacted:") && !after.includes("PLUM"), after);
});

test("thread management and the history lists, across a restart", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const first = box.spawn();
  await first.initialize();
  const threadId = await startMockThread(first, box.cwd);
  const turnIds: string[] = [];
  for (const n of [0, 1, 2]) {
    turnIds.push((await first.runTurn({ threadId, input: textInput(`/text turn ${n}`) })).turn.id);
  }
  const named = first.waitFor("thread/name/updated", (p) => p.threadId === threadId, {
    timeoutMs: 10_000,
  });
  await first.setThreadName(threadId, "  Release notes  ");
  assert.equal((await named).threadName, "Release notes");
  const updated = await first.updateThreadMetadata(threadId, { branch: "main", sha: "abc123" });
  assert.deepEqual(updated.thread.gitInfo, { branch: "main", sha: "abc123" });
  const cleared = await first.updateThreadMetadata(threadId, { sha: null });
  assert.deepEqual(cleared.thread.gitInfo, { branch: "main" });
  await first.request("thread/archive", { threadId });
  await first.close();

  const second = box.spawn();
  await second.initialize();
  const page = await second.listTurns({ threadId, limit: 2 });
  assert.deepEqual(
    page.data.map((turn) => turn.id),
    [turnIds[2], turnIds[1]],
  ); // newest first
  const rest = await second.listTurns({ threadId, limit: 2, cursor: page.nextCursor ?? null });
  assert.deepEqual(
    rest.data.map((turn) => turn.id),
    [turnIds[0]],
  );
  assert.equal(rest.nextCursor ?? null, null);
  const listed = await second.listItems({ threadId, limit: 4 });
  assert.deepEqual(
    listed.data.map((e) => [e.turnId, e.item.type]),
    [
      [turnIds[0], "userMessage"],
      [turnIds[0], "agentMessage"],
      [turnIds[1], "userMessage"],
      [turnIds[1], "agentMessage"],
    ],
  );
  const one = await second.listItems({ threadId, turnId: turnIds[2] ?? "", sortDirection: "desc" });
  assert.deepEqual(
    one.data.map((e) => e.item.type),
    ["agentMessage", "userMessage"],
  );

  const unarchived = await second.unarchiveThread(threadId);
  assert.equal(unarchived.thread.name, "Release notes");
  assert.ok((await second.request("thread/list", {})).data.some((th) => th.id === threadId));
  assert.deepEqual(await second.deleteThread(threadId), {});
  await assert.rejects(
    second.request("thread/read", { threadId }),
    (err: unknown) => err instanceof JsonRpcError && err.code === -32600,
  );
});
