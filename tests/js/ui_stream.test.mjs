// Runs the shared case files of replies with parts (tests/cases/ui_stream/,
// written by the Python fold and DraftCopy: tests/protocol/test_ui_stream_cases.py,
// and held to the AI SDK's readUIMessageStream by tests/server/web/test_ui_stream_sdk.py)
// against the JavaScript ports: client_js/ui_stream.js and DraftCopy in client.js.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { DraftCopy } from "../../client_js/client.js";
import { UIMessageState, UIStreamError, fixJson, parsePartialJson } from "../../client_js/ui_stream.js";

const CASES = join(dirname(fileURLToPath(import.meta.url)), "..", "cases", "ui_stream");
const read = (name) => JSON.parse(readFileSync(join(CASES, name), "utf8")).cases;

/** What the fold shows after each chunk (null before it first shows one), and where it refused one. */
function shownAfterEach(chunks) {
  const state = new UIMessageState();
  let shown = null;
  const messages = [];
  for (const [n, chunk] of chunks.entries()) {
    try {
      if (state.apply(chunk)) shown = state.message();
    } catch (err) {
      if (!(err instanceof UIStreamError)) throw err;
      return { messages, errorAt: n };
    }
    messages.push(shown);
  }
  return { messages, errorAt: null };
}

for (const c of read("fold.json")) {
  test(`fold: ${c.name}`, () => {
    assert.deepEqual(shownAfterEach(c.chunks), { messages: c.messages, errorAt: c.errorAt });
  });
}

for (const c of read("drafts.json")) {
  test(`DraftCopy: ${c.name}`, () => {
    const copy = new DraftCopy("d1", "assistant");
    c.frames.forEach((frame, i) => {
      const changed = copy.take({ type: "draft", seq: 1, transcriptId: "t", draftId: "d1", role: "assistant", ...frame });
      const after = { changed, n: copy.n, text: copy.text, waiting: copy.waiting, uiBehind: copy.uiBehind, message: copy.message };
      assert.deepEqual(after, c.after[i], `after frame ${i}`);
    });
  });
}

test("partial JSON as the SDK repairs it", () => {
  assert.deepEqual(parsePartialJson('{"a": [1, tr'), { a: [1, true] });
  assert.deepEqual(parsePartialJson('{"city": "Par'), { city: "Par" });
  assert.deepEqual(parsePartialJson('{"n": -'), {});
  assert.equal(parsePartialJson("NaN"), undefined);
  assert.equal(parsePartialJson('"\\u00'), "");
  assert.equal(fixJson('[1, {"a": nu'), '[1, {"a": null}]');
});

test("a chunk the fold refuses changes nothing and is a UIStreamError", () => {
  const state = new UIMessageState("m");
  assert.throws(() => state.apply({ type: "text-delta", id: "x", delta: "y" }), UIStreamError);
  assert.throws(() => state.apply({ type: "text-start" }), UIStreamError);
  assert.deepEqual(state.message(), { id: "m", role: "assistant", parts: [] });
});
