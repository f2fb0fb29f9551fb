// The TsyncClient over a fake WebSocket and fake timers: what it sends, what
// it emits, and how it survives lost connections, gaps, lag and new epochs.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CLOSE_ADVICE,
  ServerError,
  SUBPROTOCOL_JSON,
  TranscriptCopy,
  TsyncClient,
  attachmentBytes,
  backoffDelay,
  newIdempotencyKey,
  tokenExpiry,
} from "../../client_js/client.js";

// --- fakes -------------------------------------------------------------------------

class FakeSocket {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.sent = [];
    this.closed = null;
    this.seq = 0;
    FakeSocket.all.push(this);
  }
  send(data) {
    if (this.closed) throw new Error("send on a closed socket");
    this.sent.push(JSON.parse(data));
  }
  close(code, reason) {
    this.closed = { code, reason };
  }
  // -- the server's side --
  open() {
    this.onopen?.({});
  }
  /** Deliver frames in one WebSocket message, numbering seq unless given. */
  deliver(...frames) {
    const lines = frames.map((f) => JSON.stringify({ seq: (this.seq += 1), ...f }));
    this.onmessage?.({ data: lines.join("\n") });
  }
  drop(code = 1006, reason = "") {
    this.closed = { code, reason };
    this.onclose?.({ code, reason });
  }
  ops(kind) {
    return this.sent.filter((op) => op.op === kind);
  }
  /** Answer the latest sync ping. */
  pong() {
    const ping = this.ops("ping").at(-1);
    this.deliver({ type: "pong", ref: ping.ref });
  }
}

class FakeTimers {
  constructor() {
    this.time = 0;
    this.pending = [];
    this.nextId = 1;
  }
  setTimeout = (fn, ms) => {
    const id = this.nextId++;
    this.pending.push({ id, at: this.time + ms, fn });
    return id;
  };
  clearTimeout = (id) => {
    this.pending = this.pending.filter((t) => t.id !== id);
  };
  setInterval = (fn, ms) => {
    const id = this.nextId++;
    const tick = () => {
      fn();
      if (this.intervals.has(id)) this.pending.push({ id, at: this.time + ms, fn: tick });
    };
    this.intervals.add(id);
    this.pending.push({ id, at: this.time + ms, fn: tick });
    return id;
  };
  clearInterval = (id) => {
    this.intervals.delete(id);
    this.clearTimeout(id);
  };
  intervals = new Set();
  now = () => this.time;
  /** Move the clock forward, firing what falls due in order. */
  advance(ms) {
    const until = this.time + ms;
    for (;;) {
      this.pending.sort((a, b) => a.at - b.at);
      const next = this.pending[0];
      if (!next || next.at > until) break;
      this.pending.shift();
      this.time = next.at;
      next.fn();
    }
    this.time = until;
  }
}

const EPOCH = "e1";
const msg = (i) => ({ role: i % 2 ? "assistant" : "user", content: `message ${i}` });

function snapshot(revision, length, { epoch = EPOCH, id = "t1", segments } = {}) {
  return {
    transcriptId: id,
    epoch,
    revision,
    start: 0,
    messages: Array.from({ length }, (_, i) => msg(i)),
    activeStart: segments ? segments.at(-1).start : 0,
    segments: segments ?? [{ start: 0, end: null }],
  };
}

function appended(revision, start, count, { epoch = EPOCH, id = "t1" } = {}) {
  return {
    type: "increment",
    event: {
      transcriptId: id,
      epoch,
      revision,
      occurredAt: 1700000000000 + revision,
      change: {
        kind: "messages-appended",
        start,
        messages: Array.from({ length: count }, (_, i) => msg(start + i)),
      },
    },
  };
}

function setup(options = {}) {
  FakeSocket.all = [];
  const timers = new FakeTimers();
  let keys = 0;
  const client = new TsyncClient("ws://server/v1/ws", {
    WebSocket: FakeSocket,
    timers,
    random: () => 0.5,
    newKey: () => `key-${(keys += 1)}`,
    heartbeatMs: 0,
    ...options,
  });
  const events = [];
  for (const type of ["status", "baseline", "messages", "segment", "stop", "ack", "error"]) {
    client.on(type, (detail) => events.push({ type, ...detail }));
  }
  const statuses = () => events.filter((e) => e.type === "status").map((e) => e.state);
  return { client, timers, events, statuses, socket: () => FakeSocket.all.at(-1) };
}

/** Connect, subscribe t1 and serve a baseline of `length` messages at `revision`. */
function live({ revision = 2, length = 2, ...options } = {}) {
  const s = setup(options);
  s.client.subscribe("t1");
  s.client.connect();
  const ws = s.socket();
  ws.open();
  ws.deliver({ type: "baseline", snapshot: snapshot(revision, length) });
  ws.pong();
  return { ...s, ws };
}

// --- tests -----------------------------------------------------------------------------

test("connects with the JSON subprotocol, subscribes fresh and goes live after a baseline", () => {
  const { client, ws, statuses, events } = live();
  assert.deepEqual(ws.protocols, [SUBPROTOCOL_JSON]);
  assert.equal(ws.url, "ws://server/v1/ws");
  const [sub] = ws.ops("subscribe");
  assert.equal(sub.transcriptId, "t1");
  assert.equal("fromRevision" in sub, false);
  assert.deepEqual(statuses(), ["connecting", "live"]);
  const baseline = events.find((e) => e.type === "baseline");
  assert.equal(baseline.mirror.revision, 2);
  assert.equal(baseline.epochChanged, false);
  assert.equal(client.mirror("t1").length, 2);
});

test("the token is the first frame of every connection, never in the URL", () => {
  const { client, socket } = setup({ token: "s3cret&x" });
  client.subscribe("t1");
  client.connect();
  socket().open();
  assert.equal(socket().url, "ws://server/v1/ws");
  assert.deepEqual(socket().sent[0], { op: "auth", token: "s3cret&x", ref: "auth:1" });
  assert.equal(socket().sent[1].op, "subscribe");
});

test("several frames in one message are split on newlines and applied in order", () => {
  const { client, ws, events } = live();
  ws.deliver(appended(3, 2, 1), appended(4, 3, 2), {
    type: "increment",
    event: {
      transcriptId: "t1", epoch: EPOCH, revision: 5, occurredAt: 1,
      change: { kind: "segment-started", previousStart: 0, start: 4, end: 5 },
    },
  });
  const got = events.filter((e) => e.type === "messages").map((e) => [e.start, e.messages.length]);
  assert.deepEqual(got, [[2, 1], [3, 2]]);
  const segment = events.find((e) => e.type === "segment");
  assert.deepEqual([segment.previousStart, segment.start, segment.end], [0, 4, 5]);
  const mirror = client.mirror("t1");
  assert.equal(mirror.revision, 5);
  assert.deepEqual(mirror.messages.map((m) => m.content), [0, 1, 2, 3, 4].map((i) => `message ${i}`));
  assert.deepEqual(mirror.segments, [{ start: 0, end: 5 }, { start: 4, end: null }]);
  assert.equal(mirror.activeStart, 4);
});

test("a repeated event is ignored; a revision gap resubscribes from the copy's revision", () => {
  const { client, ws, events } = live();
  ws.deliver(appended(3, 2, 1));
  ws.deliver(appended(3, 2, 1)); // a repeat (new seq, old revision)
  assert.equal(client.mirror("t1").length, 3);
  ws.deliver(appended(5, 4, 1)); // revision 4 is missing
  const sub = ws.ops("subscribe").at(-1);
  assert.deepEqual([sub.fromRevision, sub.epoch], [3, EPOCH]);
  assert.equal(events.filter((e) => e.type === "messages").length, 1);
  ws.deliver(appended(4, 3, 1), appended(5, 4, 1));
  assert.equal(client.mirror("t1").revision, 5);
  assert.equal(client.mirror("t1").length, 5);
});

test("a seq gap resubscribes every transcript and says resyncing, then resynced", () => {
  const { client, ws, statuses } = live();
  client.subscribe("t2");
  ws.deliver({ type: "baseline", snapshot: snapshot(1, 1, { id: "t2", epoch: "e2" }) });
  ws.pong();
  const before = ws.ops("subscribe").length;
  ws.seq += 2; // two frames lost
  ws.deliver(appended(3, 2, 1));
  const subs = ws.ops("subscribe").slice(before);
  assert.deepEqual(
    subs.map((s) => [s.transcriptId, s.fromRevision, s.epoch]).sort(),
    [["t1", 2, EPOCH], ["t2", 1, "e2"]],
  );
  assert.equal(client.mirror("t1").revision, 3, "the frame that revealed the gap still counts");
  assert.equal(statuses().at(-1), "resyncing");
  ws.pong();
  assert.equal(statuses().at(-1), "resynced");
  assert.equal(client.stats.resyncs, 1);
});

test("a lagged error resubscribes from the copy's revision", () => {
  const { ws, statuses } = live();
  ws.deliver({ type: "error", code: "lagged", message: "too slow", transcriptId: "t1" });
  const sub = ws.ops("subscribe").at(-1);
  assert.deepEqual([sub.fromRevision, sub.epoch], [2, EPOCH]);
  assert.equal(statuses().at(-1), "resyncing");
});

test("an event of a new epoch drops the copy and takes a fresh baseline", () => {
  const { client, ws, events } = live();
  ws.deliver(appended(3, 2, 1, { epoch: "e2" }));
  const sub = ws.ops("subscribe").at(-1);
  assert.equal("fromRevision" in sub, false);
  assert.equal("epoch" in sub, false);
  assert.equal(client.mirror("t1"), null);
  ws.deliver({ type: "baseline", snapshot: snapshot(1, 1, { epoch: "e2" }) });
  const baseline = events.filter((e) => e.type === "baseline").at(-1);
  assert.equal(baseline.mirror.epoch, "e2");
  assert.equal(client.mirror("t1").length, 1);
});

test("a baseline of a new epoch replaces the copy and says so", () => {
  const { ws, events } = live();
  ws.deliver({ type: "baseline", snapshot: snapshot(3, 3, { epoch: "e9" }) });
  const baseline = events.filter((e) => e.type === "baseline").at(-1);
  assert.equal(baseline.epochChanged, true);
});

test("not-found ends the subscription", () => {
  const { client, ws, events } = live();
  ws.deliver({ type: "error", code: "not-found", message: "gone", transcriptId: "t1" });
  const stop = events.find((e) => e.type === "stop");
  assert.deepEqual([stop.transcriptId, stop.code], ["t1", "not-found"]);
  assert.equal(client.subscriptions.has("t1"), false);
});

test("a lost connection reconnects after a jittered backoff and resumes from the revision", () => {
  const { client, ws, timers, statuses, socket } = live();
  ws.deliver(appended(3, 2, 1));
  ws.drop();
  assert.equal(statuses().at(-1), "reconnecting");
  assert.equal(FakeSocket.all.length, 1, "no new socket before the delay");
  timers.advance(124); // random() = 0.5 of 250 ms
  assert.equal(FakeSocket.all.length, 1);
  timers.advance(1);
  assert.equal(FakeSocket.all.length, 2);
  const next = socket();
  next.open();
  const sub = next.ops("subscribe").at(-1);
  assert.deepEqual([sub.transcriptId, sub.fromRevision, sub.epoch], ["t1", 3, EPOCH]);
  next.deliver(appended(4, 3, 1)); // seq starts again at 1 on the new connection
  next.pong();
  assert.equal(statuses().at(-1), "resynced");
  assert.equal(client.mirror("t1").revision, 4);
  assert.equal(client.stats.reconnects, 1);
  assert.equal(client.subscriptions.get("t1").continuity.counters.resumes, 1);
});

test("backoff grows while the server stays away, and resets once connected", () => {
  // WebSocket only: with "auto", every third dial would try the HTTP fallback (fallback.test.mjs).
  const { ws, timers, events, socket } = live({ transport: "websocket" });
  ws.drop();
  const delays = [];
  for (let i = 0; i < 6; i += 1) {
    delays.push(events.filter((e) => e.type === "status").at(-1).delayMs);
    timers.advance(10_000);
    socket().drop(); // the dial fails
  }
  assert.deepEqual(delays, [125, 250, 500, 1000, 2000, 2500]); // 0.5 * min(5000, 250 * 2^n)
  const last = events.filter((e) => e.type === "status").at(-1).delayMs;
  timers.advance(10_000);
  socket().open();
  socket().drop(1013, "too many connections"); // accepted, then turned away: still backing off
  assert.equal(events.filter((e) => e.type === "status").at(-1).delayMs, 2500);
  timers.advance(10_000);
  socket().open();
  socket().pong(); // the server answered: connected
  socket().drop();
  assert.equal(events.filter((e) => e.type === "status").at(-1).delayMs, 125);
  assert.equal(last, 2500);
});

test("backoffDelay is full jitter: uniform below an exponential cap", () => {
  assert.equal(backoffDelay(0, { random: () => 0 }), 0);
  assert.equal(backoffDelay(0, { initialMs: 100, random: () => 0.999 }), 99);
  assert.equal(backoffDelay(3, { initialMs: 100, random: () => 0.999 }), 799);
  assert.equal(backoffDelay(40, { initialMs: 100, maxMs: 3000, random: () => 0.999 }), 2997);
  for (let attempt = 0; attempt < 12; attempt += 1) {
    const d = backoffDelay(attempt);
    assert.ok(d >= 0 && d < Math.min(5000, 250 * 2 ** attempt), `${attempt}: ${d}`);
  }
});

test("an append resolves with its ack and carries an idempotency key", async () => {
  const { client, ws, events } = live();
  const sending = client.append("t1", [msg(2)]);
  const [op] = ws.ops("append");
  assert.equal(op.idempotencyKey, "key-1");
  assert.equal(op.transcriptId, "t1");
  ws.deliver({ type: "ack", ref: op.ref, transcriptId: "t1", revision: 3, start: 2, count: 1 });
  const ack = await sending;
  assert.deepEqual([ack.revision, ack.start, ack.count], [3, 2, 1]);
  assert.equal(client.pendingAppends.length, 0);
  assert.equal(events.filter((e) => e.type === "ack").length, 1);
});

test("an append whose ack was lost is sent again on the next connection with the same key", async () => {
  const { client, ws, timers, socket } = live();
  const sending = client.append("t1", [msg(2)]);
  const first = ws.ops("append")[0];
  ws.drop(); // the server may or may not have applied it
  timers.advance(1000);
  const next = socket();
  next.open();
  const again = next.ops("append");
  assert.equal(again.length, 1);
  assert.equal(again[0].idempotencyKey, first.idempotencyKey);
  assert.deepEqual(again[0].messages, first.messages);
  // The resume comes before the retry, so the copy is current when the ack arrives.
  const order = next.sent.map((op) => op.op);
  assert.ok(order.indexOf("subscribe") < order.indexOf("append"), order.join());
  next.deliver({ type: "ack", ref: again[0].ref, transcriptId: "t1", revision: 3, start: 2, count: 1, duplicate: true });
  const ack = await sending;
  assert.equal(ack.duplicate, true);
  assert.equal(client.stats.duplicateAcks, 1);
  assert.equal(client.pendingAppends.length, 0);
});

test("an append made while disconnected waits for the connection", async () => {
  const { client, ws, timers, socket } = live();
  ws.drop();
  const sending = client.append("t1", [msg(2)], { idempotencyKey: "mine" });
  assert.equal(ws.ops("append").length, 0);
  assert.deepEqual(client.pendingAppends.map((p) => p.key), ["mine"]);
  timers.advance(1000);
  socket().open();
  const [op] = socket().ops("append");
  assert.equal(op.idempotencyKey, "mine");
  socket().deliver({ type: "ack", ref: op.ref, transcriptId: "t1", revision: 3, start: 2, count: 1 });
  assert.equal((await sending).revision, 3);
});

test("an append the server refuses rejects with the server's code and is not retried", async () => {
  const { client, ws, timers, socket } = live();
  const sending = client.append("t1", [{ role: "nobody", content: "x" }]);
  const [op] = ws.ops("append");
  ws.deliver({ type: "error", ref: op.ref, transcriptId: "t1", code: "invalid-message", message: "messages[0].role" });
  await assert.rejects(sending, (err) => err instanceof ServerError && err.code === "invalid-message");
  assert.equal(client.subscriptions.has("t1"), true, "the subscription is not affected");
  ws.drop();
  timers.advance(1000);
  socket().open();
  assert.equal(socket().ops("append").length, 0);
});

test("close() rejects pending appends and stops reconnecting", async () => {
  const { client, timers, statuses } = live();
  const sending = client.append("t1", [msg(2)]);
  client.close();
  await assert.rejects(sending, /client closed/);
  timers.advance(60_000);
  assert.equal(FakeSocket.all.length, 1);
  assert.equal(statuses().at(-1), "closed");
});

test("a server that refuses the token is not retried without getToken", () => {
  const { client, socket, timers, statuses } = setup({ token: "wrong" });
  client.connect();
  socket().open();
  socket().drop(4001, "unauthorized");
  timers.advance(60_000);
  assert.equal(FakeSocket.all.length, 1);
  assert.equal(statuses().at(-1), "unauthorized");
});

test("a close that says not to reconnect (1008: a page origin not allowed) stops the client", () => {
  const { client, socket, timers, events, statuses } = setup();
  client.connect();
  socket().open();
  socket().drop(1008, "policy violation");
  timers.advance(60_000);
  assert.equal(FakeSocket.all.length, 1);
  assert.equal(statuses().at(-1), "refused");
  assert.match(events.at(-1).reason, /1008/);
});

test("a full server or one shutting down is retried with a growing backoff", () => {
  const { client, socket, timers, events } = setup({ token: "t" });
  client.connect();
  const delays = [];
  for (const code of [1013, 1001, 1013]) {
    socket().open();
    socket().drop(code);
    const status = events.filter((e) => e.type === "status").at(-1);
    assert.equal(status.state, "reconnecting");
    delays.push(status.delayMs);
    timers.advance(10_000);
  }
  assert.deepEqual(delays, [125, 250, 500]);
  assert.equal(FakeSocket.all.length, 4);
});

test("getToken is asked before each connection, and again after a 4001", async () => {
  const given = ["first", "second", "second"];
  let asked = 0;
  const { client, socket, timers, statuses } = setup({ getToken: async () => given[asked++] });
  client.connect();
  await Promise.resolve();
  await Promise.resolve();
  socket().open();
  assert.deepEqual(socket().sent[0], { op: "auth", token: "first", ref: "auth:1" });
  socket().drop(4001, "unauthorized"); // expired or refused: ask for a new one
  timers.advance(10_000);
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(asked, 2);
  socket().open();
  assert.equal(socket().sent[0].token, "second");
  socket().drop(4001, "unauthorized"); // refused again ...
  timers.advance(10_000);
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(asked, 3); // ... and getToken has nothing new: stop, do not hammer
  assert.equal(FakeSocket.all.length, 2);
  assert.equal(statuses().at(-1), "unauthorized");
});

test("a JWT is renewed before its exp with an auth op on the open connection", async () => {
  const jwt = (exp) => `h.${btoa(JSON.stringify({ sub: "a", exp })).replace(/=+$/, "")}.s`;
  const tokens = [jwt(100), jwt(200)]; // seconds; the fake clock starts at 0
  let asked = 0;
  const { client, socket, timers } = setup({ getToken: () => tokens[asked++] });
  client.connect();
  await Promise.resolve();
  await Promise.resolve();
  const ws = socket();
  ws.open();
  ws.deliver({ type: "pong", ref: "auth:1" });
  timers.advance(79_000); // 100 s of life: renewed 20 s before exp
  assert.equal(ws.ops("auth").length, 1);
  timers.advance(1_000);
  await Promise.resolve();
  await Promise.resolve();
  assert.deepEqual(ws.ops("auth").at(-1), { op: "auth", token: tokens[1], ref: "auth:2" });
  assert.equal(FakeSocket.all.length, 1); // the same connection
});

test("CLOSE_ADVICE is the error table's close codes", async () => {
  const { readFile } = await import("node:fs/promises");
  const table = JSON.parse(await readFile(new URL("../cases/errors.json", import.meta.url), "utf-8"));
  const advice = Object.fromEntries(table.closes.map((row) => [row.code, row.reconnect]));
  assert.deepEqual({ ...CLOSE_ADVICE }, advice);
  assert.equal(tokenExpiry(`h.${btoa('{"exp":5}')}.s`), 5000);
  assert.equal(tokenExpiry("opaque"), null);
});

test("a connection that leaves a heartbeat ping unanswered for a period is given up", () => {
  const { ws, timers, statuses } = live({ heartbeatMs: 1000 });
  timers.advance(1000);
  assert.equal(ws.ops("ping").at(-1).ref, "heartbeat");
  ws.pong(); // any frame counts as a sign of life
  timers.advance(1000);
  assert.equal(ws.closed, null);
  assert.equal(ws.ops("ping").filter((p) => p.ref === "heartbeat").length, 2);
  timers.advance(1000); // the second ping got nothing back
  assert.equal(ws.closed?.code, 4000);
  assert.equal(statuses().at(-1), "reconnecting");
});

test("appends fail at once after close() and when the server refuses the token", async () => {
  const { client } = live();
  client.close();
  await assert.rejects(client.append("t1", [msg(2)]), /client closed/);
  const other = setup({ token: "wrong" });
  other.client.connect();
  const early = other.client.append("t1", [msg(0)]);
  other.socket().open();
  other.socket().drop(4001, "unauthorized");
  await assert.rejects(early, /unauthorized/);
});

test("an event that does not fit the copy makes the client start over from a baseline", () => {
  const { client, ws, events } = live();
  // Revision 3 follows, but its messages claim to start at 7: the copy cannot take it.
  ws.deliver(appended(3, 7, 1));
  assert.equal(events.filter((e) => e.type === "error").at(-1).code, "mirror");
  const sub = ws.ops("subscribe").at(-1);
  assert.equal("fromRevision" in sub, false);
  assert.equal(client.mirror("t1"), null);
});

test("TranscriptCopy closes the open segment at the event's end", () => {
  const mirror = new TranscriptCopy(snapshot(3, 3));
  mirror.apply({
    transcriptId: "t1", epoch: EPOCH, revision: 4, occurredAt: 0,
    change: { kind: "segment-started", previousStart: 0, start: 3, end: 3 },
  });
  assert.deepEqual(mirror.segments, [{ start: 0, end: 3 }, { start: 3, end: null }]);
  assert.throws(() => mirror.apply({ ...appended(5, 1, 1).event }), /append at index 1 .* of length 3/);
});

test("attachmentBytes: text stays text, base64 of binary is decoded", () => {
  const text = new TextDecoder().decode(attachmentBytes({ content: "plain text ✓" }));
  assert.equal(text, "plain text ✓");
  // "aGVsbG8=" is base64 of UTF-8 "hello": by the LMML rule it is the file's text itself.
  assert.equal(new TextDecoder().decode(attachmentBytes({ content: "aGVsbG8=" })), "aGVsbG8=");
  assert.deepEqual([...attachmentBytes({ content: "/wAB" })], [0xff, 0x00, 0x01]);
});

test("newIdempotencyKey makes distinct UUIDs", () => {
  const keys = new Set(Array.from({ length: 100 }, newIdempotencyKey));
  assert.equal(keys.size, 100);
  for (const key of keys) assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});

// --- windows and loadEarlier ------------------------------------------------------------

/** A fake fetch of the HTTP API over a transcript of `length` messages in `epoch`. */
function fakeServer(length, epoch = EPOCH) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    const query = new URL(url).searchParams;
    if (query.get("epoch") !== epoch) {
      return { ok: false, status: 409, json: async () => ({ code: "epoch-changed", detail: "re-created" }) };
    }
    const start = Number(query.get("start"));
    const end = Math.min(Number(query.get("end")), length);
    const messages = Array.from({ length: end - start }, (_, i) => msg(start + i));
    return { ok: true, status: 200, json: async () => ({ transcriptId: "t1", epoch, revision: 1, start, end, length, messages }) };
  };
  return { fetch, calls };
}

function windowed(length, tail, options = {}) {
  const s = setup(options);
  s.client.subscribe("t1", { window: { tail } });
  s.client.connect();
  const ws = s.socket();
  ws.open();
  const full = snapshot(1, length);
  ws.deliver({ type: "baseline", snapshot: { ...full, start: length - tail, messages: full.messages.slice(length - tail), length } });
  ws.pong();
  return { ...s, ws };
}

test("a windowed subscription sends its window, on every resubscribe too", () => {
  const { client, ws, timers, socket } = windowed(10, 3);
  assert.deepEqual(ws.ops("subscribe")[0].window, { tail: 3 });
  assert.equal(client.mirror("t1").start, 7);
  ws.drop();
  timers.advance(10_000);
  socket().open();
  const [resume] = socket().ops("subscribe");
  assert.deepEqual(resume, { op: "subscribe", transcriptId: "t1", fromRevision: 1, epoch: EPOCH, window: { tail: 3 } });
});

test("loadEarlier fetches older messages with the copy's epoch and prepends them in order", async () => {
  const server = fakeServer(10);
  const { client, events } = windowed(10, 3, { fetch: server.fetch, httpUrl: "http://server" });
  const earlier = [];
  client.on("earlier", (e) => earlier.push(e));
  assert.equal(await client.loadEarlier("t1", 4), 4);
  const copy = client.mirror("t1");
  assert.equal(copy.start, 3);
  assert.deepEqual(copy.messages.map((m) => m.content), Array.from({ length: 7 }, (_, i) => `message ${i + 3}`));
  assert.match(server.calls[0].url, /^http:\/\/server\/v1\/transcripts\/t1\/messages\?start=3&end=7&epoch=e1$/);
  assert.equal(earlier[0].start, 3);
  assert.equal(await client.loadEarlier("t1", 100), 3); // only 3 were left
  assert.equal(await client.loadEarlier("t1", 100), 0);
  assert.equal(client.mirror("t1").start, 0);
  assert.equal(events.filter((e) => e.type === "error").length, 0);
});

test("loadEarlier of a transcript created again since is refused and changes nothing", async () => {
  const server = fakeServer(10, "e2");
  const { client } = windowed(10, 3, { fetch: server.fetch, httpUrl: "http://server" });
  await assert.rejects(client.loadEarlier("t1", 5), (err) => err instanceof ServerError && err.code === "epoch-changed");
  assert.equal(client.mirror("t1").start, 7);
});

test("View changes are applied to the copy and emitted", () => {
  const { client, ws, events } = live({ revision: 2, length: 2 });
  const views = [];
  client.on("view", (v) => views.push(v));
  ws.deliver({
    type: "increment",
    event: { transcriptId: "t1", epoch: EPOCH, revision: 3, occurredAt: 1, change: { kind: "view-changed", name: "draft", start: 1 } },
  });
  assert.deepEqual(client.mirror("t1").views, [{ name: "draft", start: 1, end: null }]);
  assert.deepEqual([views[0].name, views[0].left, views[0].revision], ["draft", false, 3]);
  assert.equal(events.filter((e) => e.type === "segment").length, 0);
});

test("presence: subscribe asks for it, frames keep a copy and emit 'presence', the own state is stated again after a reconnect", () => {
  const s = setup();
  const seen = [];
  s.client.on("presence", (detail) => seen.push(detail));
  s.client.subscribe("t1", { presence: true });
  s.client.connect();
  let ws = s.socket();
  ws.open();
  assert.equal(ws.ops("subscribe")[0].presence, true);
  ws.deliver({ type: "baseline", snapshot: snapshot(2, 2) });
  ws.pong();
  const counts = (viewers, writers = 0) => ({ viewers, writers, agents: 0 });
  ws.deliver({ type: "presence", transcriptId: "t1", counts: counts(0), members: [] });
  s.client.statePresence("t1", { name: "Ana", state: { typing: true } });
  assert.deepEqual(ws.ops("presence"), [{ op: "presence", transcriptId: "t1", name: "Ana", state: { typing: true } }]);
  const ana = { id: "c1", who: "Ana", kind: "viewer", state: { typing: true } };
  ws.deliver({ type: "presence", transcriptId: "t1", counts: counts(1), joined: [ana] });
  ws.deliver({
    type: "presence",
    transcriptId: "t1",
    counts: counts(1, 1),
    joined: [{ id: "c2", who: "Bo", kind: "writer" }],
  });
  assert.deepEqual(
    seen.at(-1).members.map((m) => [m.who, m.kind]),
    [
      ["Ana", "viewer"],
      ["Bo", "writer"],
    ],
  );
  ws.deliver({ type: "presence", transcriptId: "t1", counts: counts(1), left: ["c2"] });
  assert.deepEqual(seen.at(-1).left, ["c2"]);
  assert.deepEqual(s.client.presence("t1").listed().map((m) => m.who), ["Ana"]);
  ws.deliver({ type: "presence", transcriptId: "t1", counts: counts(300) });
  assert.equal(seen.at(-1).members, null);
  assert.equal(seen.at(-1).counts.viewers, 300);
  assert.throws(() => s.client.statePresence("t1", { state: { x: "y".repeat(2000) } }), /1024 bytes/);
  // A new connection: subscribe again with presence, then the presence as stated.
  ws.drop(1006);
  s.timers.advance(10_000);
  ws = s.socket();
  ws.open();
  assert.equal(ws.ops("subscribe")[0].presence, true);
  assert.deepEqual(ws.ops("presence"), [{ op: "presence", transcriptId: "t1", name: "Ana", state: { typing: true } }]);
  s.client.leavePresence("t1");
  assert.deepEqual(ws.ops("presence").at(-1), { op: "presence", transcriptId: "t1", leave: true });
});
