// Replies with parts in TsyncClient over a fake WebSocket: what a reader
// shows (draft.message in client.drafts, the draft event and the store), and
// what writeUIMessageStream and stopDraft send (tests/js_package runs both
// against a real server with the ai package's streams).

import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { TsyncClient, UIMessageState, createTranscriptStore } from "../../client_js/client.js";

class FakeSocket {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.sent = [];
    this.seq = 0;
    FakeSocket.all.push(this);
  }
  send(data) {
    this.sent.push(JSON.parse(data));
  }
  close() {}
  open() {
    this.onopen?.({});
  }
  deliver(...frames) {
    const lines = frames.map((f) => JSON.stringify({ seq: (this.seq += 1), ...f }));
    this.onmessage?.({ data: lines.join("\n") });
  }
  ops(kind) {
    return this.sent.filter((op) => op.op === kind);
  }
}

function connected({ subscribe = false } = {}) {
  FakeSocket.all = [];
  let keys = 0;
  const client = new TsyncClient("ws://server/v1/ws", {
    WebSocket: FakeSocket,
    heartbeatMs: 0,
    newKey: () => `key-${(keys += 1)}`,
  });
  if (subscribe) client.subscribe("t1");
  client.connect();
  const ws = FakeSocket.all.at(-1);
  ws.open();
  if (subscribe) {
    ws.deliver({
      type: "baseline",
      snapshot: { transcriptId: "t1", epoch: "e1", revision: 0, start: 0, messages: [], activeStart: 0, segments: [{ start: 0, end: null }] },
    });
    const ping = ws.ops("ping").at(-1);
    ws.deliver({ type: "pong", ref: ping.ref });
  }
  return { client, ws };
}

const REPLY = [
  [{ type: "start", messageId: "reply-1" }, { type: "start-step" }, { type: "text-start", id: "t" }],
  [{ type: "text-delta", id: "t", delta: "Hello" }],
  [{ type: "tool-input-start", toolCallId: "c", toolName: "w" }, { type: "tool-input-delta", toolCallId: "c", inputTextDelta: '{"a": 1' }],
  [{ type: "text-end", id: "t" }, { type: "finish" }],
];

function folded(batches, id = "d1") {
  const state = new UIMessageState(id);
  for (const batch of batches) state.applyAll(batch);
  return state.message();
}

test("a subscriber shows a reply with parts as its UIMessage: drafts, the draft event, the store", () => {
  const { client, ws } = connected({ subscribe: true });
  const store = createTranscriptStore(client, "t1");
  const leave = store.subscribe(() => {});
  const events = [];
  client.on("draft", (e) => events.push(e));
  let text = "";
  REPLY.forEach((chunks, i) => {
    const delta = chunks.filter((c) => c.type === "text-delta").map((c) => c.delta).join("");
    text += delta;
    ws.deliver({ type: "draft", transcriptId: "t1", draftId: "d1", role: "assistant", n: i + 1, delta, chunks });
  });
  const draft = client.drafts("t1").get("d1");
  assert.deepEqual(draft.message, folded(REPLY));
  assert.equal(draft.text, "Hello");
  assert.equal(draft.uiBehind, false);
  assert.deepEqual(events.at(-1).message, folded(REPLY));
  assert.deepEqual(store.getSnapshot().drafts[0].message, folded(REPLY));
  // A late joiner's replay: the whole reply in one frame.
  ws.deliver({ type: "draft", transcriptId: "t1", draftId: "d2", role: "assistant", n: 4, text, replay: REPLY.flat() });
  assert.deepEqual(client.drafts("t1").get("d2").message, folded(REPLY, "d2"));
  // A draft of text alone has no message.
  ws.deliver({ type: "draft", transcriptId: "t1", draftId: "d3", role: "assistant", n: 1, delta: "x" });
  assert.equal(client.drafts("t1").get("d3").message, null);
  leave();
  client.close();
});

/** An async iterable of chunks: each burst ready at once, a pause between bursts. */
async function* bursts(batches, { pauseMs = 20, onReturn = () => {} } = {}) {
  try {
    for (const batch of batches) {
      for (const chunk of batch) yield chunk;
      await sleep(pauseMs);
    }
  } finally {
    onReturn();
  }
}

test("writeUIMessageStream sends the chunks that arrive together in one op and commits the UIMessage", async () => {
  const { client, ws } = connected();
  const done = client.writeUIMessageStream("t1", bursts(REPLY), { draftId: "d1" });
  while (ws.ops("append").length === 0) await sleep(5);
  assert.deepEqual(
    ws.ops("draft").map((op) => op.chunks),
    REPLY,
  );
  assert.ok(ws.ops("draft").every((op) => op.transcriptId === "t1" && op.draftId === "d1"));
  const [append] = ws.ops("append");
  assert.equal(append.format, "ui");
  assert.equal(append.draftId, "d1");
  assert.deepEqual(append.messages, [folded(REPLY)]);
  assert.equal(append.messages[0].id, "reply-1");
  ws.deliver({ type: "ack", transcriptId: "t1", revision: 1, start: 0, count: 1, ref: append.ref });
  assert.deepEqual(await done, { type: "ack", seq: ws.seq, transcriptId: "t1", revision: 1, start: 0, count: 1, ref: append.ref });
  client.close();
});

test("a stop (draft-closed with a revision) ends the pipe: the stream is read no more", async () => {
  const { client, ws } = connected();
  let returned = false;
  const forever = Array.from({ length: 1000 }, () => [{ type: "text-delta", id: "t", delta: "w " }]);
  const stream = bursts([[{ type: "text-start", id: "t" }], ...forever], { pauseMs: 5, onReturn: () => (returned = true) });
  const done = client.writeUIMessageStream("t1", stream, { draftId: "d1" });
  while (ws.ops("draft").length < 3) await sleep(2);
  // A late op refused first (the stop closed the draft), then the notice.
  ws.deliver({ type: "error", code: "draft-closed", message: "final already", transcriptId: "t1" });
  const sentAtRefusal = ws.ops("draft").length;
  await sleep(30);
  assert.ok(ws.ops("draft").length <= sentAtRefusal + 1, "it went on writing after the refusal");
  ws.deliver({ type: "error", code: "draft-closed", message: "stopped by bob", transcriptId: "t1", revision: 7 });
  assert.deepEqual(await done, { transcriptId: "t1", revision: 7, stopped: true });
  assert.equal(returned, true);
  assert.equal(ws.ops("append").length, 0);
  assert.equal(ws.ops("draft").filter((op) => op.cancel).length, 0);
  client.close();
});

test("an error chunk, an abort chunk or the signal cancels the draft and rejects with the reason", async () => {
  for (const [ending, reason] of [
    [{ type: "error", errorText: "the model failed" }, "the model failed"],
    [{ type: "abort", reason: "user" }, "the stream was aborted: user"],
  ]) {
    const { client, ws } = connected();
    const done = client.writeUIMessageStream("t1", bursts([[{ type: "text-start", id: "t" }], [ending]]), { draftId: "d1" });
    await assert.rejects(done, { message: reason });
    assert.deepEqual(ws.ops("draft").at(-1), { op: "draft", transcriptId: "t1", draftId: "d1", cancel: true });
    assert.equal(ws.ops("append").length, 0);
    client.close();
  }
  const { client, ws } = connected();
  const controller = new AbortController();
  const forever = Array.from({ length: 1000 }, () => [{ type: "text-delta", id: "t", delta: "w " }]);
  const done = client.writeUIMessageStream("t1", bursts([[{ type: "text-start", id: "t" }], ...forever], { pauseMs: 5 }), {
    signal: controller.signal,
  });
  await sleep(20);
  controller.abort(new Error("left"));
  await assert.rejects(done, { message: "left" });
  const last = ws.ops("draft").at(-1);
  assert.equal(last.cancel, true);
  assert.equal(last.draftId, "key-1"); // a new id when none was given
  client.close();
});

test("stopDraft sends a draft op with stop and resolves with the ack", async () => {
  const { client, ws } = connected();
  const done = client.stopDraft("t1", "d9");
  const [op] = ws.ops("draft");
  assert.deepEqual(op, { op: "draft", transcriptId: "t1", draftId: "d9", stop: true, ref: op.ref });
  assert.deepEqual(client.pendingAppends, []);
  ws.deliver({ type: "ack", transcriptId: "t1", revision: 3, start: 1, count: 1, ref: op.ref });
  assert.equal((await done).revision, 3);
  client.close();
});
