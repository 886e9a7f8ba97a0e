/** `ThreadlineClient.connect`: the client over a WebSocket to a running threadline
 * (`app-server --listen ws://127.0.0.1:0` and `unix://PATH`, mock backend). */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import {
  ThreadlineClient,
  ThreadlineConnectError,
  ThreadlineExitedError,
  textInput,
  type Diagnostic,
  type ServerRequestContext,
} from "../src/index.js";
import { sandbox, startMockThread } from "./helpers.js";

const T = { timeout: 30_000 };

for (const kind of ["ws", "unix"] as const) {
  test(`over ${kind}://: a turn, an approval, an interrupt; close leaves the server and its thread`, T, async (t) => {
    const box = sandbox();
    t.after(() => box.cleanup());
    const server = await box.listen(kind === "ws" ? "ws://127.0.0.1:0" : `unix://${join(box.home, "tl.sock")}`);
    if (kind === "ws") assert.match(server.url, /^ws:\/\/127\.0\.0\.1:[1-9]\d*$/);

    const asked: string[] = [];
    const client = await box.connect(server.url, {
      onServerRequest: (method) => {
        asked.push(method);
        return { decision: method === "item/fileChange/requestApproval" ? "accept" : "decline" };
      },
    });
    assert.equal(client.command, server.url);
    assert.equal(client.pid, undefined);
    const init = await client.initialize();
    assert.equal(init.serverInfo.name, "threadline");
    const threadId = await startMockThread(client, box.cwd);

    const deltas: string[] = [];
    client.on("item/agentMessage/delta", (p) => deltas.push(p.delta));
    const result = await client.runTurn({ threadId, input: textInput("/write f.txt hi\n/text written") });
    assert.equal(result.turn.status, "completed");
    assert.deepEqual(asked, ["item/fileChange/requestApproval"]);
    assert.deepEqual(
      result.serverRequests.map((r) => r.method),
      ["item/fileChange/requestApproval"],
    );
    assert.equal(readFileSync(join(box.cwd, "f.txt"), "utf8"), "hi\n");
    assert.equal(deltas.join(""), "written");
    assert.equal(result.notifications.at(-1)?.method, "turn/completed");

    // Interrupt: once the mock is inside its turn, turn/cancel ends it as interrupted.
    const inside = client.waitFor("item/completed", (p) => p.item.type === "agentMessage", {
      timeoutMs: 10_000,
    });
    const turn = await client.startTurn({ threadId, input: textInput("/text sleeping\n/sleep 30") });
    await inside;
    await turn.cancel();
    assert.equal((await turn.completed).turn.status, "interrupted");

    const exit = await client.close();
    assert.deepEqual(exit, {
      code: null,
      signal: null,
      connection: { url: server.url, closeCode: 1000, closeReason: "" },
    });
    await assert.rejects(client.request("thread/list", {}), (error: unknown) => {
      assert.ok(error instanceof ThreadlineExitedError);
      assert.match(error.message, /^the connection to \S+ closed \(code 1000\) before sending thread\/list$/);
      return true;
    });

    // The server and the thread go on: a second connection finds it loaded.
    const again = await box.connect(server.url);
    await again.initialize();
    assert.deepEqual((await again.request("thread/loaded/list", {})).data, [threadId]);
    await again.close();
    assert.equal(await server.stop(), 0);
    if (kind === "unix") assert.equal(existsSync(join(box.home, "tl.sock")), false);
  });
}

test("a token server: no token and a wrong token are refused with 401, the right one works", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const tokenFile = join(box.home, "token");
  writeFileSync(tokenFile, "s3cret-token\n", { mode: 0o600 });
  const server = await box.listen("ws://127.0.0.1:0", ["--ws-auth", "capability-token", "--ws-token-file", tokenFile]);

  const refusal = (pattern: RegExp) => (error: unknown) => {
    assert.ok(error instanceof ThreadlineConnectError, String(error));
    assert.equal(error.status, 401);
    assert.equal(error.url, server.url);
    assert.match(error.message, pattern);
    return true;
  };
  await assert.rejects(
    box.connect(server.url),
    refusal(/^could not connect to ws:\S+: the server refused the WebSocket upgrade with 401 Unauthorized: missing websocket bearer token/),
  );
  await assert.rejects(
    box.connect(server.url, { token: "wrong" }),
    refusal(/refused the WebSocket upgrade with 401 Unauthorized: invalid websocket bearer token \(pass the server's token/),
  );
  assert.doesNotMatch(server.stderr(), /wrong|s3cret/);

  const client = await box.connect(server.url, { token: "s3cret-token" });
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const result = await client.runTurn({ threadId, input: textInput("/text authorized") });
  assert.equal(result.turn.status, "completed");
});

test("nothing listening, a bad URL: clear errors", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  // A port that was just free.
  const probe = createServer();
  await new Promise<void>((listening) => probe.listen(0, "127.0.0.1", listening));
  const address = probe.address();
  assert.ok(address !== null && typeof address === "object");
  await new Promise((closed) => probe.close(closed));
  await assert.rejects(box.connect(`ws://127.0.0.1:${address.port}`), (error: unknown) => {
    assert.ok(error instanceof ThreadlineConnectError);
    assert.equal(error.status, undefined);
    assert.match(error.message, /^could not connect to ws:\S+: connect ECONNREFUSED/);
    return true;
  });
  const missing = `unix://${join(box.home, "none.sock")}`;
  await assert.rejects(
    box.connect(missing),
    /could not connect to unix:\S+none\.sock: connect ENOENT .* \(is a threadline server listening on that socket\?\)/,
  );
  await assert.rejects(box.connect("http://127.0.0.1:1"), /expected a ws:\/\/HOST:PORT or unix:\/\/PATH URL/);
  await assert.rejects(box.connect("unix://"), /unix:\/\/ needs the socket's path/);
});

test("the connection drops mid-turn: the turn and later requests reject with a clear error", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const server = await box.listen("ws://127.0.0.1:0");
  let asked!: (context: ServerRequestContext) => void;
  const approval = new Promise<ServerRequestContext>((resolve) => {
    asked = resolve;
  });
  const client = await box.connect(server.url, {
    onServerRequest: (_method, _params, context) => {
      asked(context);
      // Answered only once withdrawn: the server goes away first.
      return new Promise((resolve) => context.signal.addEventListener("abort", () => resolve({ decision: "decline" })));
    },
  });
  await client.initialize();
  const threadId = await startMockThread(client, box.cwd);
  const turn = await client.startTurn({ threadId, input: textInput("/write f.txt hi") });
  const context = await approval;
  assert.equal(context.request.method, "item/fileChange/requestApproval");

  await server.stop("SIGKILL");
  await assert.rejects(turn.completed, (error: unknown) => {
    assert.ok(error instanceof ThreadlineExitedError);
    assert.match(error.message, /^the connection to ws:\S+ closed \(code 1006\) before turn \S+ completed$/);
    assert.equal(error.exit.connection?.closeCode, 1006);
    return true;
  });
  assert.equal(context.signal.aborted, true);
  await assert.rejects(client.request("thread/list", {}), /closed \(code 1006\) before sending thread\/list/);
  assert.equal(existsSync(join(box.cwd, "f.txt")), false);
});

test("two connections on one thread: the first approval answer wins, the other is withdrawn", T, async (t) => {
  const box = sandbox();
  t.after(() => box.cleanup());
  const server = await box.listen("ws://127.0.0.1:0");
  let watcherAsked!: (context: ServerRequestContext) => void;
  const watcherContext = new Promise<ServerRequestContext>((resolve) => {
    watcherAsked = resolve;
  });
  const watcher = await box.connect(server.url, {
    onServerRequest: (_method, _params, context) => {
      watcherAsked(context);
      return new Promise((resolve) => context.signal.addEventListener("abort", () => resolve({ decision: "decline" })));
    },
  });
  const owner = await box.connect(server.url);
  // The owner accepts once the watcher has the same request too.
  owner.handle("item/fileChange/requestApproval", async () => {
    await watcherContext;
    return { decision: "accept" };
  });
  await owner.initialize();
  await watcher.initialize();
  const threadId = await startMockThread(owner, box.cwd);
  await watcher.request("thread/resume", { threadId });

  const resolved = watcher.waitFor("serverRequest/resolved", undefined, { timeoutMs: 10_000 });
  const result = await owner.runTurn({ threadId, input: textInput("/write f.txt hi") });
  assert.equal(result.turn.status, "completed");
  assert.equal(readFileSync(join(box.cwd, "f.txt"), "utf8"), "hi\n");
  const context = await watcherContext;
  assert.equal((await resolved).requestId, context.id);
  assert.equal(context.signal.aborted, true);
  assert.deepEqual(
    result.serverRequests.map((r) => r.id),
    [context.id],
  );
});

test("against a scripted server: the upgrade's headers, binary frames, a close with a reason", T, async (t) => {
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0 });
  t.after(async () => {
    for (const ws of wss.clients) ws.terminate();
    await new Promise((done) => wss.close(done));
  });
  await new Promise((listening) => wss.once("listening", listening));
  const address = wss.address();
  assert.ok(address !== null && typeof address === "object");
  const upgrades: Record<string, string | undefined>[] = [];
  wss.on("connection", (ws, request) => {
    upgrades.push({ authorization: request.headers.authorization, origin: request.headers.origin });
    ws.on("message", (data) => {
      const message = JSON.parse(String(data)) as { id: number; method: string };
      if (message.method === "initialize") {
        ws.send(Buffer.from([1, 2, 3]));
        ws.send(JSON.stringify({ id: message.id, result: { serverInfo: { name: "scripted", version: "0" } } }));
      } else if (message.method === "never/answered") {
        ws.close(1011, "server bug");
      }
    });
  });

  const client = await ThreadlineClient.connect(`ws://127.0.0.1:${address.port}`, { token: "tok" });
  t.after(() => client.close({ timeoutMs: 1000 }));
  const diagnostics: Diagnostic[] = [];
  client.onDiagnostic((d) => diagnostics.push(d));
  assert.equal((await client.initialize()).serverInfo.name, "scripted");
  assert.deepEqual(upgrades, [{ authorization: "Bearer tok", origin: undefined }]);
  assert.deepEqual(diagnostics, [{ kind: "binaryFrame", bytes: 3 }]);

  await assert.rejects(
    client.requestUntyped("never/answered"),
    /^ThreadlineExitedError: the connection to ws:\S+ closed \(code 1011: server bug\) before answering never\/answered$/,
  );
  assert.equal((await client.exited).connection?.closeReason, "server bug");
});
