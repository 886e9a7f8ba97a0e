/** Compile-time checks of the typed API: this file must type-check (`@ts-expect-error` lines
 * must stay errors). The function is never called; the test only records that it compiled. */
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CLIENT_REQUEST_METHODS,
  SERVER_NOTIFICATION_METHODS,
  SERVER_REQUEST_METHODS,
  imageInput,
  messageItem,
  textInput,
  toInput,
  type ThreadlineClient,
} from "../src/index.js";

export async function typedUsage(client: ThreadlineClient): Promise<void> {
  const started = await client.request("thread/start", { modelProvider: "mock", cwd: "/tmp" });
  const id: string = started.thread.id;
  // @ts-expect-error: cwd is a string
  await client.request("thread/start", { cwd: 5 });
  // @ts-expect-error: turn/start needs threadId and input
  await client.request("turn/start", {});
  // @ts-expect-error: not a client request method
  await client.request("thread/explode", {});
  const turn = await client.request("turn/start", { threadId: id, input: textInput("hi") });
  const status: "completed" | "failed" | "inProgress" | "interrupted" = turn.turn.status;
  client.on("item/agentMessage/delta", (p) => {
    const delta: string = p.delta;
    void delta;
  });
  // @ts-expect-error: not a notification method
  client.on("item/nope", () => undefined);
  client.handle("item/fileChange/requestApproval", (p) => {
    const itemId: string = p.itemId;
    void itemId;
    return { decision: "acceptForSession" };
  });
  // @ts-expect-error: "maybe" is not a decision
  client.handle("item/fileChange/requestApproval", () => ({ decision: "maybe" }));
  client.setServerRequestHandler((_method, _params, { request }) => {
    if (request.method === "item/tool/requestUserInput") {
      const questions: string[] = request.params.questions.map((q) => q.id);
      return { answers: Object.fromEntries(questions.map((q) => [q, { answers: ["yes"] }])) };
    }
    return { decision: "decline" };
  });
  // The control surface: typed per method.
  const input = toInput(["look", imageInput("a.png")]);
  const handle = await client.startTurn({ threadId: id, input, effort: "high" });
  const steered: string = (await handle.steer([imageInput("https://example.invalid/b.png")])).turnId;
  // @ts-expect-error: a number is not a prompt
  await handle.steer(5);
  // @ts-expect-error: the overrides are typed: sandboxPolicy is an object
  await client.startTurn({ threadId: id, input: textInput("x"), sandboxPolicy: "readOnly" });
  const forked = await client.forkThread({ threadId: id, lastTurnId: handle.turnId });
  const fork: string | null | undefined = forked.thread.forkedFromId;
  // @ts-expect-error: thread/fork needs threadId
  await client.forkThread({ lastTurnId: "x" });
  const compaction = await client.compactThread(id);
  const compactedId: string = compaction.turnId;
  await client.setThreadName(id, "name");
  await client.updateThreadMetadata(id, { branch: null });
  // @ts-expect-error: git info fields are strings or null
  await client.updateThreadMetadata(id, { branch: 1 });
  await client.injectItems(id, [messageItem("user", "hi")]);
  const page = await client.listTurns({ threadId: id, sortDirection: "asc" });
  const turns: string[] = page.data.map((x) => x.id);
  // @ts-expect-error: "up" is not a sort direction
  await client.listTurns({ threadId: id, sortDirection: "up" });
  const listed = await client.listItems({ threadId: id, cursor: { type: "item", itemId: "i" } });
  const kinds: string[] = listed.data.map((e) => e.item.type);
  await client.unarchiveThread(id);
  await client.deleteThread(id, { deleteBackendSession: true });
  void [status, steered, fork, compactedId, turns, kinds];
}

test("the method lists match methods.json", () => {
  assert.equal(typeof typedUsage, "function");
  assert.ok(CLIENT_REQUEST_METHODS.includes("turn/cancel"));
  assert.ok(SERVER_NOTIFICATION_METHODS.includes("turn/completed"));
  assert.ok(SERVER_REQUEST_METHODS.includes("item/commandExecution/requestApproval"));
});
