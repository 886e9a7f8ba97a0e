import assert from "node:assert/strict";
import { test } from "node:test";

import { LineSplitter } from "../src/index.js";

test("lines split across chunks at every byte boundary decode whole (multi-byte UTF-8)", () => {
  const text = '{"delta":"héllo wörld — 日本語 🎉"}\n{"n":2}\r\n{"tail":"✓"}';
  const bytes = Buffer.from(text, "utf8");
  for (let cut = 0; cut <= bytes.length; cut++) {
    const splitter = new LineSplitter();
    const lines = [
      ...splitter.push(bytes.subarray(0, cut)),
      ...splitter.push(bytes.subarray(cut)),
      ...splitter.end(),
    ];
    assert.deepEqual(lines, ['{"delta":"héllo wörld — 日本語 🎉"}', '{"n":2}', '{"tail":"✓"}'], `cut at ${cut}`);
  }
});

test("one byte at a time, several lines in one chunk, empty lines", () => {
  const bytes = Buffer.from("a🎉\n\nb\nc\n", "utf8");
  const one = new LineSplitter();
  const got: string[] = [];
  for (const byte of bytes) got.push(...one.push(Uint8Array.of(byte)));
  assert.deepEqual(got, ["a🎉", "", "b", "c"]);
  assert.deepEqual(one.end(), []);
  assert.deepEqual(new LineSplitter().push(bytes), ["a🎉", "", "b", "c"]);
});
