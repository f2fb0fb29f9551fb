// @durable-streams/aisdk-transport against tsync's /v1/stream, as its README's
// "optimal setup" describes: an app server (node:http, the README's route
// handlers) whose POST /api/chat runs streamText (the model faked with the
// SDK's MockLanguageModelV3) through toDurableStreamResponse into a stream of
// tsync's, keeping the chat's activeStreamId, and whose GET
// /api/chat/:id/stream answers 204 or the stream's URL; and the AI SDK's
// Chat (AbstractChat with the plain state useChat keeps) on
// createDurableChatTransport.
//
// argv[2]: tsync's base URL; argv[3], if given, a token of tsync's: the route
// then writes with it (the stream target's `headers`) and the browser reads
// through the app's own read proxy (the README's buildReadProxyUrl), which
// adds it: the transport's reader sends no headers of its own.
// A chat sends a message; once its reply shows
// text, a second Chat of the same id (a reload: the page's saved messages,
// then resumeStream as useChat({resume: true}) does on mount) resumes it; only
// then does the model go on. After the end, a third resumes again (204: null).
// Prints {"ready": true}, then one JSON line; exits 1 after 30 s.
import http from "node:http";
import { Readable } from "node:stream";
import { AbstractChat, convertToModelMessages, streamText } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import {
  createDurableChatTransport,
  toDurableStreamResponse,
} from "@durable-streams/aisdk-transport";

const [tsync, token] = process.argv.slice(2);
const auth = token ? { Authorization: `Bearer ${token}` } : undefined;
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 30000);
const copy = (value) => JSON.parse(JSON.stringify(value));
const textOf = (message) =>
  message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");

// -- the model: "Hello", then, once the reload resumed, ", world!" --
let goOn;
const resumed = new Promise((resolve) => (goOn = resolve));
const usage = {
  inputTokens: { total: 3, noCache: 3, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 2, text: 2, reasoning: undefined },
};
async function* modelParts() {
  yield { type: "stream-start", warnings: [] };
  yield { type: "text-start", id: "t1" };
  yield { type: "text-delta", id: "t1", delta: "Hello" };
  await resumed;
  yield { type: "text-delta", id: "t1", delta: ", world!" };
  yield { type: "text-end", id: "t1" };
  yield { type: "finish", finishReason: { unified: "stop", raw: undefined }, usage };
}
const model = () =>
  new MockLanguageModelV3({ doStream: async () => ({ stream: ReadableStream.from(modelParts()) }) });

// -- the app server: the README's routes --
const chats = new Map(); // id -> { messages, activeStreamId }
let streams = 0;
let appBase = "";
/** Where the browser reads a stream: tsync itself, or the app's read proxy. */
const readUrlOf = (streamPath) =>
  token ? `${appBase}/api/stream?path=${encodeURIComponent(streamPath)}` : tsync + streamPath;
async function route(request, body) {
  const url = new URL(request.url, "http://app");
  if (request.method === "GET" && url.pathname === "/api/stream") {
    // The read proxy: the path names a chat stream; the reader's query goes on.
    const path = url.searchParams.get("path") ?? "";
    if (!path.startsWith("/v1/stream/chats/")) return new Response("no", { status: 403 });
    const upstream = new URL(tsync + path);
    for (const [key, value] of url.searchParams) if (key !== "path") upstream.searchParams.set(key, value);
    return fetch(upstream, { headers: auth });
  }
  const reconnect = url.pathname.match(/^\/api\/chat\/([^/]+)\/stream$/);
  if (request.method === "POST" && url.pathname === "/api/chat") {
    const { id, messages } = JSON.parse(body);
    const streamPath = `/v1/stream/chats/${id}/${++streams}`;
    chats.set(id, { messages, activeStreamId: streamPath });
    const result = streamText({ model: model(), messages: await convertToModelMessages(messages) });
    return toDurableStreamResponse({
      source: result.toUIMessageStream({
        originalMessages: messages,
        onFinish: ({ messages: finalMessages }) => {
          chats.set(id, { messages: finalMessages, activeStreamId: null });
        },
      }),
      stream: { writeUrl: tsync + streamPath, readUrl: readUrlOf(streamPath), headers: auth },
    });
  }
  if (request.method === "GET" && reconnect) {
    const chat = chats.get(reconnect[1]);
    if (!chat?.activeStreamId) return new Response(null, { status: 204 });
    const streamUrl = readUrlOf(chat.activeStreamId);
    return Response.json({ streamUrl }, { status: 200, headers: { Location: streamUrl } });
  }
  return new Response("not found", { status: 404 });
}
const app = http.createServer(async (request, res) => {
  const chunks = [];
  for await (const chunk of request) chunks.push(chunk);
  const response = await route(request, Buffer.concat(chunks).toString("utf8"));
  const headers = Object.fromEntries(response.headers);
  for (const name of ["content-encoding", "content-length", "transfer-encoding"]) delete headers[name];
  res.writeHead(response.status, headers);
  if (response.body) {
    const body = Readable.fromWeb(response.body);
    res.on("close", () => body.destroy());
    body.pipe(res);
  } else res.end();
});
await new Promise((resolve) => app.listen(0, "127.0.0.1", resolve));
appBase = `http://127.0.0.1:${app.address().port}`;
const api = `${appBase}/api/chat`;

// -- the browser side: useChat's Chat, without React --
class PlainState {
  status = "ready";
  error = undefined;
  constructor(messages, onChange) {
    this.messages = messages;
    this.onChange = onChange;
  }
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
    this.onChange?.(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
    this.onChange?.(message);
  };
  snapshot = (thing) => structuredClone(thing);
}
class PlainChat extends AbstractChat {
  constructor({ messages = [], onChange, ...init }) {
    super({ ...init, state: new PlainState(messages, onChange) });
  }
  get view() {
    return {
      status: this.status,
      error: this.error ? String(this.error.message ?? this.error) : null,
      messages: copy(this.messages),
    };
  }
}

console.log(JSON.stringify({ ready: true }));
let reload = null;
let reconnected = null;
const tab = new PlainChat({
  id: "c1",
  transport: createDurableChatTransport({ api }),
  onError: () => {},
  onChange: (message) => {
    if (reload || message.role !== "assistant" || textOf(message) === "") return;
    // A reload in the middle of the reply: the page's saved messages, then resume.
    const transport = createDurableChatTransport({ api });
    const reconnect = transport.reconnectToStream.bind(transport);
    transport.reconnectToStream = async (options) => {
      const stream = await reconnect(options);
      reconnected = { streamUrl: (await fetch(`${api}/c1/stream`)).headers.get("location") };
      goOn(); // the model goes on only once the reload found the stream
      return stream;
    };
    const reloaded = new PlainChat({
      id: "c1",
      transport,
      onError: () => {},
      messages: copy(chats.get("c1").messages),
    });
    reload = reloaded.resumeStream().then(() => reloaded);
  },
});
await tab.sendMessage({ text: "Say hello" });
const reloaded = await reload;
const later = createDurableChatTransport({ api });
const afterEnd = await later.reconnectToStream({ chatId: "c1" });
console.log(
  JSON.stringify({
    tab: tab.view,
    reloaded: reloaded.view,
    streamUrl: reconnected?.streamUrl ?? null,
    streamPath: `/v1/stream/chats/c1/${streams}`,
    afterEnd,
  }),
);
clearTimeout(timer);
app.close();
process.exit(0);
