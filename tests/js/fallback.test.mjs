// The HTTP fallback: a client whose WebSockets cannot be opened reads over
// the transcript's Durable Stream (SSE) and appends with HTTP POSTs, through
// StreamFaceSocket, against a fake WebSocket class and a fake fetch that
// plays the server (its SSE answers are streams the test writes to).

import assert from "node:assert/strict";
import { test } from "node:test";

import { SseParser, StreamFaceSocket, TsyncClient, epochNumber, streamOffset } from "../../client_js/client.js";

// --- waiting ---------------------------------------------------------------------------

/**
 * What the fakes notify on every change they see (a request, a WebSocket made
 * or refused, a timer set, an event the client emits): a test waits for the
 * condition it needs, looked at again on each notification, never for a time.
 */
const changes = {
  waiters: new Set(),
  notify() {
    for (const wake of this.waiters) wake();
  },
};

/** Resolve once `condition()` is true; reject naming `what` after `ms` (real time). */
async function until(condition, what, ms = 5000) {
  let timer;
  let wake;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`waited ${ms} ms in vain for ${what}`)), ms);
  });
  try {
    while (!condition()) {
      const changed = new Promise((resolve) => {
        wake = resolve;
        changes.waiters.add(wake);
      });
      await Promise.race([changed, expired]);
      changes.waiters.delete(wake);
    }
  } finally {
    changes.waiters.delete(wake);
    clearTimeout(timer);
  }
}

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
    changes.notify();
  }
  send(data) {
    this.sent.push(JSON.parse(data));
    changes.notify();
  }
  close(code, reason) {
    this.closed = { code, reason };
    changes.notify();
  }
  open() {
    this.onopen?.({});
  }
  /** The handshake failed: closed before it opened (a proxy's 403 looks like this). */
  refuse() {
    this.closed = { code: 1006, reason: "" };
    this.onclose?.({ code: 1006, reason: "" });
  }
  deliver(...frames) {
    const lines = frames.map((f) => JSON.stringify({ seq: (this.seq += 1), ...f }));
    this.onmessage?.({ data: lines.join("\n") });
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
    changes.notify();
    return id;
  };
  clearTimeout = (id) => {
    this.pending = this.pending.filter((t) => t.id !== id);
  };
  setInterval = () => this.nextId++;
  clearInterval = () => {};
  now = () => this.time;
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


const EPOCH = "0a1b2c3d4e5f67890abcdef012345678";
const msg = (i) => ({ role: i % 2 ? "assistant" : "user", content: `message ${i}` });

function snapshot(revision, length, start = 0) {
  return {
    transcriptId: "t1",
    epoch: EPOCH,
    revision,
    start,
    length,
    messages: Array.from({ length: length - start }, (_, i) => msg(start + i)),
    activeStart: 0,
    segments: [{ start: 0, end: null }],
  };
}

function event(revision, start, count = 1) {
  return {
    transcriptId: "t1",
    epoch: EPOCH,
    revision,
    occurredAt: 1700000000000 + revision,
    change: { kind: "messages-appended", start, messages: Array.from({ length: count }, (_, i) => msg(start + i)) },
  };
}

const json = (body, status = 200, type = "application/json") =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": type } });
const problem = (status, code, detail, extra = {}) =>
  json({ type: "about:blank", title: code, status, code, detail, ...extra }, status, "application/problem+json");

/**
 * The server, as fetch sees it: a transcript of `length` messages at `revision`;
 * every SSE request gets a stream the test writes with sse.data()/control()/end().
 */
class FakeServer {
  constructor({ revision = 2, length = 2 } = {}) {
    this.revision = revision;
    this.length = length;
    this.requests = [];
    this.streams = [];
    this.down = false;
    this.appends = []; // bodies of POST .../messages
    this.answerAppend = (body) => {
      const start = this.length;
      this.length += body.messages.length;
      this.revision += 1;
      return json({ transcriptId: "t1", revision: this.revision, start, count: body.messages.length, duplicate: false }, 201);
    };
    this.answerStream = null; // (url) => Response, instead of a live stream
    this.fetch = this.fetch.bind(this);
  }

  async fetch(url, init = {}) {
    try {
      return this.answer(url, init);
    } finally {
      changes.notify();
    }
  }

  answer(url, init) {
    const u = new URL(url);
    const request = { path: u.pathname, query: u.search, method: init.method ?? "GET", headers: init.headers ?? {}, body: init.body };
    this.requests.push(request);
    if (this.down) throw new TypeError("fetch failed");
    if (u.pathname === "/healthz") return json({ status: "ok" });
    if (u.pathname === "/v1/transcripts/t1") {
      const start = Number(u.searchParams.get("start") ?? 0);
      const end = u.searchParams.get("end");
      const snap = snapshot(this.revision, this.length, start);
      if (end !== null) snap.messages = snap.messages.slice(0, Number(end) - start);
      return json(snap);
    }
    if (u.pathname === "/v1/transcripts/t1/messages" && request.method === "POST") {
      const body = JSON.parse(init.body);
      this.appends.push(body);
      return this.answerAppend(body);
    }
    if (u.pathname === "/v1/stream/transcripts/t1") {
      if (this.answerStream) {
        const answer = this.answerStream(u);
        if (answer) return answer;
      }
      let controller;
      const body = new ReadableStream({
        start(c) {
          controller = c;
        },
      });
      const encoder = new TextEncoder();
      const write = (text) => controller.enqueue(encoder.encode(text));
      const stream = {
        offset: u.searchParams.get("offset"),
        live: u.searchParams.get("live"),
        data: (events) => write(`event: data\ndata:${JSON.stringify(events)}\n\n`),
        control: (control) => write(`event: control\ndata:${JSON.stringify(control)}\n\n`),
        end: () => controller.close(),
      };
      this.streams.push(stream);
      init.signal?.addEventListener("abort", () => {
        stream.aborted = true;
        try {
          controller.error(new DOMException("aborted", "AbortError"));
        } catch {
          // closed already
        }
      });
      return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
    }
    return new Response("not found", { status: 404 });
  }

  stream() {
    return this.streams.at(-1);
  }
}

function setup(options = {}) {
  FakeSocket.all = [];
  const timers = new FakeTimers();
  const server = new FakeServer(options.server);
  let keys = 0;
  const client = new TsyncClient("ws://server/v1/ws", {
    WebSocket: FakeSocket,
    fetch: server.fetch,
    timers,
    random: () => 0.5,
    newKey: () => `key-${(keys += 1)}`,
    heartbeatMs: 0,
    ...options.client,
  });
  const events = [];
  for (const type of ["status", "baseline", "messages", "stop", "error"]) {
    client.on(type, (detail) => {
      events.push({ type, ...detail });
      changes.notify();
    });
  }
  const statuses = () => events.filter((e) => e.type === "status").map((e) => `${e.state}/${e.transport}`);
  const has = (type) => events.some((e) => e.type === type);
  return { client, timers, server, events, statuses, has };
}

/** Wait for one more WebSocket than there are now (dialled after GET /healthz answered). */
async function anotherWebSocket() {
  const sockets = FakeSocket.all.length;
  await until(() => FakeSocket.all.length > sockets, "one more WebSocket");
}

/**
 * Refuse two WebSockets; the HTTP API answers, so a third is tried at once and
 * refused too: the fallback comes up.
 */
async function refuseWebSockets({ timers, server, has }) {
  for (let i = 0; i < 2; i += 1) {
    FakeSocket.all.at(-1).refuse();
    timers.advance(10_000);
  }
  await until(() => FakeSocket.all.length === 3, "a third WebSocket once GET /healthz answered");
  FakeSocket.all.at(-1).refuse();
  await until(() => (has("baseline") && server.streams.length > 0) || has("stop"), "the fallback's baseline and stream, or a stop");
}

/** Subscribe t1, connect, and let the WebSockets fail to open: the fallback comes up. */
async function fallenBack(options = {}) {
  const s = setup(options);
  s.client.subscribe("t1", options.window ? { window: options.window } : {});
  s.client.connect();
  await refuseWebSockets(s);
  return s;
}

// --- pure parts --------------------------------------------------------------------------

test("streamOffset is the server's offset_of: the epoch's hex digits modulo 10, then the revision", () => {
  // server.streams.transcripts.offset_of("0a1b2c3d4e5f67890abcdef012345678", 5)
  assert.equal(streamOffset(EPOCH, 5), "0011223344556789_0000000000000005");
  assert.equal(epochNumber("zz"), "0000000000000000");
  assert.equal(streamOffset("abc", 0), "0000000000000012_0000000000000000");
});

test("SseParser: events cut anywhere, CRLF and CR line ends, comments, several data lines", () => {
  const text = ": hi\r\nevent: data\r\ndata:[1]\r\n\r\nevent:control\rdata: {\"a\":1}\r\rdata:x\ndata: y\n\n";
  for (const size of [1, 2, 3, 7, text.length]) {
    const parser = new SseParser();
    const events = [];
    for (let i = 0; i < text.length; i += size) events.push(...parser.push(text.slice(i, i + size)));
    assert.deepEqual(events, [
      { event: "data", data: "[1]" },
      { event: "control", data: '{"a":1}' },
      { event: "message", data: "x\ny" },
    ]);
  }
});

// --- the switch ---------------------------------------------------------------------------

test("when WebSockets fail to open while the HTTP API answers, it follows the transcript over SSE and says so", async () => {
  const { client, server, events, statuses, has } = await fallenBack();
  assert.equal(FakeSocket.all.length, 3);
  assert.equal(client.transport, "sse");
  const paths = server.requests.map((r) => r.path + r.query);
  assert.deepEqual(paths, [
    "/healthz", // asked after two WebSockets failed: the server is there
    "/healthz", // the fallback opens
    "/v1/transcripts/t1",
    `/v1/stream/transcripts/t1?offset=${streamOffset(EPOCH, 2)}&live=sse`,
  ]);
  assert.equal(events.filter((e) => e.type === "baseline").length, 1);
  // Not live before the stream caught up (the barrier waits for its first control).
  assert.ok(!statuses().includes("live/sse"));
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => statuses().includes("live/sse"), "live over SSE");
  assert.deepEqual(statuses(), [
    "connecting/websocket",
    "connecting/websocket",
    "connecting/websocket",
    "connecting/sse",
    "live/sse",
  ]);
  // An increment arrives as a data event and is applied like a WebSocket's.
  server.stream().data([event(3, 2, 2)]);
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 3), upToDate: true });
  await until(() => has("messages"), "the increment applied");
  const appended = events.filter((e) => e.type === "messages");
  assert.deepEqual(appended.map((e) => [e.start, e.messages.length, e.revision]), [[2, 2, 3]]);
  assert.equal(client.mirror("t1").revision, 3);
  assert.equal(client.mirror("t1").length, 4);
  assert.equal(client.stats.fallbacks, 1);
  client.close();
  assert.ok(server.stream().aborted);
});

test("an SSE answer that ends is read on from the revision it reached", async () => {
  const { client, server } = await fallenBack();
  server.stream().data([event(3, 2)]);
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 3), upToDate: true });
  server.stream().end();
  await until(() => server.streams.length === 2, "the stream asked again");
  assert.equal(server.streams.length, 2);
  assert.equal(server.stream().offset, streamOffset(EPOCH, 3));
  assert.equal(client.mirror("t1").revision, 3);
  client.close();
});

test("a resume the stream no longer serves (410) takes a fresh baseline", async () => {
  const { client, server, events, statuses } = await fallenBack();
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => statuses().includes("live/sse"), "live over SSE");
  // The connection drops (a fetch fails); the next one resumes from revision 2, which is gone.
  server.down = true;
  server.stream().end();
  await until(() => client.state === "reconnecting", "the client reconnecting");
  assert.equal(client.state, "reconnecting");
  server.down = false;
  server.revision = 5;
  server.length = 5;
  server.answerStream = (u) => (u.searchParams.get("offset") === streamOffset(EPOCH, 2) ? new Response("gone", { status: 410 }) : null);
  // The next dial: the HTTP API answers, one more WebSocket is refused, the fallback again.
  client._timers.advance(10_000);
  await anotherWebSocket();
  FakeSocket.all.at(-1).refuse();
  const baselines = () => events.filter((e) => e.type === "baseline");
  await until(() => baselines().length === 2 && server.stream().offset === streamOffset(EPOCH, 5), "a fresh baseline and a stream from it");
  assert.equal(baselines().length, 2);
  assert.equal(client.mirror("t1").revision, 5);
  assert.equal(server.stream().offset, streamOffset(EPOCH, 5));
  client.close();
});

test("a window is resolved as the server would: the tail of the length", async () => {
  const { client, server } = await fallenBack({ server: { revision: 4, length: 10 }, window: { tail: 3 } });
  const reads = server.requests.filter((r) => r.path === "/v1/transcripts/t1").map((r) => r.query);
  assert.deepEqual(reads, ["?start=0&end=0", "?start=7"]);
  assert.equal(client.mirror("t1").start, 7);
  assert.equal(client.mirror("t1").length, 10);
  client.close();
});

test("appends are HTTP POSTs with the idempotency key; a refusal rejects, a lost one is sent again with its key", async () => {
  const { client, server, statuses } = await fallenBack();
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => statuses().includes("live/sse"), "live over SSE");
  const ack = await client.append("t1", [msg(2)], { expectedRevision: 2 });
  assert.deepEqual(server.appends[0], { messages: [msg(2)], idempotencyKey: "key-1", expectedRevision: 2 });
  assert.equal(ack.revision, 3);
  const post = server.requests.find((r) => r.method === "POST");
  assert.equal(post.headers["Content-Type"], "application/json");

  server.answerAppend = () => problem(409, "revision-conflict", "transcript 't1' is at revision 3, not 1", { revision: 3 });
  await assert.rejects(client.append("t1", [msg(3)], { expectedRevision: 1 }), (err) => {
    assert.equal(err.code, "revision-conflict");
    assert.equal(err.frame.revision, 3);
    return true;
  });

  // The POST cannot reach the server: the connection is lost, the append waits and is
  // sent again, with the same key, on the next connection.
  server.down = true;
  let resolved = null;
  const pending = client.append("t1", [msg(3)]).then((a) => {
    resolved = a;
  });
  await until(() => client.state === "reconnecting", "the client reconnecting");
  assert.equal(client.state, "reconnecting");
  assert.equal(resolved, null);
  server.down = false;
  server.answerAppend = (body) => json({ transcriptId: "t1", revision: 4, start: 3, count: body.messages.length, duplicate: true });
  // The next dial: the HTTP API answers, one more WebSocket is refused, the fallback again.
  const streams = server.streams.length;
  client._timers.advance(10_000);
  await anotherWebSocket();
  FakeSocket.all.at(-1).refuse();
  await until(() => server.streams.length > streams, "the fallback's new stream");
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await pending;
  assert.equal(resolved.duplicate, true);
  const posts = server.requests.filter((r) => r.method === "POST").slice(-2);
  const keys = posts.map((r) => JSON.parse(r.body).idempotencyKey);
  assert.deepEqual(keys, ["key-3", "key-3"]);
  client.close();
});

test("the token goes in the Authorization header; a 401 is a refused token", async () => {
  const { client, server, statuses } = await fallenBack({ client: { token: "tok" } });
  const reads = server.requests.filter((r) => r.path.startsWith("/v1/"));
  assert.ok(reads.length >= 2);
  for (const r of reads) assert.equal(r.headers.Authorization, "Bearer tok");
  assert.ok(!server.requests.some((r) => r.query.includes("tok")));
  server.answerStream = () => new Response("the token has expired", { status: 401 });
  server.stream().end();
  await until(() => client.state === "unauthorized", "the token refused");
  assert.equal(client.state, "unauthorized");
  assert.equal(statuses().at(-1), "unauthorized/sse");
});

test("not-found over the fallback ends the subscription", async () => {
  const s = setup();
  s.client.subscribe("gone");
  s.client.connect();
  await refuseWebSockets(s);
  const stop = s.events.find((e) => e.type === "stop");
  assert.equal(stop.code, "not-found");
  assert.equal(stop.transcriptId, "gone");
  s.client.close();
});

test("transport 'websocket' never falls back; transport 'sse' never dials a WebSocket", async () => {
  const ws = setup({ client: { transport: "websocket" } });
  ws.client.subscribe("t1");
  ws.client.connect();
  for (let i = 0; i < 5; i += 1) {
    FakeSocket.all.at(-1).refuse();
    ws.timers.advance(10_000);
  }
  await until(() => FakeSocket.all.length === 6, "the sixth WebSocket");
  assert.equal(FakeSocket.all.length, 6);
  assert.equal(ws.server.requests.length, 0);
  ws.client.close();

  const sse = setup({ client: { transport: "sse" } });
  sse.client.subscribe("t1");
  sse.client.connect();
  await until(() => sse.server.streams.length === 1, "the SSE stream asked");
  sse.server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  sse.timers.advance(600_000);
  await until(() => sse.client.state === "live", "live over SSE");
  assert.equal(FakeSocket.all.length, 0);
  assert.equal(sse.client.state, "live");
  assert.equal(sse.client.transport, "sse");
  sse.client.close();
  assert.throws(() => new TsyncClient("ws://x/v1/ws", { transport: "carrier-pigeon" }), TypeError);
});

test("a server that answers neither way is not a blocked WebSocket: the WebSocket is tried again", async () => {
  const { client, server, timers, events } = setup({ server: {} });
  server.down = true;
  client.subscribe("t1");
  client.connect();
  for (let i = 0; i < 2; i += 1) {
    FakeSocket.all.at(-1).refuse();
    timers.advance(10_000);
  }
  // GET /healthz fails: the next dial is scheduled.
  await until(() => events.some((e) => e.type === "status" && /cannot be reached/.test(e.reason ?? "")), "the server found away");
  assert.equal(client.state, "connecting");
  assert.equal(client.transport, "websocket");
  assert.equal(FakeSocket.all.length, 2);
  timers.advance(10_000);
  assert.equal(FakeSocket.all.length, 3);
  assert.ok(!server.requests.some((r) => r.path.startsWith("/v1/")));
  client.close();
});

test("on the fallback a WebSocket is tried now and then; once one opens the client moves back and resumes", async () => {
  const { client, server, timers, statuses } = await fallenBack({ client: { webSocketRetryMs: 30_000 } });
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  server.stream().data([event(3, 2)]);
  await until(() => statuses().includes("live/sse") && client.mirror("t1").revision === 3, "live over SSE at revision 3");
  timers.advance(30_000);
  const probe = FakeSocket.all.at(-1);
  assert.equal(FakeSocket.all.length, 4);
  probe.refuse(); // still blocked: try again later
  assert.equal(client.transport, "sse");
  timers.advance(30_000);
  const second = FakeSocket.all.at(-1);
  assert.equal(FakeSocket.all.length, 5);
  second.open();
  assert.deepEqual(second.closed, { code: 1000, reason: "probe" });
  assert.ok(server.stream().aborted);
  const ws = FakeSocket.all.at(-1);
  assert.equal(FakeSocket.all.length, 6);
  ws.open();
  const subscribe = ws.sent.find((op) => op.op === "subscribe");
  assert.deepEqual(subscribe, { op: "subscribe", transcriptId: "t1", fromRevision: 3, epoch: EPOCH });
  ws.deliver({ type: "pong", ref: ws.sent.find((op) => op.op === "ping").ref });
  assert.equal(client.transport, "websocket");
  assert.deepEqual(statuses().slice(-2), ["reconnecting/websocket", "resynced/websocket"]);
  client.close();
});

test("StreamFaceSocket answers an op it cannot carry with an error, and a ping after the subscribes it waits for", async () => {
  const server = new FakeServer();
  const socket = new StreamFaceSocket("http://server", { fetch: server.fetch });
  const frames = [];
  socket.onmessage = ({ data }) => {
    frames.push(JSON.parse(data));
    changes.notify();
  };
  await new Promise((resolve) => {
    socket.onopen = resolve;
  });
  socket.send(JSON.stringify({ op: "subscribe", transcriptId: "t1" }) + "\n" + JSON.stringify({ op: "ping", ref: "p" }));
  socket.send(JSON.stringify({ op: "setView", transcriptId: "t1", name: "v", start: 0, ref: "v" }));
  await until(() => frames.length === 2, "the error and the baseline");
  assert.deepEqual(frames.map((f) => f.type), ["error", "baseline"]);
  assert.equal(frames[0].ref, "v");
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => frames.length === 3, "the pong");
  assert.deepEqual(frames.map((f) => [f.type, f.seq]), [["error", 1], ["baseline", 2], ["pong", 3]]);
  socket.close();
});

test("appends made together are POSTed one after another, in the order made", async () => {
  const { client, server, statuses } = await fallenBack();
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => statuses().includes("live/sse"), "live over SSE");
  const answers = [];
  const plain = server.answerAppend;
  server.answerAppend = (body) => new Promise((resolve) => answers.push(() => resolve(plain(body))));
  const first = client.append("t1", [msg(2)]);
  const second = client.append("t1", [msg(3)]);
  await until(() => server.appends.length > 0, "the first POST");
  assert.equal(server.appends.length, 1); // the second waits for the first's answer
  answers.shift()();
  assert.equal((await first).start, 2);
  await until(() => server.appends.length === 2, "the second POST");
  assert.equal(server.appends.length, 2);
  answers.shift()();
  assert.equal((await second).start, 3);
  assert.deepEqual(server.appends.map((b) => b.messages[0].content), ["message 2", "message 3"]);
  client.close();
});

test("a runtime with no WebSocket at all (Node 20 without ws) uses the fallback with transport 'auto'", async (t) => {
  if (globalThis.WebSocket) return t.skip("this runtime has a WebSocket");
  const loadable = await import("ws").then(
    () => true,
    () => false,
  );
  if (loadable) return t.skip("the ws package is installed here");
  const server = new FakeServer();
  const statuses = [];
  const client = new TsyncClient("ws://server/v1/ws", { fetch: server.fetch, heartbeatMs: 0 });
  client.on("status", ({ state, transport }) => {
    statuses.push(`${state}/${transport}`);
    changes.notify();
  });
  client.subscribe("t1");
  client.connect();
  await until(() => server.streams.length === 1, "the SSE stream asked");
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => client.state === "live", "live over SSE");
  assert.equal(client.state, "live");
  assert.equal(client.transport, "sse");
  assert.deepEqual(statuses, ["connecting/websocket", "live/sse"]);
  client.close();
});

test("writeUIMessageStream over the fallback sends no draft ops and commits with POST ?format=ui", async () => {
  const { client, server, statuses, events } = await fallenBack();
  server.stream().control({ streamNextOffset: streamOffset(EPOCH, 2), upToDate: true });
  await until(() => statuses().includes("live/sse"), "live over SSE");
  const chunks = [
    { type: "start", messageId: "reply-1" },
    { type: "text-start", id: "t" },
    { type: "text-delta", id: "t", delta: "Hi" },
    { type: "text-end", id: "t" },
    { type: "finish" },
  ];
  const ack = await client.writeUIMessageStream("t1", chunks, { draftId: "d1" });
  assert.equal(ack.revision, 3);
  const post = server.requests.find((r) => r.method === "POST");
  assert.equal(post.query, "?format=ui");
  const body = JSON.parse(post.body);
  assert.equal(body.draftId, "d1");
  assert.deepEqual(body.messages, [
    { id: "reply-1", role: "assistant", parts: [{ type: "text", text: "Hi", state: "done" }] },
  ]);
  assert.equal(events.filter((e) => e.type === "error").length, 0); // no draft op refused
  client.close();
});
