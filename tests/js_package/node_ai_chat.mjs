// The AI SDK's own WebSocketChatTransport (`ai` from npm, through `ws`)
// against a real server's /v1/ai/chat: argv[2] is the server's ws:// URL of
// /v1/ai/chat, argv[3] the chat (transcript) id, argv[4] the mode.
//
// send: send one user message; print the chunks' types and sequence of the
//   reply and the message readUIMessageStream makes of them.
// resume: reconnectToStream; print {"first": <type>} when the stream's first
//   chunk arrives (the server joined the reply: the test may go on writing
//   it), then the same as send of the stream it resolves to.
// idle: reconnectToStream; print what it resolved to (null: no-active).
// abort: send one user message, abort once the reply shows text; print the
//   partial message.
// bad: send argv[5] (a JSON frame) on a raw socket; print the close.
// validate: check the JSON array of frames on stdin with
//   safeValidateWebSocketChatTransportRequest; print each verdict.
//
// Prints {"ready": true}, then one JSON line; exits 1 after 20 s.
import {
  DefaultChatTransport,
  WebSocketChatTransport,
  readUIMessageStream,
  safeValidateWebSocketChatTransportRequest,
} from "ai";
import WebSocket from "ws";

const [url, chatId, mode, extra] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 20000);

const USER = { id: "user-msg-1", role: "user", parts: [{ type: "text", text: "Weather in Paris?" }] };

async function read(stream, onMessage, announce = false) {
  const seen = [];
  const [mine, theirs] = stream.tee();
  const reader = mine.getReader();
  let streamError = null;
  const types = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      if (announce && seen.length === 0) console.log(JSON.stringify({ first: value.type }));
      seen.push(value.type);
    }
  })().catch((err) => {
    streamError = String(err.message ?? err);
  });
  let last = null;
  let error = null;
  try {
    for await (const message of readUIMessageStream({ stream: theirs })) {
      last = JSON.parse(JSON.stringify(message));
      if (onMessage) onMessage(last);
    }
  } catch (err) {
    error = String(err.message ?? err);
  }
  await types;
  return { types: seen, message: last, error: error ?? streamError };
}

console.log(JSON.stringify({ ready: true }));
// http-send, http-resume: the same as send and resume, through DefaultChatTransport
// (argv[2] is then the server's http:// URL of /v1/ai/chat).
const http = mode.startsWith("http-");
const transport = http
  ? new DefaultChatTransport({ api: url })
  : new WebSocketChatTransport({ url, webSocket: WebSocket });
let out;
if (mode === "send" || mode === "http-send") {
  const stream = await transport.sendMessages({
    chatId,
    messages: [USER],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  out = await read(stream);
} else if (mode === "resume" || mode === "idle" || mode === "http-resume" || mode === "http-idle") {
  const stream = await transport.reconnectToStream({ chatId });
  const announce = mode === "resume" || mode === "http-resume";
  out =
    stream === null
      ? { resolved: null }
      : { resolved: "stream", ...(await read(stream, undefined, announce)) };
} else if (mode === "abort") {
  const controller = new AbortController();
  const stream = await transport.sendMessages({
    chatId,
    messages: [USER],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: controller.signal,
  });
  out = await read(stream, (message) => {
    const text = message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
    if (text.length >= 10 && !controller.signal.aborted) controller.abort();
  });
  await new Promise((resolve) => setTimeout(resolve, 300)); // let the abort frame leave
} else if (mode === "regenerate") {
  try {
    const stream = await transport.sendMessages({
      chatId,
      messages: [USER],
      trigger: "regenerate-message",
      messageId: USER.id,
      abortSignal: undefined,
    });
    out = await read(stream);
  } catch (err) {
    out = { error: String(err.message ?? err) };
  }
} else if (mode === "bad") {
  const socket = new WebSocket(url);
  await new Promise((resolve) => socket.on("open", resolve));
  const closed = new Promise((resolve) =>
    socket.on("close", (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  socket.send(extra);
  out = await closed;
} else if (mode === "validate") {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const frames = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  out = [];
  for (const value of frames) {
    const result = await safeValidateWebSocketChatTransportRequest({ value });
    out.push(result.success);
  }
}
if (!http) transport.close();
console.log(JSON.stringify(out));
clearTimeout(timer);
process.exit(0);
