// What the HTTP fallback costs a JS client, against the WebSocket in the same run.
//
// Two readers follow one transcript with client_js/client.js: one over the WebSocket, one on
// the HTTP fallback (transport "sse": SSE reads of the transcript's Durable Stream). A third
// client appends N messages over the WebSocket, paced RATE a second; for each message, the
// time from the append's call until each reader's "messages" event holds it. Then the two
// readers append in turn, each waiting for its ack (WebSocket op against HTTP POST): the
// acks' round trips. Percentiles in ms, and the fallback's over the WebSocket's.
//
//   tsync serve --store memory --port 8799 &
//   node scripts/measure_fallback.mjs ws://127.0.0.1:8799/v1/ws [N=500] [RATE=50]
//
// Node 22 has a WebSocket; on Node 20 the ws package of tests/js_package is used
// (`cd tests/js_package && npm ci` once).

import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { TsyncClient } from "../client_js/client.js";

const [url = "ws://127.0.0.1:8799/v1/ws", n = "500", rate = "50"] = process.argv.slice(2);
const N = Number(n);
const RATE = Number(rate);
const WebSocket =
  globalThis.WebSocket ?? createRequire(fileURLToPath(new URL("../tests/js_package/package.json", import.meta.url)))("ws");
const id = `fallback-bench-${Date.now()}`;
const http = new TsyncClient(url).httpUrl;

const created = await fetch(`${http}/v1/transcripts`, {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ id }),
});
if (!created.ok) throw new Error(`create: ${created.status} ${await created.text()}`);

const sent = new Map(); // content -> when append() was called
const client = (transport) => new TsyncClient(url, { transport, WebSocket, heartbeatMs: 0 });
const live = (c) =>
  new Promise((resolve) => {
    const off = c.on("status", ({ state }) => {
      if (state === "live") {
        off();
        resolve();
      }
    });
  });
const readers = { websocket: client("websocket"), sse: client("sse") };
const latencies = { websocket: [], sse: [] };
for (const [name, reader] of Object.entries(readers)) {
  reader.on("messages", ({ messages }) => {
    const now = performance.now();
    for (const m of messages) if (sent.has(m.content)) latencies[name].push(now - sent.get(m.content));
  });
  reader.subscribe(id);
  const ready = live(reader);
  reader.connect();
  await ready;
}
const writer = client("websocket");
const writerReady = live(writer);
writer.connect();
await writerReady;

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const start = performance.now();
const acks = [];
for (let i = 0; i < N; i += 1) {
  const content = `m${i}`;
  sent.set(content, performance.now());
  acks.push(writer.append(id, [{ role: "user", content }]));
  const due = start + ((i + 1) * 1000) / RATE;
  await pause(Math.max(0, due - performance.now()));
}
await Promise.all(acks);
while (latencies.websocket.length < N || latencies.sse.length < N) await pause(10);

const roundTrips = { websocket: [], sse: [] };
for (let i = 0; i < 100; i += 1) {
  for (const [name, reader] of Object.entries(readers)) {
    const t0 = performance.now();
    await reader.append(id, [{ role: "assistant", content: `a${name}${i}` }]);
    roundTrips[name].push(performance.now() - t0);
  }
}

const pct = (xs, p) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
};
const row = (xs) => ({ p50: +pct(xs, 50).toFixed(2), p99: +pct(xs, 99).toFixed(2) });
const report = { transcript: id, appends: N, rate: RATE, delivery: {}, appendRoundTrip: {} };
for (const [key, table] of [["delivery", latencies], ["appendRoundTrip", roundTrips]]) {
  const ws = row(table.websocket);
  const sse = row(table.sse);
  report[key] = {
    websocket: ws,
    sse,
    ratio: { p50: +(sse.p50 / ws.p50).toFixed(2), p99: +(sse.p99 / ws.p99).toFixed(2) },
  };
}
console.log(JSON.stringify(report, null, 2));
for (const c of [...Object.values(readers), writer]) c.close();
