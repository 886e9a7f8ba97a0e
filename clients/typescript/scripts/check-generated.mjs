#!/usr/bin/env node
// Fails (exit 1) when src/generated/protocol.ts is not exactly what scripts/generate.mjs makes
// from ../../schemas/ now: regenerates into a temporary directory and compares byte for byte.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { defaultOut, packageRoot } from "./generate.mjs";

const dir = await mkdtemp(join(tmpdir(), "threadline-ts-gen-"));
try {
  const fresh = join(dir, "protocol.ts");
  // Run the generator as a separate process, exactly as `npm run generate` does.
  const gen = spawnSync(
    process.execPath,
    [fileURLToPath(new URL("./generate.mjs", import.meta.url)), "--out", fresh],
    { encoding: "utf8" },
  );
  if (gen.status !== 0) {
    console.error(`check-generated: the generator failed:\n${gen.stderr}`);
    process.exitCode = 1;
  } else {
    await compare(await readFile(fresh));
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}

async function compare(expected) {
  let committed;
  try {
    committed = await readFile(defaultOut);
  } catch {
    committed = null;
  }
  const rel = relative(process.cwd(), defaultOut) || defaultOut;
  if (committed === null || !committed.equals(expected)) {
    console.error(
      `check-generated: ${rel} is stale (it differs from what scripts/generate.mjs makes from ` +
        `schemas/).\nRun \`npm run generate\` in ${relative(process.cwd(), packageRoot) || "."} and commit the result.`,
    );
    if (committed !== null) {
      const a = committed.toString("utf8").split("\n");
      const b = expected.toString("utf8").split("\n");
      const i = a.findIndex((line, k) => line !== b[k]);
      const at = i === -1 ? Math.min(a.length, b.length) : i;
      console.error(`first difference at line ${at + 1}:`);
      console.error(`  committed: ${JSON.stringify(a[at])}`);
      console.error(`  expected:  ${JSON.stringify(b[at])}`);
    }
    process.exitCode = 1;
    return;
  }
  console.log(`check-generated: ${rel} is up to date`);
}
