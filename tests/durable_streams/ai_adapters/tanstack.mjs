// @durable-streams/tanstack-ai-transport against tsync's /v1/stream, as its
// README's "recommended chat session flow" describes: an app server
// (node:http) whose POST /api/chat?id= answers with
// toDurableChatSessionResponse (the user's message echoed, then the model's
// TanStack chunks, into one session stream of tsync's) and whose GET
// /api/chat-stream?id= proxies reads to that stream, forwarding the query;
// and durableStreamConnection's subscribe/send, with
// materializeSnapshotFromDurableStream for a reload (SSR hydrate + resume).
//
// argv[2]: tsync's base URL. Tab 1 subscribes and sends; once the reply shows
// text, a reload materializes the snapshot and subscribes from its offset;
// only then does the model go on. A late tab subscribes with no offset (its
// MESSAGES_SNAPSHOT), and a second turn follows on the same session. Then
// TanStack AI's ChatClient (what @tanstack/ai-react's useChat runs) on a
// second session: one client sends, another one subscribed sees the turn.
// Prints {"ready": true}, then one JSON line; exits 1 after 30 s.
import http from "node:http";
import { Readable } from "node:stream";
import { ChatClient } from "@tanstack/ai-client";
import {
  durableStreamConnection,
  ensureDurableChatSessionStream,
  materializeSnapshotFromDurableStream,
  toDurableChatSessionResponse,
} from "@durable-streams/tanstack-ai-transport";

const [tsync] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 30000);

// -- the model: TanStack AI chunks; the first reply waits for the reload --
let goOn;
const reloaded = new Promise((resolve) => (goOn = resolve));
let turns = 0;
async function* reply(turn) {
  const messageId = `reply-${turn}`;
  yield { type: "RUN_STARTED", runId: `run-${turn}`, model: "fake", timestamp: Date.now() };
  yield { type: "TEXT_MESSAGE_START", messageId, role: "assistant", model: "fake", timestamp: Date.now() };
  yield { type: "TEXT_MESSAGE_CONTENT", messageId, delta: "Hello", content: "Hello", model: "fake", timestamp: Date.now() };
  if (turn === 1) await reloaded;
  const delta = [", world!", " again.", " there."][turn - 1];
  yield { type: "TEXT_MESSAGE_CONTENT", messageId, delta, content: `Hello${delta}`, model: "fake", timestamp: Date.now() };
  yield { type: "TEXT_MESSAGE_END", messageId, model: "fake", timestamp: Date.now() };
  yield { type: "RUN_FINISHED", runId: `run-${turn}`, finishReason: "stop", model: "fake", timestamp: Date.now() };
}

// -- the app server: the README's routes --
const writeUrl = (id) => `${tsync}/v1/stream/sessions/${encodeURIComponent(id)}`;
async function route(request, body) {
  const url = new URL(request.url, "http://app");
  const id = url.searchParams.get("id");
  if (!id) return Response.json({ error: "no chat id" }, { status: 400 });
  if (request.method === "POST" && url.pathname === "/api/chat") {
    const { messages } = JSON.parse(body);
    return toDurableChatSessionResponse({
      stream: { writeUrl: writeUrl(id) },
      newMessages: [messages.at(-1)],
      responseStream: reply(++turns),
    });
  }
  if (request.method === "GET" && url.pathname === "/api/chat-stream") {
    const upstream = new URL(writeUrl(id));
    for (const [key, value] of url.searchParams) if (key !== "id") upstream.searchParams.set(key, value);
    return fetch(upstream, { headers: request.headers.accept ? { accept: request.headers.accept } : {} });
  }
  return new Response("not found", { status: 404 });
}
const app = http.createServer(async (request, res) => {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const response = await route(request, Buffer.concat(chunks).toString("utf8"));
  const headers = Object.fromEntries(response.headers);
  delete headers["content-encoding"];
  delete headers["content-length"];
  delete headers["transfer-encoding"];
  res.writeHead(response.status, headers);
  if (response.body) {
    const body = Readable.fromWeb(response.body);
    res.on("close", () => body.destroy());
    body.pipe(res);
  } else res.end();
});
await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
const base = `http://127.0.0.1:${app.address().port}`;
const connection = (initialOffset, id = "s1") =>
  durableStreamConnection({
    sendUrl: `${base}/api/chat?id=${id}`,
    readUrl: `${base}/api/chat-stream?id=${id}`,
    initialOffset,
  });

/** Read a subscription until `done(chunks)`; its chunks. */
async function follow(conn, done) {
  const abort = new AbortController();
  const chunks = [];
  for await (const chunk of conn.subscribe(abort.signal)) {
    chunks.push(chunk);
    if (done(chunks)) break;
  }
  abort.abort();
  return chunks;
}
const ended = (messageId) => (chunks) =>
  chunks.some((c) => c.type === "TEXT_MESSAGE_END" && c.messageId === messageId);
const textOf = (chunks, messageId) =>
  chunks
    .filter((c) => c.type === "TEXT_MESSAGE_CONTENT" && c.messageId === messageId)
    .map((c) => c.delta)
    .join("");

console.log(JSON.stringify({ ready: true }));
// The page loader: the session exists, its (empty) snapshot and offset.
await ensureDurableChatSessionStream({ writeUrl: writeUrl("s1") });
const empty = await materializeSnapshotFromDurableStream({ readUrl: `${base}/api/chat-stream?id=s1` });

const tab = connection(empty.offset);
let reload = null;
const tabChunks = follow(tab, (chunks) => {
  if (!reload && textOf(chunks, "reply-1") !== "") {
    // A reload in the middle of the reply: SSR hydrate, then resume from its offset.
    reload = (async () => {
      const snapshot = await materializeSnapshotFromDurableStream({
        readUrl: `${base}/api/chat-stream?id=s1`,
      });
      goOn();
      const after = await follow(connection(snapshot.offset), ended("reply-1"));
      return { snapshot, after };
    })();
  }
  return ended("reply-1")(chunks);
});
await tab.send([{ id: "user-1", role: "user", parts: [{ type: "text", content: "Say hello" }] }]);
const seen = await tabChunks;
const { snapshot, after } = await reload;

// A late tab: no offset, so the catch-up comes as one MESSAGES_SNAPSHOT.
const late = await follow(connection(undefined), (chunks) => chunks.length >= 1);
// A second turn on the same session.
const second = connection(undefined);
const secondChunks = follow(second, ended("reply-2"));
await second.send([{ id: "user-2", role: "user", parts: [{ type: "text", content: "Again" }] }]);
const turn2 = await secondChunks;

// TanStack AI's ChatClient on a session: one tab sends, the other one sees it.
await ensureDurableChatSessionStream({ writeUrl: writeUrl("s2") });
const clients = ["sender", "watcher"].map((name) => {
  let changed;
  const client = new ChatClient({
    threadId: "s2",
    connection: connection(undefined, "s2"),
    onMessagesChange: () => changed?.(),
  });
  client.subscribe();
  const until = async (done) => {
    while (!done(client.getMessages())) await new Promise((resolve) => (changed = resolve));
  };
  return { name, client, until };
});
const answered = (messages) =>
  messages.some((m) => m.role === "assistant" && m.parts.some((p) => p.content === "Hello there."));
await clients[0].client.sendMessage("Hi");
await Promise.all(clients.map(({ until }) => until(answered)));
const tanstack = Object.fromEntries(
  clients.map(({ name, client }) => [
    name,
    client.getMessages().map((m) => ({ id: m.id, role: m.role, parts: m.parts })),
  ]),
);
clients.forEach(({ client }) => client.unsubscribe());

const types = (chunks) => chunks.map((c) => c.type);
console.log(
  JSON.stringify({
    tab: { types: types(seen), user: textOf(seen, "user-1"), reply: textOf(seen, "reply-1") },
    snapshot: snapshot.messages,
    after: { types: types(after), reply: textOf(after, "reply-1") },
    late,
    turn2: { types: types(turn2), user: textOf(turn2, "user-2"), reply: textOf(turn2, "reply-2") },
    tanstack,
  }),
);
clearTimeout(timer);
app.close();
process.exit(0);
