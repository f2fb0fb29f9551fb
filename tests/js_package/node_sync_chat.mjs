// syncChat (the packed @transcript-sync/client/ai-chat) on two AI SDK Chats
// (@ai-sdk/react's Chat, no React rendering) in Node, through `ws`:
// argv[2] is the server's http:// URL, argv[3] the chat (transcript) id,
// argv[4] the transport (websocket or http) of both Chats, argv[5] the mode.
//
// Chat A sends "And in Rome?" on a chat that may not exist yet (the send
// creates it). Once Chat B (which sends nothing) shows the reply growing:
// stop: B's stopReply() stops it;
// text: it says so on a line of its own ({"growing": ...}), and the agent
//   goes on (a reply written as text alone) and commits it.
// Then both wait until their messages equal the transcript's UIMessages.
//
// Prints {"ready": true}, then {a, b, stored, sawGrowing, statuses, most}
// (most: the most assistant messages either Chat ever held); exits 1 after 25 s.
import { Chat } from "@ai-sdk/react";
import { DefaultChatTransport, WebSocketChatTransport } from "ai";
import WebSocket from "ws";
import { syncChat } from "@transcript-sync/client/ai-chat";

const [server, chatId, kind, mode = "stop"] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out", a: a.messages, b: b.messages }));
  process.exit(1);
}, 25000);

const transport = () =>
  kind === "http"
    ? new DefaultChatTransport({ api: `${server}/v1/ai/chat` })
    : new WebSocketChatTransport({ url: `${server.replace(/^http/, "ws")}/v1/ai/chat`, webSocket: WebSocket });
const a = new Chat({ id: chatId, transport: transport() });
const b = new Chat({ id: chatId, transport: transport() });
const syncA = syncChat(a, { url: server, transcriptId: chatId, WebSocket });
const syncB = syncChat(b, { url: server, transcriptId: chatId, WebSocket });

const text = (message) => message.parts.filter((p) => p.type === "text").map((p) => p.text).join("");
/** Resolve once check() holds, checked after every change of the Chat's messages or status. */
const until = (chat, check) =>
  new Promise((resolve) => {
    const test = () => {
      if (check()) {
        offMessages();
        offStatus();
        resolve();
      }
    };
    const offMessages = chat["~registerMessagesCallback"](test);
    const offStatus = chat["~registerStatusCallback"](test);
    test();
  });

console.log(JSON.stringify({ ready: true }));
const statuses = [];
a["~registerStatusCallback"](() => statuses.push(a.status));
const most = { a: 0, b: 0 };
for (const [name, chat] of [["a", a], ["b", b]]) {
  chat["~registerMessagesCallback"](() => {
    const replies = chat.messages.filter((m) => m.role === "assistant").length;
    most[name] = Math.max(most[name], replies);
  });
}
const sent = a.sendMessage({ text: "And in Rome?" });
await until(b, () => b.messages.length === 2 && text(b.messages[1]).startsWith("Rome is"));
const sawGrowing = { user: text(b.messages[0]), reply: text(b.messages[1]), id: b.messages[1].id };
if (mode === "text") console.log(JSON.stringify({ growing: sawGrowing })); // the agent goes on
if (mode === "stop") await syncB.stopReply();
await sent;

let stored = null;
const fetchStored = async () => {
  const r = await fetch(`${server}/v1/transcripts/${chatId}/ui-messages`);
  stored = (await r.json()).messages;
};
for (;;) {
  await fetchStored();
  const same = (chat) => JSON.stringify(chat.messages) === JSON.stringify(stored);
  if (stored.length === 2 && same(a) && same(b) && a.status === "ready") break;
  await Promise.race([
    until(a, () => same(a)).then(() => until(b, () => same(b))),
    new Promise((resolve) => setTimeout(resolve, 200)), // a later read of the transcript
  ]);
}
syncA();
syncB.stop();
console.log(JSON.stringify({ a: a.messages, b: b.messages, stored, sawGrowing, statuses, most }));
clearTimeout(timer);
process.exit(0);
