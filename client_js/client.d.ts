// Types of @transcript-sync/client (client.js, the entry that re-exports the
// public API of the package's modules). Written by hand beside them and held
// to them by the test suite: every runtime export is declared here
// (tests/js_package: a check against the entry's own exports), and an
// example that uses every public API type-checks with `tsc --noEmit --strict`
// and runs against a real server.

import type { UIMessageChunkLike, UIMessageLike, UIMessageState } from "./ui_stream.js";

export type { UIMessageChunkLike, UIMessageLike } from "./ui_stream.js";

/**
 * A message to append with format "ui": an AI SDK UIMessage of any role (a user's turn as useChat
 * sends it, or a reply), its id kept as the message's UI id.
 */
export interface UIMessageInput {
  id: string;
  role: "system" | "user" | "assistant";
  metadata?: unknown;
  parts: ReadonlyArray<{ type: string; [field: string]: unknown }>;
}
/** The AI SDK's fold of a reply with parts (also the package's "./ui-stream" entry). */
export { UIMessageState, UIStreamError, fixJson, parsePartialJson } from "./ui_stream.js";

// --- the model (docs/protocol.md section 1) -------------------------------------------

export type Role = "user" | "assistant" | "system" | "tool" | "context";

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface TextPart {
  type: "text";
  text: string;
}

export interface ImageUrlPart {
  type: "image_url";
  image_url: { url: string; detail?: string | null };
}

/** A file: content is its text, or base64 of bytes that are not UTF-8 (see attachmentBytes). */
export interface AttachmentPart {
  type: "attachment";
  name: string;
  mime: string;
  content: string;
}

export type ContentPart = TextPart | ImageUrlPart | AttachmentPart;

/** One chat message; never changed once appended. */
export interface Message {
  role: Role;
  content: string | ContentPart[];
  name?: string | null;
  tool_call_id?: string | null;
  tool_calls?: Array<{ [key: string]: JsonValue }> | null;
  metadata?: { [key: string]: JsonValue } | null;
}

/** What an append takes: a message, with plain JSON anywhere. */
export type MessageInput = Message;

export interface Segment {
  start: number;
  end: number | null;
}

export interface View {
  name: string;
  start: number;
  /** null: open, it follows the transcript. */
  end: number | null;
}

export interface MessagesAppended {
  kind: "messages-appended";
  start: number;
  messages: Message[];
}

export interface SegmentStarted {
  kind: "segment-started";
  previousStart: number;
  start: number;
  end: number;
}

export interface ViewChanged {
  kind: "view-changed";
  name: string;
  start: number;
  end?: number | null;
}

export interface ViewLeft {
  kind: "view-left";
  name: string;
  start: number;
  end?: number | null;
}

export type Change = MessagesAppended | SegmentStarted | ViewChanged | ViewLeft;

export interface TranscriptEvent {
  transcriptId: string;
  epoch: string;
  revision: number;
  occurredAt: number;
  change: Change;
  origin?: { contextId: string } | null;
  /** The rolling digest at revision (docs/protocol.md, "The digest"); absent from older servers. */
  digest?: string;
}

/** A transcript at one revision: messages [start, start + messages.length) of length. */
export interface TranscriptSnapshot {
  transcriptId: string;
  epoch: string;
  revision: number;
  start: number;
  messages: Message[];
  activeStart: number;
  segments: Segment[];
  length?: number;
  views?: View[];
  viewChanges?: number;
  /** The rolling digest at revision; absent from older servers. */
  digest?: string;
}

/** The part of a transcript a subscription holds (docs/protocol.md, Windows). */
export type Window = { tail: number } | { from: number } | { segment: "active" } | { view: string };

// --- frames and ops (docs/protocol.md section 2) ---------------------------------------

export interface Ack {
  type: "ack";
  seq: number;
  transcriptId: string;
  revision: number;
  ref?: string | number | null;
  start?: number | null;
  count?: number | null;
  duplicate?: boolean;
  draftId?: string | null;
  n?: number | null;
}

export interface ErrorFrame {
  type: "error";
  seq?: number;
  code: string;
  message: string;
  ref?: string | number | null;
  transcriptId?: string | null;
  retryAfterMs?: number | null;
  [key: string]: unknown;
}

/** Any frame the server sends (checked by acceptFrame before anything reads it). */
export interface ServerFrame {
  type: string;
  seq: number;
  [key: string]: unknown;
}

/** A client op as sent on the wire. */
export interface ClientOp {
  op: string;
  [key: string]: unknown;
}

// --- pure parts: seq, continuity, copies, the consumer core ----------------------------

export const SUBPROTOCOL_JSON: "tsync.v1.json";

export type CloseAdvice = "backoff" | "resume" | "new-token" | "no";
/** What to do after the server closed with each code; codes not listed mean "backoff". */
export const CLOSE_ADVICE: Readonly<Record<number, CloseAdvice>>;

/** The exp of a JWT in milliseconds since the epoch (unverified), or null. */
export function tokenExpiry(token: string | null | undefined): number | null;

/** Error codes after which a subscription cannot go on by resubscribing. */
export const STOP_CODES: readonly string[];

export type SeqVerdictValue = "ok" | "gap" | "repeat";
export const SeqVerdict: Readonly<{ OK: "ok"; GAP: "gap"; REPEAT: "repeat" }>;

export interface SeqCounters {
  ok: number;
  gaps: number;
  repeats: number;
  missing: number;
}

/** Checks that a connection's seq runs 1, 2, 3, ... with no gap. */
export class SeqTracker {
  last: number;
  observe(seq: number): SeqVerdictValue;
  reset(): void;
  readonly counters: SeqCounters;
}

export interface ContinuityCounters {
  applied: number;
  repeatsIgnored: number;
  gaps: number;
  skipped: number;
  resumes: number;
  baselines: number;
  rebaselines: number;
  staleBaselines: number;
  dropped: number;
  epochChanges: number;
  foreign: number;
  lagged: number;
  resubscribes: number;
}

export interface SubscribeOp extends ClientOp {
  op: "subscribe";
  transcriptId: string;
  fromRevision?: number;
  epoch?: string;
  ref?: string | number;
  window?: Window;
  presence?: boolean;
}

/** A member of a transcript's presence: one connection that stated it. */
export interface PresenceMember {
  id: string;
  /** Its token's sub, or the name it gave. */
  who: string;
  kind: PresenceKind;
  state: Record<string, unknown>;
}

export type PresenceKind = "viewer" | "writer" | "agent";

export interface PresenceCounts {
  viewers: number;
  writers: number;
  agents: number;
}

/** The largest presence state, as its JSON in bytes. */
export const MAX_PRESENCE_STATE_BYTES: 1024;

/** A copy of one transcript's presence (port of protocol.presence.PresenceCopy). */
export class PresenceCopy {
  constructor();
  /** id -> member, or null while the server sends counts only. */
  members: Map<string, PresenceMember> | null;
  counts: PresenceCounts;
  take(frame: ServerFrame): void;
  /** The members ordered by who and id ([] when only counted). */
  listed(): PresenceMember[];
}

export type Decision =
  | { kind: "apply"; event: TranscriptEvent }
  | { kind: "replace"; snapshot: TranscriptSnapshot }
  | { kind: "ignore"; reason: string }
  | { kind: "reject"; reason: string }
  | { kind: "stop"; code: string; reason: string }
  | {
      kind: "resubscribe";
      transcriptId: string;
      fromRevision: number | null;
      epoch: string | null;
      reason: string;
      op(ref?: string | number | null): SubscribeOp;
    };

/** The continuity state of one subscribed transcript (port of protocol.continuity). */
export class Continuity {
  constructor(transcriptId: string);
  transcriptId: string;
  revision: number | null;
  epoch: string | null;
  resyncing: boolean;
  onFrame(frame: ServerFrame): Decision;
  onBaseline(snapshot: TranscriptSnapshot): Decision;
  onEvent(event: TranscriptEvent): Decision;
  onError(frame: ErrorFrame): Decision;
  drop(reason: string): Decision;
  onSeqGap(): Decision;
  onConnectionLost(): Decision;
  onNewConnection(): Decision;
  onResubscribeAnswered(): void;
  resubscribeRequest(ref?: string | number | null): SubscribeOp;
  readonly counters: ContinuityCounters;
}

/** A frame, snapshot or event the consumer cannot accept; message says why. */
export class InvalidFrame extends Error {
  constructor(message: string);
}

/** Throw InvalidFrame unless s is a valid snapshot (path names it in the message). */
export function checkSnapshot(s: unknown, path?: string): asserts s is TranscriptSnapshot;
/** As checkSnapshot, for a baseline's snapshot. */
export function checkBaseline(s: unknown, path?: string): asserts s is TranscriptSnapshot;
/** Throw InvalidFrame unless e is a valid event. */
export function checkEvent(e: unknown, path?: string): asserts e is TranscriptEvent;
/** The frame, checked; throws InvalidFrame when it does not validate. */
export function acceptFrame(frame: unknown): ServerFrame;

export interface CopyView {
  name: string;
  start: number;
  end: number | null;
}

/** A consumer's copy of a transcript; apply() checks every event as the server does. */
export class TranscriptCopy {
  constructor(snapshot: TranscriptSnapshot, options?: { keepMessages?: boolean });
  transcriptId: string;
  epoch: string;
  revision: number;
  start: number;
  length: number;
  /** [start, length); null for a copy made with keepMessages false. */
  messages: Message[] | null;
  activeStart: number;
  segments: Segment[];
  views: CopyView[];
  viewChanges: number;
  /** The rolling digest at revision, checked against every event's (null: the baseline had none). */
  digest: string | null;
  view(name: string): CopyView | null;
  /** The digest at the event's revision; throws DigestMismatch if the event carries another. */
  digestAfter(event: TranscriptEvent): string | null;
  prepend(start: number, messages: Message[]): void;
  checkNext(event: TranscriptEvent): void;
  apply(event: TranscriptEvent): void;
}

/** An event that cannot be applied to a copy: malformed, or not the next change. */
export class InvalidChange extends Error {
  constructor(message: string);
}

/** An event whose digest is not the one the copy computes: the copy's history differs from the server's. */
export class DigestMismatch extends InvalidChange {
  constructor(transcriptId: string, revision: number, carried: string, computed: string);
  transcriptId: string;
  revision: number;
  carried: string;
  computed: string;
}

/** RFC 8785 (JCS) text of a JSON value. */
export function canonicalJson(value: unknown): string;
/** SHA-256 of bytes (synchronous). */
export function sha256(bytes: Uint8Array): Uint8Array;
/** digest(0) of a transcript: from its id alone. */
export function genesisDigest(transcriptId: string): string;
/** digest(R) from digest(R-1) and change R. */
export function nextDigest(previous: string, change: Change): string;

/** The ref prefix of the pings that mark a resubscribe as answered. */
export const BARRIER_PREFIX: "sync:";

/** One draft as a consumer holds it. */
export class DraftCopy {
  constructor(draftId: string, role: Role);
  draftId: string;
  role: Role;
  n: number;
  text: string;
  waiting: boolean;
  stale: boolean;
  finalRevision: number | null;
  /** A reply with parts: its fold as of update n; null for a draft of text alone. */
  ui: UIMessageState | null;
  /** An update's chunks were missed: message is behind until the next replay. */
  uiBehind: boolean;
  /** A reply with parts as the AI SDK's UIMessage (a copy); null for a draft of text alone. */
  readonly message: UIMessageLike | null;
  take(frame: {
    n: number;
    delta?: string | null;
    text?: string | null;
    chunks?: UIMessageChunkLike[] | null;
    replay?: UIMessageChunkLike[] | null;
  }): boolean;
}

export type DraftState = "open" | "final" | "cancelled" | "expired" | "gone";

/** What the consumer core reports (Consumer.updatesReceived). */
export type CoreUpdate =
  | { kind: "applied"; transcriptId: string; event: TranscriptEvent; copy: TranscriptCopy }
  | { kind: "replaced"; transcriptId: string; snapshot: TranscriptSnapshot; copy: TranscriptCopy; [key: string]: unknown }
  | { kind: "resubscribed"; transcriptId: string; reason: string; [key: string]: unknown }
  | { kind: "stopped"; transcriptId: string; code: string; message: string }
  | { kind: "answered"; frame: ServerFrame }
  | { kind: "error"; frame: ErrorFrame }
  | { kind: "invalid"; reason: string }
  | { kind: "frames-lost"; missing: number }
  | { kind: "synced"; barrier: number }
  | { kind: "draft"; transcriptId: string; [key: string]: unknown }
  | { kind: "draft-closed"; transcriptId: string; [key: string]: unknown }
  | { kind: "presence"; transcriptId: string; presence: PresenceCopy; frame: ServerFrame };

/** One followed transcript: its Continuity, its copy and its drafts. */
export class Subscription {
  constructor(transcriptId: string, options?: { keepMessages?: boolean; window?: Window | null });
  transcriptId: string;
  continuity: Continuity;
  copy: TranscriptCopy | null;
  window: Window | null;
  barrier: number;
  drafts: Map<string, DraftCopy>;
  finals: number;
  /** The transcript's presence when followed ({presence: true}), else null. */
  presence: PresenceCopy | null;
  /** This consumer's own presence op, stated again on every new connection. */
  stated: ClientOp | null;
  readonly revision: number | null;
  request(): SubscribeOp;
  onBaseline(snapshot: TranscriptSnapshot): CoreUpdate | null;
  onEvent(event: TranscriptEvent): CoreUpdate | null;
  onError(frame: ErrorFrame): CoreUpdate | null;
  onDraft(frame: ServerFrame): CoreUpdate | null;
  settleDrafts(): CoreUpdate[];
  onSeqGap(): CoreUpdate | null;
  onNewConnection(): CoreUpdate | null;
  onConnectionLost(): CoreUpdate | null;
  onResubscribeAnswered(): void;
}

/** The whole consumer of one connection, sans I/O: text in, ops and updates out. */
export class Consumer {
  constructor(options?: { keepMessages?: boolean });
  keepMessages: boolean;
  subscriptions: Map<string, Subscription>;
  seq: SeqTracker;
  connected: boolean;
  invalidFrames: number;
  subscribe(transcriptId: string, options?: { window?: Window | null; presence?: boolean }): Subscription;
  unsubscribe(transcriptId: string): boolean;
  /** State (or with leave: true end) this consumer's presence on a followed transcript. */
  statePresence(op: PresenceInput & { transcriptId: string; leave?: boolean }): void;
  connectionMade(): void;
  connectionLost(): void;
  receiveData(data: string): void;
  receiveFrame(frame: unknown): void;
  opsToSend(): ClientOp[];
  updatesReceived(): CoreUpdate[];
}

/** The bytes of an attachment part: base64 decoded, or its text as UTF-8. */
export function attachmentBytes(part: AttachmentPart): Uint8Array;

/** Exponential backoff with full jitter, in milliseconds; attempt counts from 0. */
export function backoffDelay(
  attempt: number,
  options?: { initialMs?: number; maxMs?: number; random?: () => number },
): number;

/** A fresh idempotency key. */
export function newIdempotencyKey(): string;

/** The most messages one HTTP read returns. */
export const READ_MAX: 1000;

/** The HTTP base URL of a server URL in any form TsyncClient takes; throws a TypeError for others. */
export function httpBase(url: string | URL): string;

/** An error frame as an Error: code is the wire code (docs/protocol.md, Errors). */
export class ServerError extends Error {
  constructor(frame: ErrorFrame);
  code: string;
  frame: ErrorFrame;
}

// --- the HTTP fallback -----------------------------------------------------------------------

/** How a client reaches the server: the WebSocket, or SSE reads and HTTP appends. */
export type Transport = "websocket" | "sse";
export const TRANSPORTS: readonly Transport[];

/** The 16 digits that stand for an epoch in a transcript stream's offsets. */
export function epochNumber(epoch: string): string;

/** The offset of a transcript's Durable Stream right after revision: `<epoch number>_<revision>`. */
export function streamOffset(epoch: string, revision: number): string;

/** One Server-Sent Event ("message" when it had no event field; data lines joined by "\n"). */
export interface SseEvent {
  event: string;
  data: string;
}

/** A Server-Sent Events parser: text in chunks cut anywhere, events out. */
export class SseParser {
  constructor();
  /** Take a chunk; returns the events it completed, in order. */
  push(chunk: string): SseEvent[];
}

/**
 * A WebSocket-shaped connection over plain HTTP: subscribe ops read the transcript's Durable
 * Stream in SSE mode (after a baseline from GET /v1/transcripts/{id}), append ops are POSTs
 * to /v1/transcripts/{id}/messages; frames come back numbered like a connection's.
 */
export class StreamFaceSocket {
  /** httpUrl: the server's HTTP base (http://host:port). */
  constructor(httpUrl: string, options?: { fetch?: typeof globalThis.fetch; token?: string | null });
  readonly url: string;
  /** 0 opening, 1 open, 3 closed (as a WebSocket's). */
  readonly readyState: number;
  onopen: ((event: unknown) => void) | null;
  onmessage: ((event: { data: string }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  /** One or more ops as JSON text (newline-separated), as on a WebSocket. */
  send(data: string): void;
  /** Stop every request; no close event follows. */
  close(code?: number, reason?: string): void;
}

// --- the client --------------------------------------------------------------------------

export type ClientState =
  | "idle"
  | "connecting"
  | "live"
  | "reconnecting"
  | "resyncing"
  | "resynced"
  | "closed"
  | "unauthorized"
  | "refused";

export interface Timers {
  setTimeout(f: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
  setInterval(f: () => void, ms: number): unknown;
  clearInterval(id: unknown): void;
  now(): number;
}

/** The WebSocket class the client dials with (the browser's, Node 22's, or ws's). */
export interface WebSocketClass {
  new (url: string, protocols?: string | string[]): {
    onopen: ((event: unknown) => void) | null;
    onmessage: ((event: { data: unknown }) => void) | null;
    onclose: ((event: { code: number; reason: string }) => void) | null;
    onerror: ((event: unknown) => void) | null;
    send(data: string): void;
    close(code?: number, reason?: string): void;
    readonly readyState: number;
  };
}

export interface ClientOptions {
  /** A bearer token, sent as the first frame of each connection. */
  token?: string | null;
  /** Asked before every connection, before the token's exp and after a refusal (close 4001). */
  getToken?: () => string | null | undefined | Promise<string | null | undefined>;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  random?: () => number;
  /** Ping this often; reconnect when a ping got no frame back by the next (0: off). */
  heartbeatMs?: number;
  /** Default: globalThis.WebSocket, else the `ws` package's. */
  WebSocket?: WebSocketClass;
  /** The server's HTTP base for loadEarlier and the fallback (default: from url; the same forms as url). */
  httpUrl?: string | URL;
  fetch?: typeof globalThis.fetch;
  newKey?: () => string;
  timers?: Timers;
  /**
   * "auto" (the default): the WebSocket, and the HTTP fallback when WebSockets cannot be
   * opened while the HTTP API answers; "websocket": never the fallback; "sse": only it.
   */
  transport?: "auto" | Transport;
  /** WebSockets in a row that must fail to open before the fallback is considered (default 2). */
  fallbackAfter?: number;
  /** On the fallback ("auto"): try a WebSocket this often and move back once one opens (default 60000; 0: never). */
  webSocketRetryMs?: number;
}

export interface StatusEvent {
  state: ClientState;
  /** The transport of the connection this status is about ("sse": the HTTP fallback). */
  transport: Transport;
  attempt: number;
  delayMs?: number;
  reason?: string;
}

/** A TsyncClient's copy of a transcript: it keeps its messages, which are never null. */
export type ClientCopy = TranscriptCopy & { messages: Message[] };

export interface BaselineEvent {
  transcriptId: string;
  mirror: ClientCopy;
  snapshot: TranscriptSnapshot;
  epochChanged: boolean;
}

export interface MessagesEvent {
  transcriptId: string;
  start: number;
  messages: Message[];
  revision: number;
  event: TranscriptEvent;
  mirror: ClientCopy;
}

export interface SegmentEvent {
  transcriptId: string;
  previousStart: number;
  start: number;
  end: number;
  revision: number;
  event: TranscriptEvent;
  mirror: ClientCopy;
}

export interface ViewEvent {
  transcriptId: string;
  name: string;
  start: number;
  end: number | null;
  left: boolean;
  revision: number;
  event: TranscriptEvent;
  mirror: ClientCopy;
}

export interface EarlierEvent {
  transcriptId: string;
  start: number;
  messages: Message[];
  mirror: ClientCopy;
}

export interface StopEvent {
  transcriptId: string;
  code: string;
  message: string;
}

export interface DraftEvent {
  transcriptId: string;
  draftId: string;
  role: Role;
  /** "open" while it is written; otherwise how it closed. */
  state: DraftState;
  /** The number of its latest update (null once closed). */
  n: number | null;
  /** What the text grew by (null when it was replaced or closed). */
  delta: string | null;
  /** Its whole text now (its last text when closed). */
  text: string;
  /** A reply with parts: its UIMessage now (its last when closed); null for text alone. */
  message: UIMessageLike | null;
  /** With "final": the revision that committed it. */
  revision: number | null;
  mirror: ClientCopy | null;
}

export interface UpdateEvent {
  transcriptId: string | null;
  update: CoreUpdate;
}

/** Every event of TsyncClient.on, with what its listener gets. */
/** What statePresence sets (what it leaves out keeps what earlier calls said). */
export interface PresenceInput {
  kind?: PresenceKind;
  /** A small JSON object (at most 1 KiB); null or {} clears it. */
  state?: Record<string, unknown> | null;
  /** Who this client is, on a server that asks for no credentials. */
  name?: string;
}

export interface PresenceEvent {
  transcriptId: string;
  /** Every member ordered by who, or null above the server's presence_max_members. */
  members: PresenceMember[] | null;
  counts: PresenceCounts;
  /** What this frame changed. */
  joined: PresenceMember[];
  updated: PresenceMember[];
  /** Ids of the members that left. */
  left: string[];
  presence: PresenceCopy;
}

export interface ClientEvents {
  status: StatusEvent;
  baseline: BaselineEvent;
  messages: MessagesEvent;
  segment: SegmentEvent;
  view: ViewEvent;
  earlier: EarlierEvent;
  stop: StopEvent;
  draft: DraftEvent;
  presence: PresenceEvent;
  ack: Ack;
  error: ErrorFrame;
  update: UpdateEvent;
}

export interface ClientStats {
  connections: number;
  reconnects: number;
  resyncs: number;
  duplicateAcks: number;
  /** How many times the client fell back to SSE and HTTP. */
  fallbacks: number;
}

/** What writeUIMessageStream resolves with when a reader stopped the reply. */
export interface StoppedReply {
  transcriptId: string;
  /** The revision that committed what was written. */
  revision: number;
  stopped: true;
}

/** The ack of an append: where its messages landed. */
export interface AppendAck extends Ack {
  start: number;
  count: number;
}

/**
 * One logical connection to a transcript-sync server, kept open across
 * reconnects; every followed transcript is a self-checking copy.
 */
export class TsyncClient {
  /**
   * url: the server's URL, as the Python client takes it: http(s)://host[:port][/base] (the
   * form of the CLI and the READMEs) or ws(s)://host[:port][/base], with or without /v1/ws.
   * Anything else throws a TypeError here, saying what was expected.
   */
  constructor(url: string | URL, options?: ClientOptions);
  /** The WebSocket's URL: ws(s)://host[:port][/base]/v1/ws. */
  readonly url: string;
  token: string | null;
  /** The HTTP base: http(s)://host[:port][/base]. */
  httpUrl: string;
  state: ClientState;
  /** The transport of the current (or the next) connection. */
  transport: Transport;
  readonly stats: ClientStats;
  /** The consumer core: seq, continuity and every transcript's copy. */
  readonly core: Consumer;
  readonly seq: SeqTracker;
  readonly subscriptions: Map<string, Subscription>;
  /** Call listener(detail) for every event of this type; returns a function that stops it. */
  on<K extends keyof ClientEvents>(type: K, listener: (detail: ClientEvents[K]) => void): () => void;
  /** Open the connection (and keep reopening it until close()). */
  connect(): this;
  /** Close for good: no reconnect; pending appends are rejected. */
  close(): void;
  /** Follow a transcript (or a window of it) across reconnects; with presence, who is on it too. */
  subscribe(transcriptId: string, options?: { window?: Window | null; presence?: boolean }): Subscription;
  unsubscribe(transcriptId: string): void;
  /** State or change this client's presence on a subscribed transcript (stated again after reconnects). */
  statePresence(transcriptId: string, presence?: PresenceInput): void;
  /** End this client's presence on the transcript (it stays subscribed). */
  leavePresence(transcriptId: string): void;
  /** The presence of a transcript subscribed with {presence: true}, else null. */
  presence(transcriptId: string): PresenceCopy | null;
  /** The open drafts of a subscribed transcript. */
  drafts(transcriptId: string): Map<string, DraftCopy>;
  /** The copy of a subscribed transcript, or null before its baseline. */
  mirror(transcriptId: string): ClientCopy | null;
  /** Widen the copy backwards by up to count messages; resolves with how many were added. */
  loadEarlier(transcriptId: string, count: number): Promise<number>;
  /**
   * Append messages, exactly once across reconnects; rejects with a ServerError. draftId: the
   * append commits that draft; format "ui": the messages are AI SDK UIMessages.
   */
  append(
    transcriptId: string,
    messages: MessageInput[] | UIMessageInput[],
    options?: {
      idempotencyKey?: string;
      expectedRevision?: number | null;
      draftId?: string | null;
      format?: "ui" | "openai" | "anthropic" | null;
    },
  ): Promise<AppendAck>;
  /**
   * Pipe an AI SDK UI message stream (streamText(...).toUIMessageStream(), or any async iterable
   * of UIMessageChunks) into a draft of the transcript, then commit the reply as its UIMessage
   * (append with format "ui") and resolve with the ack. Abort and error chunks, a stream error, a
   * chunk the fold refuses, signal's abort or a refused commit cancel the draft and reject with
   * the reason. A reader's stopDraft ends it: the stream is cancelled and this resolves
   * {transcriptId, revision, stopped: true} (the server committed what was written).
   */
  writeUIMessageStream(
    transcriptId: string,
    stream: ReadableStream<UIMessageChunkLike> | AsyncIterable<UIMessageChunkLike> | Iterable<UIMessageChunkLike>,
    options?: {
      draftId?: string | null;
      signal?: AbortSignal | null;
      expectedRevision?: number | null;
      idempotencyKey?: string;
    },
  ): Promise<AppendAck | StoppedReply>;
  /** Stop a reply someone else is writing: the server commits what it holds (marked stopped). */
  stopDraft(transcriptId: string, draftId: string): Promise<AppendAck>;
  /** The appends sent or waiting to be sent, not yet acknowledged. */
  readonly pendingAppends: Array<{ key: string; op: ClientOp }>;
  /** Handle one decoded server frame (for custom transports and tests). */
  handleFrame(frame: unknown): void;
}

// --- the store -----------------------------------------------------------------------------

export interface DraftSnapshot {
  readonly draftId: string;
  readonly role: Role;
  readonly n: number;
  readonly text: string;
  /** A reply with parts: its UIMessage as the AI SDK shows it; null for a draft of text alone. */
  readonly message: UIMessageLike | null;
}

/** What a UI renders of one transcript; the same object until something changed. */
export interface TranscriptStoreSnapshot {
  readonly transcriptId: string;
  readonly status: ClientState;
  /** null before the first baseline. */
  readonly revision: number | null;
  readonly epoch: string | null;
  readonly start: number;
  readonly length: number;
  /** Messages [start, length); the same array until messages change. */
  readonly messages: readonly Message[];
  /** The open drafts, in the order they opened. */
  readonly drafts: readonly DraftSnapshot[];
  /** Set once the subscription is over (not-found, forbidden, ...). */
  readonly stopped: { readonly code: string; readonly message: string } | null;
}

/**
 * A store for useSyncExternalStore(store.subscribe, store.getSnapshot) or any UI.
 * It follows the transcript while it has listeners (from the first, until the last leaves).
 */
export interface TranscriptStore {
  subscribe(listener: () => void): () => void;
  getSnapshot(): TranscriptStoreSnapshot;
}

/** A store of one transcript of this client (creating it costs nothing). */
export function createTranscriptStore(
  client: TsyncClient,
  transcriptId: string,
  options?: { window?: Window | null },
): TranscriptStore;
