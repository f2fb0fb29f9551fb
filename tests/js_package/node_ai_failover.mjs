// A Chat of the AI SDK (`ai`'s AbstractChat, with the plain state a
// framework binding would keep) whose replica dies in the middle of a reply:
// argv[2] is the URL of /v1/ai/chat (a forwarder in front of the replicas),
// argv[3] the chat id, argv[4] the transport: "ws" (WebSocketChatTransport
// through `ws`; a ws:// URL) or "http" (DefaultChatTransport; an http:// URL).
//
// It sends one user message and prints, one JSON line each:
//   {"ready": true}
//   {"seen": <text>}         the reply's text first showed (the test kills
//                            the replica then)
//   {"disconnected": {...}}  the send ended: the chat's status, error and
//                            messages as the user saw them
//   {"resumed": true}        chat.resumeStream()'s reconnectToStream joined
//                            the reply (the server sent its `start`)
//   {...}                    the end: status, error, messages
// Exits 1 after 30 s.
import { AbstractChat, DefaultChatTransport, WebSocketChatTransport } from "ai";
import WebSocket from "ws";

const [url, chatId, kind] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 30000);

const say = (value) => console.log(JSON.stringify(value));
const copy = (value) => JSON.parse(JSON.stringify(value));
const textOf = (message) =>
  message.parts
    .filter((p) => p.type === "text")
    .map((p) => p.text)
    .join("");

let seen = false;
function watch(message) {
  if (!seen && message.role === "assistant" && textOf(message).length > 0) {
    seen = true;
    say({ seen: textOf(message) });
  }
}

/** The state a framework binding keeps (useChat's, without React). */
class PlainState {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = this.messages.concat(message);
    watch(message);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
    watch(message);
  };
  snapshot = (thing) => structuredClone(thing);
}

class PlainChat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new PlainState() });
  }
  get view() {
    return {
      status: this.status,
      error: this.error ? String(this.error.message ?? this.error) : null,
      messages: copy(this.messages),
    };
  }
}

const transport =
  kind === "http"
    ? new DefaultChatTransport({ api: url })
    : new WebSocketChatTransport({ url, webSocket: WebSocket });
const reconnect = transport.reconnectToStream.bind(transport);
transport.reconnectToStream = async (options) => {
  const stream = await reconnect(options);
  say({ resumed: stream !== null });
  return stream;
};
const chat = new PlainChat({ id: chatId, transport, onError: () => {} });

say({ ready: true });
await chat.sendMessage({ text: "Weather in Paris?" });
say({ disconnected: chat.view });
await chat.resumeStream();
transport.close?.();
say(chat.view);
clearTimeout(timer);
process.exit(0);
