// Every public API of @transcript-sync/client, as a TypeScript user writes it.
// Not run: `tsc --noEmit --strict` checks it against the packed package's types
// (tests/js_package/test_package.py), so a declaration that is missing, wrong
// or loose enough to let a mistake through fails the suite.
import {
  BARRIER_PREFIX,
  CLOSE_ADVICE,
  Consumer,
  Continuity,
  DraftCopy,
  InvalidChange,
  InvalidFrame,
  MAX_PRESENCE_STATE_BYTES,
  PresenceCopy,
  READ_MAX,
  STOP_CODES,
  SUBPROTOCOL_JSON,
  SeqTracker,
  SeqVerdict,
  ServerError,
  SseParser,
  StreamFaceSocket,
  Subscription,
  TRANSPORTS,
  TranscriptCopy,
  TsyncClient,
  acceptFrame,
  attachmentBytes,
  backoffDelay,
  checkBaseline,
  checkEvent,
  checkSnapshot,
  createTranscriptStore,
  epochNumber,
  httpBase,
  newIdempotencyKey,
  streamOffset,
  tokenExpiry,
} from "@transcript-sync/client";
import type {
  AppendAck,
  ClientCopy,
  ClientEvents,
  ClientOptions,
  ClientState,
  CoreUpdate,
  Decision,
  DraftEvent,
  DraftSnapshot,
  Message,
  PresenceEvent,
  PresenceInput,
  PresenceMember,
  TranscriptSnapshot,
  TranscriptStore,
  TranscriptStoreSnapshot,
  Transport,
  Window,
  StoppedReply,
  UIMessageChunkLike,
  UIMessageInput,
  UIMessageLike,
} from "@transcript-sync/client";
import { UIMessageState, UIStreamError, fixJson, parsePartialJson } from "@transcript-sync/client/ui-stream";

const options: ClientOptions = {
  getToken: async () => "token",
  initialBackoffMs: 100,
  maxBackoffMs: 2000,
  heartbeatMs: 0,
  httpUrl: "http://127.0.0.1:8765",
  transport: "auto",
  fallbackAfter: 2,
  webSocketRetryMs: 60000,
};
const client = new TsyncClient("http://127.0.0.1:8765", options);
const wsUrl: string = new TsyncClient(new URL("wss://chat.example/sync"), { httpUrl: new URL("https://chat.example/sync") }).url;
console.log(wsUrl, client.url, client.httpUrl);
const stopStatus: () => void = client.on("status", ({ state, transport, attempt, reason }) => {
  const s: ClientState = state;
  const over: Transport = transport;
  console.log(s, over === "sse" ? "HTTP fallback" : "WebSocket", attempt, reason?.length);
});
const now: Transport = client.transport;
console.log(now, client.stats.fallbacks, TRANSPORTS.length);
client.on("baseline", ({ transcriptId, mirror, snapshot, epochChanged }) => {
  const messages: Message[] = mirror.messages; // a client's copy keeps its messages
  console.log(transcriptId, messages.length, snapshot.revision, epochChanged);
});
client.on("messages", ({ start, messages, revision, event }) => {
  console.log(start, messages.map((m) => m.role), revision, event.change.kind);
});
client.on("segment", ({ previousStart, start, end }) => console.log(previousStart, start, end));
client.on("view", ({ name, start, end, left }) => console.log(name, start, end ?? "open", left));
client.on("earlier", ({ start, messages }) => console.log(start, messages.length));
client.on("stop", ({ code, message }) => console.log(code, message));
client.on("draft", (draft: DraftEvent) => {
  if (draft.state === "open") console.log(draft.draftId, draft.delta ?? draft.text);
  else console.log(draft.state, draft.revision);
});
client.on("ack", (ack) => console.log(ack.revision, ack.duplicate));
client.on("error", (frame) => console.log(frame.code, frame.message));
client.on("update", ({ update }: ClientEvents["update"]) => console.log(update.kind));
stopStatus();

const window: Window = { tail: 50 };
const sub: Subscription = client.subscribe("chat-1", { window });
console.log(sub.revision, sub.copy?.length, sub.drafts.size);
client.connect();
const ack: AppendAck = await client.append("chat-1", [{ role: "user", content: "hi" }], {
  idempotencyKey: newIdempotencyKey(),
  expectedRevision: 3,
});
console.log(ack.start + ack.count);
// A user's turn as useChat sends it (a UIMessage of role "user") appends as it is.
const turn: UIMessageInput = { id: "u-1", role: "user", parts: [{ type: "text", text: "hi" }] };
await client.append("chat-1", [turn], { format: "ui", idempotencyKey: turn.id });
try {
  await client.append("chat-1", [{ role: "tool", content: [{ type: "text", text: "x" }], tool_call_id: "c" }]);
} catch (err) {
  if (err instanceof ServerError) console.log(err.code, err.frame.message);
}
const added: number = await client.loadEarlier("chat-1", 100);
const copy: ClientCopy | null = client.mirror("chat-1");
const asCopy: TranscriptCopy | null = copy;
const kept: Message[] | undefined = copy?.messages;
console.log(asCopy?.length, kept?.length);
const view = copy?.view("recent");
console.log(added, view?.end, copy?.segments.length, copy?.views.length);
for (const [id, draft] of client.drafts("chat-1")) console.log(id, draft.role, draft.text, draft.n);
for (const draft of client.drafts("chat-1").values()) console.log(draft.message?.parts.length, draft.uiBehind);
async function* chunks(): AsyncGenerator<UIMessageChunkLike> {
  yield { type: "start" };
  yield { type: "text-start", id: "t" };
  yield { type: "text-delta", id: "t", delta: "hi" };
  yield { type: "text-end", id: "t" };
  yield { type: "finish" };
}
const written: AppendAck | StoppedReply = await client.writeUIMessageStream("chat-1", chunks(), {
  draftId: "reply-1",
  signal: new AbortController().signal,
});
if ("stopped" in written) console.log(written.revision);
else console.log(written.start, written.count);
const stopped: AppendAck = await client.stopDraft("chat-1", "reply-2");
console.log(stopped.revision);
const fold = new UIMessageState("m");
fold.applyAll([{ type: "text-start", id: "t" }]);
const folded: UIMessageLike = fold.message();
console.log(folded.parts, parsePartialJson(fixJson('{"a": 1')));
try {
  fold.apply({ type: "text-delta", id: "x", delta: "y" });
} catch (err) {
  if (err instanceof UIStreamError) console.log(err.message);
}
console.log(client.pendingAppends.map(({ key, op }) => key + op.op), client.stats.reconnects);
console.log(client.state, client.seq.counters.gaps, client.subscriptions.size, client.core.connected);
client.handleFrame({ type: "pong", seq: 1 });
const watched: Subscription = client.subscribe("chat-2", { presence: true });
client.on("presence", ({ transcriptId, members, counts, joined, left }: PresenceEvent) => {
  const who: string[] = (members ?? []).map((m: PresenceMember) => m.who);
  console.log(transcriptId, who, counts.viewers + counts.writers + counts.agents, joined.length, left);
});
const mine: PresenceInput = { kind: "writer", state: { typing: true }, name: "Ana" };
client.statePresence("chat-2", mine);
client.statePresence("chat-2", { state: null });
const presence: PresenceCopy | null = client.presence("chat-2");
console.log(watched.presence?.counts.agents, presence?.listed().length, MAX_PRESENCE_STATE_BYTES);
client.leavePresence("chat-2");
client.unsubscribe("chat-1");

// The store, as a UI uses it.
const store: TranscriptStore = createTranscriptStore(client, "chat-1", { window: { segment: "active" } });
const leave = store.subscribe(() => {
  const snap: TranscriptStoreSnapshot = store.getSnapshot();
  const drafts: readonly DraftSnapshot[] = snap.drafts;
  console.log(snap.status, snap.revision ?? "no baseline", snap.messages.length, drafts.length);
  if (snap.stopped) console.log(snap.stopped.code);
});
leave();
client.close();

// The pure parts, for custom transports.
const tracker = new SeqTracker();
const verdict: "ok" | "gap" | "repeat" = tracker.observe(1);
console.log(verdict === SeqVerdict.OK, tracker.last);
tracker.reset();
const continuity = new Continuity("t");
const decision: Decision = continuity.onBaseline({
  transcriptId: "t",
  epoch: "e",
  revision: 0,
  start: 0,
  messages: [],
  activeStart: 0,
  segments: [{ start: 0, end: null }],
});
if (decision.kind === "resubscribe") console.log(decision.op("r1").op);
console.log(continuity.counters.baselines, continuity.resubscribeRequest().transcriptId);
const consumer = new Consumer({ keepMessages: false });
consumer.subscribe("t", { window: { from: 10 } });
consumer.connectionMade();
consumer.receiveData('{"type":"pong","seq":1}');
const updates: CoreUpdate[] = consumer.updatesReceived();
console.log(updates.length, consumer.opsToSend().length, consumer.unsubscribe("t"));
consumer.connectionLost();
const snapshot: unknown = JSON.parse("{}");
try {
  checkSnapshot(snapshot);
  const checked: TranscriptSnapshot = snapshot;
  checkBaseline(checked);
  const mirror = new TranscriptCopy(checked, { keepMessages: true });
  const event: unknown = {};
  checkEvent(event);
  mirror.checkNext(event);
  mirror.apply(event);
  mirror.prepend(0, []);
  console.log(new TranscriptCopy(checked).revision);
} catch (err) {
  if (err instanceof InvalidFrame || err instanceof InvalidChange) console.log(err.message);
}
console.log(acceptFrame({ type: "pong", seq: 1 }).type);
const draft = new DraftCopy("d", "assistant");
console.log(draft.take({ n: 1, delta: "a" }), draft.text);
const bytes: Uint8Array = attachmentBytes({ type: "attachment", name: "a.txt", mime: "text/plain", content: "x" });
console.log(bytes.length, backoffDelay(2, { maxMs: 1000 }), httpBase("ws://h/v1/ws"), tokenExpiry(null));
console.log(SUBPROTOCOL_JSON, CLOSE_ADVICE[4001], STOP_CODES.length, READ_MAX, BARRIER_PREFIX);

// The HTTP fallback's parts: offsets of a transcript's stream, an SSE parser, the socket.
console.log(streamOffset("e", 3), epochNumber("e").length);
for (const { event, data } of new SseParser().push("event: data\ndata:[]\n\n")) console.log(event, data);
const face = new StreamFaceSocket("http://127.0.0.1:8765", { token: "token" });
face.onmessage = ({ data }) => console.log(data.length);
face.onclose = ({ code, reason }) => console.log(code, reason);
if (face.readyState === 1) face.send('{"op":"ping","ref":"p"}');
face.close();
