// transcript-sync browser client: a dependency-free ES module.
//
// Served by the server at /v1/client.js. It speaks the wire protocol of
// CONTRACT.md section 3 (subprotocol tsync.v1.json), keeps one mirror per
// subscribed transcript, checks continuity exactly like protocol/continuity.py
// (SeqTracker per connection, Continuity per transcript), reconnects with
// exponential backoff and full jitter, and retries appends on the new
// connection with the idempotency key they were first sent with.
//
// The continuity machines (SeqTracker, Continuity) and the Mirror are pure:
// no socket, no clock, no DOM. Node's test runner imports them directly and
// runs the shared cases in tests/cases/continuity/*.json against them.
//
//   import { TsyncClient } from "/v1/client.js";
//   const client = new TsyncClient("ws://host/v1/ws", { token });
//   client.on("baseline", ({ mirror }) => render(mirror));
//   client.on("messages", ({ start, messages }) => add(start, messages));
//   client.on("status", ({ state }) => show(state));
//   client.subscribe("t1");
//   client.connect();
//   await client.append("t1", [{ role: "user", content: "hi" }]);

export const SUBPROTOCOL_JSON = "tsync.v1.json";

/** Error codes after which a subscription cannot go on by resubscribing. */
export const STOP_CODES = Object.freeze(["not-found", "forbidden", "unauthorized"]);
const LAGGED = "lagged";

// --- the connection's seq --------------------------------------------------------

/** What one frame's seq says about the connection: "ok", "gap" or "repeat". */
export const SeqVerdict = Object.freeze({ OK: "ok", GAP: "gap", REPEAT: "repeat" });

/**
 * Checks that a connection's seq runs 1, 2, 3, ... with no gap.
 * After a gap it follows the new seq, so a single loss is reported once.
 */
export class SeqTracker {
  constructor() {
    this.last = 0;
    this._counters = { ok: 0, gaps: 0, repeats: 0, missing: 0 };
  }

  /** Judge the seq of one received frame (the first expected is 1). */
  observe(seq) {
    const c = this._counters;
    if (seq <= this.last) {
      c.repeats += 1;
      return SeqVerdict.REPEAT;
    }
    if (seq === this.last + 1) {
      this.last = seq;
      c.ok += 1;
      return SeqVerdict.OK;
    }
    c.gaps += 1;
    c.missing += seq - this.last - 1;
    this.last = seq;
    return SeqVerdict.GAP;
  }

  /** Start over for a new connection (seq starts again at 1); counters stay. */
  reset() {
    this.last = 0;
  }

  get counters() {
    return { ...this._counters };
  }
}

// --- decisions ---------------------------------------------------------------------

const apply = (event) => ({ kind: "apply", event });
const replace = (snapshot) => ({ kind: "replace", snapshot });
const ignore = (reason) => ({ kind: "ignore", reason });
const reject = (reason) => ({ kind: "reject", reason });
const stop = (code, reason) => ({ kind: "stop", code, reason });

function resubscribe(transcriptId, fromRevision, epoch, reason) {
  return {
    kind: "resubscribe",
    transcriptId,
    fromRevision,
    epoch,
    reason,
    /** The subscribe op that carries out this decision. */
    op(ref) {
      return subscribeOp(transcriptId, fromRevision, epoch, ref);
    },
  };
}

function subscribeOp(transcriptId, fromRevision, epoch, ref) {
  const op = { op: "subscribe", transcriptId };
  if (fromRevision !== null && fromRevision !== undefined) op.fromRevision = fromRevision;
  if (epoch !== null && epoch !== undefined) op.epoch = epoch;
  if (ref !== null && ref !== undefined) op.ref = ref;
  return op;
}

// --- one subscribed transcript ------------------------------------------------------

/**
 * The continuity state of one subscribed transcript: a faithful port of
 * protocol.continuity.Continuity. Each on* method returns one decision
 * ({kind: "apply"|"replace"|"ignore"|"resubscribe"|"reject"|"stop", ...}).
 *
 * revision and epoch are those of the consumer's copy (null before any
 * baseline or after the copy was dropped for a new epoch); resyncing is true
 * while a resubscribe is outstanding: further revision gaps are not asked
 * about again, but lost connections, lagged errors and seq gaps always are.
 */
export class Continuity {
  constructor(transcriptId) {
    this.transcriptId = transcriptId;
    this.revision = null;
    this.epoch = null;
    this.resyncing = false;
    this._tally = {
      applied: 0,
      repeatsIgnored: 0,
      gaps: 0,
      skipped: 0,
      resumes: 0,
      baselines: 0,
      rebaselines: 0,
      staleBaselines: 0,
      epochChanges: 0,
      foreign: 0,
      lagged: 0,
      resubscribes: 0,
    };
    this._resumeCounted = false;
  }

  /** Dispatch a transcript update frame (baseline, increment or error). */
  onFrame(frame) {
    if (frame.type === "baseline") return this.onBaseline(frame.snapshot);
    if (frame.type === "increment") return this.onEvent(frame.event);
    return this.onError(frame);
  }

  /**
   * A baseline replaces the copy, unless it is older than the copy in the
   * same epoch (stale: ignored, or the copy would go back in time); a
   * foreign one resubscribes.
   */
  onBaseline(snapshot) {
    const tally = this._tally;
    if (snapshot.transcriptId !== this.transcriptId) {
      tally.foreign += 1;
      return this._resubscribe("foreign", false);
    }
    if (this.revision !== null && snapshot.epoch === this.epoch && snapshot.revision < this.revision) {
      tally.staleBaselines += 1;
      return ignore("stale baseline");
    }
    if (tally.baselines) tally.rebaselines += 1;
    tally.baselines += 1;
    if (this.epoch !== null && snapshot.epoch !== this.epoch) tally.epochChanges += 1;
    this.revision = snapshot.revision;
    this.epoch = snapshot.epoch;
    this.resyncing = false;
    return replace(snapshot);
  }

  /** Apply the next event; ignore repeats; resubscribe on a gap or a new epoch. */
  onEvent(event) {
    const tally = this._tally;
    if (event.transcriptId !== this.transcriptId) {
      tally.foreign += 1;
      return this._resubscribe("foreign", false);
    }
    if (this.revision === null) {
      // No copy to apply it to: ask for a baseline once, then wait for it.
      if (this.resyncing) {
        tally.skipped += 1;
        return ignore("no copy yet");
      }
      return this._resubscribe("no-copy", true);
    }
    if (event.epoch !== this.epoch) {
      tally.epochChanges += 1;
      this.revision = null;
      this.epoch = null;
      return this._resubscribe("epoch", true);
    }
    if (event.revision <= this.revision) {
      tally.repeatsIgnored += 1;
      return ignore("repeat");
    }
    if (event.revision === this.revision + 1) {
      tally.applied += 1;
      this.revision = event.revision;
      this.resyncing = false;
      return apply(event);
    }
    if (this.resyncing) {
      tally.skipped += 1;
      return ignore("resyncing");
    }
    tally.gaps += 1;
    return this._resubscribe("gap", false);
  }

  /** lagged resubscribes; not-found, forbidden and unauthorized stop. */
  onError(frame) {
    const about = frame.transcriptId;
    if (about !== undefined && about !== null && about !== this.transcriptId) {
      return reject(`error about transcript ${JSON.stringify(about)}`);
    }
    if (frame.code === LAGGED) {
      this._tally.lagged += 1;
      return this._resubscribe("lagged", false);
    }
    if (STOP_CODES.includes(frame.code)) {
      this.resyncing = false;
      return stop(frame.code, frame.message);
    }
    return ignore(`error ${frame.code}`);
  }

  /** The copy is gone (an event did not fit it): forget it and ask for a fresh baseline. */
  drop(reason) {
    this.revision = null;
    this.epoch = null;
    return this._resubscribe(reason, true);
  }

  /** The connection lost frames (SeqTracker said "gap"): resubscribe. */
  onSeqGap() {
    this._tally.gaps += 1;
    return this._resubscribe("seq-gap", false);
  }

  /** The connection is gone: the decision is what to send on the next one. */
  onConnectionLost() {
    const decision = this._resubscribe("connection", false);
    if (this.revision !== null) {
      this._tally.resumes += 1;
      this._resumeCounted = true;
    }
    return decision;
  }

  /** A new connection is up: resubscribe (a resume is counted once per reconnect). */
  onNewConnection() {
    const decision = this._resubscribe("connection", false);
    if (this.revision !== null && !this._resumeCounted) this._tally.resumes += 1;
    this._resumeCounted = false;
    return decision;
  }

  /** The subscribe op for the current state (resume if there is a copy). */
  /**
   * The server has handled the last resubscribe: call it when the pong of a
   * ping sent right after the subscribe op arrives (ops are handled in order,
   * so the resumed increments came first). From here on a gap is a gap again.
   */
  onResubscribeAnswered() {
    if (this.revision !== null) this.resyncing = false;
  }

  resubscribeRequest(ref) {
    return this.revision === null
      ? subscribeOp(this.transcriptId, null, null, ref)
      : subscribeOp(this.transcriptId, this.revision, this.epoch, ref);
  }

  /** A copy of the counters (camelCase names of protocol.continuity.Counters). */
  get counters() {
    return { ...this._tally };
  }

  _resubscribe(reason, fresh) {
    this._tally.resubscribes += 1;
    this.resyncing = true;
    if (fresh || this.revision === null) {
      return resubscribe(this.transcriptId, null, null, reason);
    }
    return resubscribe(this.transcriptId, this.revision, this.epoch, reason);
  }
}

// --- the copy -----------------------------------------------------------------------

/**
 * The consumer's copy of one transcript, built from a baseline and the
 * events Continuity said to apply. messages[i] is the message at index
 * start + i; segments are {start, end|null} like a snapshot's.
 */
export class Mirror {
  constructor(snapshot) {
    this.transcriptId = snapshot.transcriptId;
    this.epoch = snapshot.epoch;
    this.revision = snapshot.revision;
    this.start = snapshot.start ?? 0;
    this.messages = [...snapshot.messages];
    this.activeStart = snapshot.activeStart ?? 0;
    this.segments = (snapshot.segments ?? [{ start: 0, end: null }]).map((s) => ({ ...s }));
  }

  /** The number of messages of the transcript (not only those held). */
  get length() {
    return this.start + this.messages.length;
  }

  /**
   * Apply one event that Continuity said to apply. Throws if the event does
   * not fit the copy (a bug on one side or the other: the caller takes a
   * fresh baseline).
   */
  apply(event) {
    const change = event.change;
    if (change.kind === "messages-appended") {
      if (change.start !== this.length) {
        throw new Error(`append at ${change.start} does not continue a copy of ${this.length}`);
      }
      this.messages.push(...change.messages);
    } else if (change.kind === "segment-started") {
      if (change.previousStart !== this.activeStart) {
        throw new Error(`segment from ${change.previousStart} but the copy's is ${this.activeStart}`);
      }
      const open = this.segments[this.segments.length - 1];
      if (open) open.end = change.end;
      this.segments.push({ start: change.start, end: null });
      this.activeStart = change.start;
    } else {
      throw new Error(`unknown change kind ${JSON.stringify(change.kind)}`);
    }
    this.revision = event.revision;
  }
}

// --- attachments ----------------------------------------------------------------------

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * The bytes of an attachment part, by the rule of docs/lmml.md: content is
 * base64 of the bytes when it is canonical base64 of bytes that are not
 * valid UTF-8, otherwise it is the file's text (returned as UTF-8).
 */
export function attachmentBytes(part) {
  const content = String(part.content ?? "");
  if (content.length && BASE64.test(content)) {
    const binary = atob(content);
    const bytes = Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
    try {
      new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      return bytes; // not UTF-8: the content was the file's base64
    }
  }
  return new TextEncoder().encode(content);
}

// --- backoff ----------------------------------------------------------------------

/**
 * Exponential backoff with full jitter: a uniform delay in
 * [0, min(maxMs, initialMs * 2^attempt)). attempt counts from 0.
 */
export function backoffDelay(attempt, { initialMs = 250, maxMs = 5000, random = Math.random } = {}) {
  const cap = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * cap);
}

/** A fresh idempotency key: crypto.randomUUID where there is one. */
export function newIdempotencyKey() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  // randomUUID needs a secure context; getRandomValues does not.
  const bytes = new Uint8Array(16);
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i += 1) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// --- the client ---------------------------------------------------------------------

/** Raised (as a rejected append) when the server answered with an error frame. */
export class ServerError extends Error {
  constructor(frame) {
    super(`${frame.code}: ${frame.message}`);
    this.name = "ServerError";
    this.code = frame.code;
    this.frame = frame;
  }
}

/**
 * One logical connection to a transcript-sync server, kept open across
 * reconnects.
 *
 * Events (client.on(type, listener) returns a function that removes it):
 * - "status"   {state, attempt, delayMs, reason}; state is one of
 *              "connecting" (first connect), "live" (subscribed and caught up),
 *              "reconnecting" (connection lost, waiting delayMs), "resyncing"
 *              (frames lost on a live connection), "resynced" (caught up again
 *              after a reconnect or a resync), "closed", "unauthorized".
 * - "baseline" {transcriptId, mirror, snapshot, epochChanged}: render the mirror anew.
 * - "messages" {transcriptId, start, messages, revision, mirror}: appended at start.
 * - "segment"  {transcriptId, previousStart, start, end, revision, mirror}.
 * - "stop"     {transcriptId, code, message}: the subscription is over.
 * - "ack"      the ack frame of an append (also the resolved value of append()).
 * - "error"    an error frame that no append or subscription took.
 * - "decision" {transcriptId, decision}: every continuity decision (for logs and tests).
 */
export class TsyncClient {
  /**
   * @param {string} url  the ws:// or wss:// URL of /v1/ws
   * @param {object} [options]
   *   token: sent as ?token= (browsers cannot set headers on a WebSocket);
   *   initialBackoffMs, maxBackoffMs, random: the reconnect backoff;
   *   heartbeatMs: ping this often; reconnect when a ping got no frame back
   *   by the next one (0: off);
   *   WebSocket: the WebSocket class (for tests; default globalThis.WebSocket);
   *   newKey: the idempotency key generator; timers: {setTimeout, clearTimeout,
   *   setInterval, clearInterval, now} (for tests).
   */
  constructor(url, options = {}) {
    this.url = url;
    this.token = options.token ?? null;
    this.options = {
      initialBackoffMs: options.initialBackoffMs ?? 250,
      maxBackoffMs: options.maxBackoffMs ?? 5000,
      random: options.random ?? Math.random,
      heartbeatMs: options.heartbeatMs ?? 20000,
    };
    this._WebSocket = options.WebSocket ?? globalThis.WebSocket;
    this._newKey = options.newKey ?? newIdempotencyKey;
    this._timers = options.timers ?? {
      setTimeout: (f, ms) => setTimeout(f, ms),
      clearTimeout: (id) => clearTimeout(id),
      setInterval: (f, ms) => setInterval(f, ms),
      clearInterval: (id) => clearInterval(id),
      now: () => Date.now(),
    };
    this.seq = new SeqTracker();
    /** transcriptId -> {continuity, mirror} */
    this.subscriptions = new Map();
    /** ref -> {key, op, resolve, reject}, in the order the appends were made */
    this._pending = new Map();
    this._listeners = new Map();
    this._ws = null;
    this._open = false;
    this._closed = true;
    this._attempt = 0;
    this._connections = 0;
    this._retryTimer = null;
    this._heartbeat = null;
    this._lastFrameAt = 0;
    this._pingSentAt = null;
    this._barrier = 0;
    this._awaiting = null; // the status to announce when the barrier's pong arrives
    this._refs = 0;
    this.state = "idle";
    this.stats = { connections: 0, reconnects: 0, resyncs: 0, duplicateAcks: 0 };
    this._resubscribes = 0;
  }

  // -- events ------------------------------------------------------------------------

  /** Call listener(detail) for every event of this type; returns a function that stops it. */
  on(type, listener) {
    if (!this._listeners.has(type)) this._listeners.set(type, new Set());
    this._listeners.get(type).add(listener);
    return () => this._listeners.get(type)?.delete(listener);
  }

  _emit(type, detail) {
    for (const listener of this._listeners.get(type) ?? []) {
      try {
        listener(detail);
      } catch (err) {
        // A failing listener must not break the protocol state.
        setTimeout(() => {
          throw err;
        }, 0);
      }
    }
  }

  _status(state, extra = {}) {
    this.state = state;
    this._emit("status", { state, attempt: this._attempt, ...extra });
  }

  // -- lifecycle ---------------------------------------------------------------------

  /** Open the connection (and keep reopening it until close()). */
  connect() {
    if (!this._closed) return this;
    this._closed = false;
    this._status("connecting");
    this._dial();
    return this;
  }

  /** Close for good: no reconnect; pending appends are rejected. */
  close() {
    this._closed = true;
    this._timers.clearTimeout(this._retryTimer);
    this._stopHeartbeat();
    const ws = this._ws;
    this._ws = null;
    this._open = false;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000, "client closed");
      } catch {
        // already closing
      }
    }
    this._failPending(new Error("client closed"));
    this._status("closed");
  }

  _failPending(error) {
    for (const [ref, pending] of this._pending) {
      this._pending.delete(ref);
      pending.reject(error);
    }
  }

  _dial() {
    let url = this.url;
    if (this.token) {
      url += `${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(this.token)}`;
    }
    let ws;
    try {
      ws = new this._WebSocket(url, [SUBPROTOCOL_JSON]);
    } catch (err) {
      this._scheduleReconnect(String(err));
      return;
    }
    this._ws = ws;
    ws.onopen = () => this._onOpen(ws);
    ws.onmessage = (message) => this._onMessage(ws, message.data);
    ws.onclose = (close) => this._onClose(ws, close);
    ws.onerror = () => {}; // a close event always follows
  }

  _onOpen(ws) {
    if (ws !== this._ws) return;
    this._open = true;
    this._attempt = 0;
    this._connections += 1;
    this.stats.connections += 1;
    this._lastFrameAt = this._timers.now();
    this.seq.reset();
    const reconnect = this._connections > 1;
    if (reconnect) this.stats.reconnects += 1;
    for (const [transcriptId, sub] of this.subscriptions) {
      this._act(transcriptId, sub, sub.continuity.onNewConnection());
    }
    // Appends not yet acknowledged go again, with the keys they were made
    // with: the server answers an already applied one with its first ack.
    for (const pending of this._pending.values()) this._send(pending.op);
    this._sync(reconnect ? "resynced" : "live");
    this._startHeartbeat();
  }

  _onClose(ws, close) {
    if (ws !== this._ws) return;
    this._ws = null;
    this._open = false;
    this._stopHeartbeat();
    if (this._closed) return;
    if (close && close.code === 1008 && /unauthori[sz]ed/i.test(close.reason ?? "")) {
      this._closed = true;
      this._failPending(new Error("unauthorized"));
      this._status("unauthorized", { reason: close.reason });
      return;
    }
    if (this._connections > 0) {
      for (const [transcriptId, sub] of this.subscriptions) {
        this._emit("decision", { transcriptId, decision: sub.continuity.onConnectionLost() });
      }
    }
    const reason = close ? `closed (${close.code}${close.reason ? ` ${close.reason}` : ""})` : "closed";
    this._scheduleReconnect(reason);
  }

  _scheduleReconnect(reason) {
    const delayMs = backoffDelay(this._attempt, {
      initialMs: this.options.initialBackoffMs,
      maxMs: this.options.maxBackoffMs,
      random: this.options.random,
    });
    this._attempt += 1;
    this._status(this._connections > 0 ? "reconnecting" : "connecting", { delayMs, reason });
    this._timers.clearTimeout(this._retryTimer);
    this._retryTimer = this._timers.setTimeout(() => {
      this._retryTimer = null;
      if (!this._closed) this._dial();
    }, delayMs);
  }

  _startHeartbeat() {
    const every = this.options.heartbeatMs;
    if (!every) return;
    this._stopHeartbeat();
    this._pingSentAt = null;
    this._heartbeat = this._timers.setInterval(() => {
      const ws = this._ws;
      if (!ws || !this._open) return;
      // Judged against the last ping, not the clock: a background tab's
      // timers fire late, but frames still arrive on time.
      if (this._pingSentAt !== null && this._lastFrameAt < this._pingSentAt) {
        // Nothing, not even the pong, since the last ping a whole period
        // ago: the connection is dead even if the socket has not noticed.
        try {
          ws.close(4000, "heartbeat timeout");
        } catch {
          // closing anyway
        }
        this._onClose(ws, { code: 4000, reason: "heartbeat timeout" });
        return;
      }
      this._pingSentAt = this._timers.now();
      this._send({ op: "ping", ref: "heartbeat" });
    }, every);
  }

  _stopHeartbeat() {
    if (this._heartbeat !== null) this._timers.clearInterval(this._heartbeat);
    this._heartbeat = null;
  }

  /** Send a ping; when its pong arrives every answer sent before it has arrived too. */
  _sync(state) {
    this._barrier += 1;
    this._awaiting = state;
    this._send({ op: "ping", ref: `sync:${this._barrier}` });
  }

  _send(op) {
    if (!this._open || !this._ws) return false;
    this._ws.send(JSON.stringify(op));
    return true;
  }

  // -- subscriptions -----------------------------------------------------------------

  /** Follow a transcript: a baseline, then its increments, across reconnects. */
  subscribe(transcriptId) {
    let sub = this.subscriptions.get(transcriptId);
    if (sub) return sub;
    sub = { continuity: new Continuity(transcriptId), mirror: null };
    this.subscriptions.set(transcriptId, sub);
    if (this._open) {
      this._send(sub.continuity.resubscribeRequest(this._ref("sub")));
      this._sync(this.state === "connecting" ? "live" : this.state);
    }
    return sub;
  }

  /** Stop following a transcript. */
  unsubscribe(transcriptId) {
    if (this.subscriptions.delete(transcriptId)) {
      this._send({ op: "unsubscribe", transcriptId });
    }
  }

  /** The mirror of a subscribed transcript, or null before its baseline. */
  mirror(transcriptId) {
    return this.subscriptions.get(transcriptId)?.mirror ?? null;
  }

  // -- appends -------------------------------------------------------------------------

  /**
   * Append messages; resolves with the ack ({revision, start, count,
   * duplicate}) or rejects with a ServerError. The append survives lost
   * connections: it is sent again on the next one with the same
   * idempotency key, so it is applied once.
   */
  append(transcriptId, messages, { idempotencyKey, expectedRevision } = {}) {
    if (this._closed && this.state !== "idle") {
      return Promise.reject(new Error(`client ${this.state}`));
    }
    const key = idempotencyKey ?? this._newKey();
    const ref = `append:${key}`;
    const op = { op: "append", transcriptId, messages, idempotencyKey: key, ref };
    if (expectedRevision !== undefined && expectedRevision !== null) {
      op.expectedRevision = expectedRevision;
    }
    return new Promise((resolve, reject) => {
      this._pending.set(ref, { key, op, resolve, reject });
      this._send(op);
    });
  }

  /** The appends sent or waiting to be sent, not yet acknowledged: [{key, op}]. */
  get pendingAppends() {
    return [...this._pending.values()].map(({ key, op }) => ({ key, op }));
  }

  _ref(kind) {
    this._refs += 1;
    return `${kind}:${this._refs}`;
  }

  // -- frames ---------------------------------------------------------------------------

  _onMessage(ws, data) {
    if (ws !== this._ws) return;
    this._lastFrameAt = this._timers.now();
    if (typeof data !== "string") return; // only the JSON subprotocol is spoken here
    for (const line of data.split("\n")) {
      if (!line.trim()) continue;
      let frame;
      try {
        frame = JSON.parse(line);
      } catch {
        this._emit("error", { code: "invalid-frame", message: "unparsable frame from server" });
        continue;
      }
      this.handleFrame(frame);
    }
  }

  /** Handle one decoded server frame (public for tests and custom transports). */
  handleFrame(frame) {
    const verdict = this.seq.observe(frame.seq);
    if (verdict === SeqVerdict.REPEAT) return;
    if (verdict === SeqVerdict.GAP) {
      this.stats.resyncs += 1;
      this._status("resyncing", { reason: "seq-gap" });
      for (const [transcriptId, sub] of this.subscriptions) {
        this._act(transcriptId, sub, sub.continuity.onSeqGap());
      }
      this._sync("resynced");
    }
    switch (frame.type) {
      case "baseline":
        this._route(frame.snapshot?.transcriptId, frame);
        break;
      case "increment":
        this._route(frame.event?.transcriptId, frame);
        break;
      case "ack":
        this._onAck(frame);
        break;
      case "pong":
        if (typeof frame.ref === "string" && frame.ref.startsWith("resub:")) {
          const sub = this.subscriptions.get(frame.ref.split(":").slice(2).join(":"));
          if (sub && sub.resubscribeRef === frame.ref) sub.continuity.onResubscribeAnswered();
          break;
        }
        if (frame.ref === `sync:${this._barrier}` && this._awaiting) {
          const state = this._awaiting;
          this._awaiting = null;
          this._status(state);
        }
        break;
      case "error":
        this._onError(frame);
        break;
      default:
        break; // a frame type added later: not ours to judge
    }
  }

  _route(transcriptId, frame) {
    const sub = this.subscriptions.get(transcriptId);
    if (!sub) return; // an unsubscribed transcript's late frame
    this._act(transcriptId, sub, sub.continuity.onFrame(frame));
  }

  _onAck(frame) {
    const pending = this._pending.get(frame.ref);
    if (frame.duplicate) this.stats.duplicateAcks += 1;
    if (pending) {
      this._pending.delete(frame.ref);
      pending.resolve(frame);
    }
    this._emit("ack", frame);
  }

  _onError(frame) {
    const pending = frame.ref !== undefined ? this._pending.get(frame.ref) : undefined;
    if (pending) {
      this._pending.delete(frame.ref);
      pending.reject(new ServerError(frame));
      return;
    }
    const about = frame.transcriptId;
    if (about === undefined || about === null) {
      if (frame.code === LAGGED) {
        this.stats.resyncs += 1;
        this._status("resyncing", { reason: LAGGED });
        for (const [transcriptId, sub] of this.subscriptions) {
          this._act(transcriptId, sub, sub.continuity.onError(frame));
        }
        this._sync("resynced");
        return;
      }
      this._emit("error", frame);
      return;
    }
    const sub = this.subscriptions.get(about);
    if (!sub) {
      this._emit("error", frame);
      return;
    }
    const decision = sub.continuity.onError(frame);
    if (decision.kind === "resubscribe") {
      this.stats.resyncs += 1;
      this._status("resyncing", { reason: frame.code });
      this._act(about, sub, decision);
      this._sync("resynced");
      return;
    }
    if (decision.kind === "ignore") this._emit("error", frame);
    this._act(about, sub, decision);
  }

  /** Carry out one continuity decision. */
  _act(transcriptId, sub, decision) {
    this._emit("decision", { transcriptId, decision });
    switch (decision.kind) {
      case "replace": {
        const before = sub.mirror;
        sub.mirror = new Mirror(decision.snapshot);
        this._emit("baseline", {
          transcriptId,
          mirror: sub.mirror,
          snapshot: decision.snapshot,
          epochChanged: before !== null && before.epoch !== sub.mirror.epoch,
        });
        break;
      }
      case "apply":
        this._applyEvent(transcriptId, sub, decision.event);
        break;
      case "resubscribe":
        if (decision.fromRevision === null) sub.mirror = null; // a new epoch: drop the copy
        this._send(decision.op(this._ref("sub")));
        // A ping right behind it: its pong says the resubscribe was handled.
        sub.resubscribeRef = `resub:${++this._resubscribes}:${transcriptId}`;
        this._send({ op: "ping", ref: sub.resubscribeRef });
        break;
      case "stop":
        this.subscriptions.delete(transcriptId);
        this._emit("stop", { transcriptId, code: decision.code, message: decision.reason });
        break;
      default:
        break; // ignore, reject: nothing to do
    }
  }

  _applyEvent(transcriptId, sub, event) {
    const mirror = sub.mirror;
    try {
      if (!mirror) throw new Error("no copy to apply an event to");
      mirror.apply(event);
    } catch (err) {
      // The copy and the event disagree: start over from a fresh baseline.
      this._emit("error", { code: "mirror", message: String(err.message ?? err), transcriptId });
      sub.continuity = new Continuity(transcriptId);
      sub.mirror = null;
      this._send(sub.continuity.resubscribeRequest(this._ref("sub")));
      return;
    }
    const change = event.change;
    if (change.kind === "messages-appended") {
      this._emit("messages", {
        transcriptId,
        start: change.start,
        messages: change.messages,
        revision: event.revision,
        event,
        mirror,
      });
    } else {
      this._emit("segment", {
        transcriptId,
        previousStart: change.previousStart,
        start: change.start,
        end: change.end,
        revision: event.revision,
        event,
        mirror,
      });
    }
  }
}
