// transcript-sync's JavaScript client: dependency-free ES modules for browsers
// and Node >= 20 (before Node 22, the optional `ws` package provides the
// WebSocket). No build step: the npm package ships these files, and the server
// serves them as they are at /v1/client.js and beside it (/v1/wire.js, ...).
// This module is the package's entry: TsyncClient (docs/protocol.md section 2)
// and the re-exports of the public API (types in client.d.ts). The others, along
// protocol/'s seams (docs/architecture.md); wire.js to consumer.js are pure:
//   wire.js        the wire's constants, frame validation, presence, attachments
//   continuity.js  SeqTracker and Continuity (protocol/continuity.py)
//   digest.js      the rolling digest (protocol/digest.py)
//   copy.js        TranscriptCopy, one transcript's copy (protocol/state.py)
//   ui_stream.js   the AI SDK's fold of a reply with parts (protocol/ui_stream.py)
//   drafts.js      DraftCopy (protocol/drafts.py)
//   consumer.js    the consumer core (protocol/consumer.py); no socket, no clock
//   connection.js  backoff, idempotency keys, the server's URLs, ServerError
//   fallback.js    the HTTP fallback: SSE reads and HTTP appends
//   ui_writer.js   writeUIMessageStream's writer of a reply with parts
//   events.js      the detail of each event the client emits
//   store.js       createTranscriptStore, for UI frameworks
//
//   import { TsyncClient } from "/v1/client.js";
//   const client = new TsyncClient("ws://host/v1/ws", { getToken: async () => token });
//   client.on("baseline", ({ mirror }) => render(mirror));
//   client.on("messages", ({ start, messages }) => add(start, messages));
//   client.on("status", ({ state }) => show(state));
//   client.subscribe("t1");
//   client.connect();
//   await client.append("t1", [{ role: "user", content: "hi" }]);

import { READ_MAX, ServerError, backoffDelay, newIdempotencyKey, serverUrls } from "./connection.js";
import { Consumer } from "./consumer.js";
import { appliedEvent, draftEvent, presenceEvent } from "./events.js";
import { StreamFaceSocket, TRANSPORTS } from "./fallback.js";
import { UIStreamWriter } from "./ui_writer.js";
import {
  CLOSE_ADVICE,
  InvalidFrame,
  LAGGED,
  MAX_PRESENCE_STATE_BYTES,
  SUBPROTOCOL_JSON,
  checkMessages,
  tokenExpiry,
} from "./wire.js";

export { READ_MAX, ServerError, backoffDelay, httpBase, newIdempotencyKey } from "./connection.js";
export { BARRIER_PREFIX, Consumer, Subscription } from "./consumer.js";
export { Continuity, SeqTracker, SeqVerdict } from "./continuity.js";
export { DigestMismatch, InvalidChange, TranscriptCopy } from "./copy.js";
export { canonicalJson, genesisDigest, nextDigest, sha256 } from "./digest.js";
export { DraftCopy } from "./drafts.js";
export { SseParser, StreamFaceSocket, TRANSPORTS, epochNumber, streamOffset } from "./fallback.js";
export { createTranscriptStore } from "./store.js";
export { UIMessageState, UIStreamError, fixJson, parsePartialJson } from "./ui_stream.js";
export {
  CLOSE_ADVICE,
  InvalidFrame,
  MAX_PRESENCE_STATE_BYTES,
  PresenceCopy,
  STOP_CODES,
  SUBPROTOCOL_JSON,
  acceptFrame,
  attachmentBytes,
  checkBaseline,
  checkEvent,
  checkSnapshot,
  tokenExpiry,
} from "./wire.js";

/**
 * One logical connection to a transcript-sync server, kept open across
 * reconnects: a driver of the Consumer core, which decides everything about
 * frames (seq, continuity, the copies, resubscribes, barriers); the client
 * moves text in and ops out, keeps appends until acknowledged, and reports.
 *
 * Events (client.on(type, listener) returns a function that removes it): see
 * events.js, which builds each event's detail from the core's updates.
 *
 * mirror is the core's TranscriptCopy: {transcriptId, epoch, revision, start,
 * length, messages, activeStart, segments, views}. A subscription with a
 * window ({tail: N}, {from: i}, {segment: "active"}, {view: name}) holds
 * messages [start, length) only; loadEarlier() fetches older ones over HTTP.
 */
export class TsyncClient {
  /**
   * @param {string | URL} url  the server's URL: http(s)://host[:port][/base] (the
   *   form the Python client, the CLI and the READMEs use) or ws(s)://host[:port][/base],
   *   with or without /v1/ws; anything else throws a TypeError here. client.url is the
   *   WebSocket's URL (.../v1/ws), client.httpUrl the HTTP base.
   * @param {object} [options]
   *   token: a bearer token, or getToken: an (async) function that returns
   *   one, asked before every connection, before the current token's exp
   *   (a JWT's) and after the server refused one (close 4001). The token is
   *   sent as the first frame of each connection (the auth op), never in
   *   the URL, where proxies would log it;
   *   initialBackoffMs, maxBackoffMs, random: the reconnect backoff;
   *   heartbeatMs: ping this often; reconnect when a ping got no frame back
   *   by the next one (0: off);
   *   WebSocket: the WebSocket class (for tests; default globalThis.WebSocket);
   *   httpUrl: the server's HTTP base for loadEarlier and the fallback (default: from url;
   *   any form url takes);
   *   fetch: the fetch function (for tests; default globalThis.fetch);
   *   newKey: the idempotency key generator; timers: {setTimeout, clearTimeout,
   *   setInterval, clearInterval, now} (for tests);
   *   transport: "auto" (the default: the WebSocket, and the HTTP fallback when
   *   fallbackAfter WebSockets in a row could not be opened while the HTTP API
   *   answers), "websocket" (never the fallback) or "sse" (only the fallback:
   *   SSE reads of the Durable Streams face and HTTP appends, StreamFaceSocket);
   *   fallbackAfter: how many WebSockets in a row must fail to open (closed
   *   before their open event) before the fallback is tried (default 2);
   *   webSocketRetryMs: on the fallback with transport "auto", try a WebSocket
   *   this often (default 60000; 0: never) and move back to it once one opens.
   */
  constructor(url, options = {}) {
    const urls = serverUrls(url);
    this.url = urls.ws;
    this.token = options.token ?? null;
    this._getToken = options.getToken ?? null;
    this.options = {
      initialBackoffMs: options.initialBackoffMs ?? 250,
      maxBackoffMs: options.maxBackoffMs ?? 5000,
      random: options.random ?? Math.random,
      heartbeatMs: options.heartbeatMs ?? 20000,
    };
    this._WebSocket = options.WebSocket ?? globalThis.WebSocket;
    const transport = options.transport ?? "auto";
    if (!["auto", ...TRANSPORTS].includes(transport)) throw new TypeError(`transport: expected auto, websocket or sse, not ${transport}`);
    this.options.transport = transport;
    this.options.fallbackAfter = options.fallbackAfter ?? 2;
    this.options.webSocketRetryMs = options.webSocketRetryMs ?? 60000;
    /** The transport of the current (or the next) connection: "websocket" or "sse". */
    this.transport = transport === "sse" ? "sse" : "websocket";
    this._wsFailures = 0; // WebSockets in a row that closed before they opened
    this._httpAnswered = false; // the HTTP API answered right before the WebSocket being dialled
    this._noWebSocket = false; // this runtime has no WebSocket class and ws could not be loaded
    this._probeTimer = null;
    this._probe = null;
    this._fetch = options.fetch ?? ((...args) => globalThis.fetch(...args));
    this.httpUrl = options.httpUrl == null ? urls.http : serverUrls(options.httpUrl, "httpUrl").http;
    this._newKey = options.newKey ?? newIdempotencyKey;
    this._timers = options.timers ?? {
      setTimeout: (f, ms) => setTimeout(f, ms),
      clearTimeout: (id) => clearTimeout(id),
      setInterval: (f, ms) => setInterval(f, ms),
      clearInterval: (id) => clearInterval(id),
      now: () => Date.now(),
    };
    /** The consumer core: seq, continuity and every transcript's copy. */
    this.core = new Consumer();
    /** ref -> {key, op, resolve, reject}, in the order the appends were made */
    this._pending = new Map();
    this._writers = new Map(); // transcriptId -> Set of UIStreamWriter (writeUIMessageStream)
    this._openWaiters = [];
    this._listeners = new Map();
    this._ws = null;
    this._open = false;
    this._closed = true;
    this._attempt = 0;
    this._connections = 0;
    this._retryTimer = null;
    this._renewTimer = null;
    this._refusedToken = undefined; // the token a 4001 refused (null: none): not tried again
    this._authRefs = 0;
    this._heartbeat = null;
    this._lastFrameAt = 0;
    this._pingSentAt = null;
    this._awaiting = null; // the status to announce when the core is synced
    this.state = "idle";
    this.stats = { connections: 0, reconnects: 0, resyncs: 0, duplicateAcks: 0, fallbacks: 0 };
  }

  /** The connection's SeqTracker (the core's). */
  get seq() {
    return this.core.seq;
  }

  /** transcriptId -> Subscription ({continuity, copy}) of every followed transcript. */
  get subscriptions() {
    return this.core.subscriptions;
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
    this._emit("status", { state, transport: this.transport, attempt: this._attempt, ...extra });
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
    this._timers.clearTimeout(this._renewTimer);
    this._stopProbing();
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
    this.core.connectionLost();
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
    if (!this._getToken) {
      this._openSocket();
      return;
    }
    let asked;
    try {
      asked = Promise.resolve(this._getToken());
    } catch (err) {
      asked = Promise.reject(err);
    }
    asked.then(
      (token) => {
        if (this._closed) return;
        if (this._refusedToken !== undefined && (token || null) === this._refusedToken) {
          this._stop("unauthorized", "the server refused the token and getToken gave it again");
          return;
        }
        this.token = token || null;
        this._openSocket();
      },
      (err) => {
        if (!this._closed) this._scheduleReconnect(`getToken failed: ${err}`);
      },
    );
  }

  /**
   * Dial: the WebSocket, or the fallback. With transport "auto", after
   * fallbackAfter WebSockets in a row that never opened, the HTTP API is asked
   * first (GET /healthz): no answer means the server is away (backoff, and the
   * WebSocket again); an answer means it is there, and one more WebSocket is
   * tried at once; if that one does not open either, something between here
   * and the server lets no WebSocket through, and the fallback opens.
   */
  _openSocket() {
    const { transport, fallbackAfter } = this.options;
    if (transport === "sse" || this._noWebSocket) {
      this._openFallback();
      return;
    }
    this._httpAnswered = false;
    if (transport === "auto" && this._wsFailures >= fallbackAfter) {
      this._checkHttp();
      return;
    }
    this._openWebSocket();
  }

  _openFallback() {
    this.transport = "sse";
    const ws = new StreamFaceSocket(this.httpUrl, { fetch: this._fetch });
    this._ws = ws;
    ws.onopen = () => this._onOpen(ws);
    ws.onmessage = (message) => this._onMessage(ws, message.data);
    ws.onclose = (close) => this._onClose(ws, close);
  }

  _checkHttp() {
    this.transport = "websocket";
    Promise.resolve()
      .then(() => this._fetch(`${this.httpUrl}/healthz`, { headers: { Accept: "application/json" } }))
      .then(
        () => {
          if (this._closed || this._ws) return;
          this._httpAnswered = true;
          this._openWebSocket();
        },
        (err) => {
          if (this._closed || this._ws) return;
          this._wsFailures = 0; // the server is away, not the WebSocket blocked
          this._scheduleReconnect(`the server cannot be reached (${err?.message ?? err})`);
        },
      );
  }

  _openWebSocket() {
    this.transport = "websocket";
    if (!this._WebSocket) {
      this._loadWebSocket();
      return;
    }
    let ws;
    try {
      ws = new this._WebSocket(this.url, [SUBPROTOCOL_JSON]);
    } catch (err) {
      this._wsFailures += 1;
      this._httpAnswered = false;
      this._scheduleReconnect(String(err));
      return;
    }
    this._ws = ws;
    ws.onopen = () => this._onOpen(ws);
    ws.onmessage = (message) => this._onMessage(ws, message.data);
    ws.onclose = (close) => this._onClose(ws, close);
    ws.onerror = () => {}; // a close event always follows
  }

  /**
   * A runtime with no WebSocket class (Node before 22): take the `ws`
   * package's, the same API, then dial. The name is in a variable so that a
   * bundler for the browser does not try to resolve it. Without it, transport
   * "auto" uses the HTTP fallback (fetch is enough); "websocket" stops.
   */
  _loadWebSocket() {
    const name = "ws";
    import(/* @vite-ignore */ /* webpackIgnore: true */ name).then(
      (mod) => {
        this._WebSocket = mod.WebSocket ?? mod.default;
        if (!this._closed) this._openSocket();
      },
      (err) => {
        if (this._closed) return;
        if (this.options.transport === "auto") {
          // No WebSocket can be opened here at all: the HTTP fallback, for good.
          this._noWebSocket = true;
          this._openSocket();
          return;
        }
        this._stop("refused", `this runtime has no WebSocket and the ws package could not be loaded: ${err}`);
      },
    );
  }

  /** Stop for good with a final status (credentials or policy refused). */
  _stop(state, reason) {
    this._closed = true;
    this._timers.clearTimeout(this._renewTimer);
    this._failPending(new Error(state));
    this._status(state, { reason });
  }

  /** Hand the server the current token (the first frame of a connection, or a renewal). */
  _sendAuth() {
    if (!this.token) return;
    this._authRefs += 1;
    this._send({ op: "auth", token: this.token, ref: `auth:${this._authRefs}` });
  }

  /** Renew the token before it expires (a fifth of its life early, 0.5 to 30 s). */
  _scheduleRenewal() {
    this._timers.clearTimeout(this._renewTimer);
    this._renewTimer = null;
    const expires = tokenExpiry(this.token);
    if (!this._getToken || expires === null) return;
    const now = this._timers.now();
    const margin = Math.min(30_000, Math.max(500, (expires - now) / 5));
    this._renewTimer = this._timers.setTimeout(() => {
      this._renewTimer = null;
      Promise.resolve()
        .then(() => this._getToken())
        .then(
          (token) => {
            if (this._closed || !token) return;
            this.token = token;
            this._sendAuth();
            this._scheduleRenewal();
          },
          () => {
            // Try again shortly; at exp the server closes (4001) and the next
            // connection asks getToken again.
            this._renewTimer = this._timers.setTimeout(() => this._scheduleRenewal(), 1000);
          },
        );
    }, Math.max(0, expires - margin - now));
  }

  _onOpen(ws) {
    if (ws !== this._ws) return;
    this._open = true;
    if (ws instanceof StreamFaceSocket) {
      this._scheduleProbe();
    } else {
      this._wsFailures = 0;
    }
    this._connections += 1;
    this.stats.connections += 1;
    this._lastFrameAt = this._timers.now();
    const reconnect = this._connections > 1;
    if (reconnect) this.stats.reconnects += 1;
    // The resumes and a barrier first; then the appends not yet
    // acknowledged, with the keys they were made with: the server answers an
    // already applied one with its first ack.
    this._awaiting = reconnect ? "resynced" : "live";
    this._sendAuth(); // first: the server takes nothing else from a connection without credentials
    this._scheduleRenewal();
    this.core.connectionMade();
    this._flush();
    for (const pending of this._pending.values()) this._send(pending.op);
    for (const wake of this._openWaiters.splice(0)) wake(); // writers waiting to send
    this._startHeartbeat();
  }

  /** Resolves once the connection is open (at once when it is). */
  _whenOpen() {
    return this._open ? Promise.resolve() : new Promise((resolve) => this._openWaiters.push(resolve));
  }

  _onClose(ws, close) {
    if (ws !== this._ws) return;
    const opened = this._open;
    this._ws = null;
    this._open = false;
    this._stopProbing();
    const blocked = !opened && !(ws instanceof StreamFaceSocket) && this._httpAnswered;
    this._httpAnswered = false;
    if (ws instanceof StreamFaceSocket) {
      // Not even the HTTP API answers: the server is away, not the WebSocket
      // blocked, and the WebSocket is tried again first. After a fallback that
      // was open, the count stays: the next dial checks HTTP and tries one
      // WebSocket before it falls back again.
      if (!opened) this._wsFailures = 0;
    } else if (!opened) {
      this._wsFailures += 1;
    }
    this._stopHeartbeat();
    this._timers.clearTimeout(this._renewTimer);
    this.core.connectionLost();
    if (this._closed) return;
    if (blocked) {
      // The HTTP API answered right before this WebSocket failed to open.
      this.stats.fallbacks += 1;
      this.transport = "sse";
      this._status(this._connections > 0 ? "reconnecting" : "connecting", {
        reason: "no WebSocket gets through: falling back to SSE and HTTP",
      });
      this._openFallback();
      return;
    }
    const code = close?.code;
    const reason = close ? `closed (${code}${close.reason ? ` ${close.reason}` : ""})` : "closed";
    const advice = CLOSE_ADVICE[code] ?? "backoff";
    if (advice === "new-token") {
      if (!this._getToken) {
        this._stop("unauthorized", reason);
        return;
      }
      this._refusedToken = this.token; // getToken must bring another one
    } else if (advice === "no") {
      this._stop("refused", reason);
      return;
    }
    this._scheduleReconnect(reason);
  }

  /** On the fallback: try a WebSocket now and then, and go back to it once one opens. */
  _scheduleProbe() {
    const every = this.options.webSocketRetryMs;
    if (this.options.transport !== "auto" || !every || !this._WebSocket) return;
    this._stopProbing();
    this._probeTimer = this._timers.setTimeout(() => {
      this._probeTimer = null;
      let probe;
      try {
        probe = new this._WebSocket(this.url, [SUBPROTOCOL_JSON]);
      } catch {
        this._scheduleProbe();
        return;
      }
      this._probe = probe;
      probe.onerror = () => {};
      probe.onclose = () => {
        if (this._probe !== probe) return;
        this._probe = null;
        this._scheduleProbe();
      };
      probe.onopen = () => {
        if (this._probe !== probe) return;
        this._probe = null;
        probe.onclose = null;
        try {
          probe.close(1000, "probe");
        } catch {
          // closing anyway
        }
        this._leaveFallback();
      };
    }, every);
  }

  _stopProbing() {
    this._timers.clearTimeout(this._probeTimer);
    this._probeTimer = null;
    const probe = this._probe;
    this._probe = null;
    if (probe) {
      probe.onopen = probe.onclose = null;
      try {
        probe.close(1000, "probe");
      } catch {
        // closing anyway
      }
    }
  }

  /** A WebSocket opened again: let go of the fallback and reconnect over it (a resume). */
  _leaveFallback() {
    const ws = this._ws;
    if (this._closed || !(ws instanceof StreamFaceSocket)) return;
    this._ws = null;
    this._open = false;
    ws.close(1000, "a WebSocket opens again");
    this._stopHeartbeat();
    this._timers.clearTimeout(this._renewTimer);
    this.core.connectionLost();
    this._wsFailures = 0;
    this.transport = "websocket";
    this._status("reconnecting", { reason: "a WebSocket opens again: leaving the HTTP fallback" });
    this._dial();
  }

  _scheduleReconnect(reason) {
    const delayMs = backoffDelay(this._attempt, {
      initialMs: this.options.initialBackoffMs,
      maxMs: this.options.maxBackoffMs,
      random: this.options.random,
    });
    this._attempt += 1;
    this.transport = this.options.transport === "sse" || this._noWebSocket ? "sse" : "websocket"; // what the next dial tries
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

  _send(op) {
    if (!this._open || !this._ws) return false;
    this._ws.send(JSON.stringify(op));
    return true;
  }

  /** Send the ops the core asks for, then act on its updates. */
  _flush() {
    for (const op of this.core.opsToSend()) this._send(op);
    for (const update of this.core.updatesReceived()) this._onUpdate(update);
  }

  // -- subscriptions -----------------------------------------------------------------

  /**
   * Follow a transcript: a baseline, then its increments, across reconnects.
   * window ({tail: N}, {from: index}, {segment: "active"}, {view: name}) asks
   * for part of it: the copy then holds [start, length); see loadEarlier().
   */
  subscribe(transcriptId, { window = null, presence = false } = {}) {
    const known = this.core.subscriptions.get(transcriptId);
    if (known) return known;
    const sub = this.core.subscribe(transcriptId, { window, presence });
    if (this._open) {
      this._awaiting = this.state === "connecting" ? "live" : this.state;
      this._flush();
    }
    return sub;
  }

  /** Stop following a transcript. */
  unsubscribe(transcriptId) {
    if (this.core.unsubscribe(transcriptId)) this._flush();
  }

  /**
   * State this client's presence on a subscribed transcript, or change it:
   * {kind: "viewer"|"writer"|"agent", state: {...} (null or {} clears it),
   * name (a server that asks for no credentials)}. Stated again after every
   * reconnect. Throws for a state over 1 KiB of JSON.
   */
  statePresence(transcriptId, { kind, state, name } = {}) {
    const op = { transcriptId };
    if (kind !== undefined) op.kind = kind;
    if (state !== undefined) {
      const size = new TextEncoder().encode(JSON.stringify(state ?? {})).length;
      if (size > MAX_PRESENCE_STATE_BYTES) {
        throw new Error(`a presence state is at most ${MAX_PRESENCE_STATE_BYTES} bytes of JSON (this one is ${size})`);
      }
      op.state = state;
    }
    if (name !== undefined) op.name = name;
    this.core.statePresence(op);
    this._flush();
  }

  /** End this client's presence on the transcript (it stays subscribed). */
  leavePresence(transcriptId) {
    if (!this.core.subscriptions.get(transcriptId)?.stated) return;
    this.core.statePresence({ transcriptId, leave: true });
    this._flush();
  }

  /** The presence of a transcript subscribed with {presence: true} (a PresenceCopy), else null. */
  presence(transcriptId) {
    return this.core.subscriptions.get(transcriptId)?.presence ?? null;
  }

  /** The open drafts of a subscribed transcript: draftId -> DraftCopy {draftId, role, n, text, message}. */
  drafts(transcriptId) {
    return this.core.subscriptions.get(transcriptId)?.drafts ?? new Map();
  }

  /** The copy of a subscribed transcript, or null before its baseline (or after it was dropped). */
  mirror(transcriptId) {
    return this.core.subscriptions.get(transcriptId)?.copy ?? null;
  }

  /**
   * Widen a subscribed transcript's copy backwards by up to count messages
   * (GET /v1/transcripts/{id}/messages, at most 1000 per request). Resolves
   * with how many were added (0 at the start of the transcript). Rejects with
   * a ServerError of code "epoch-changed" when the transcript was deleted and
   * created again since the copy was made: its messages belong to a history
   * that no longer exists (a new baseline is on its way).
   */
  async loadEarlier(transcriptId, count) {
    const epoch = this.mirror(transcriptId)?.epoch;
    let added = 0;
    while (added < count) {
      const copy = this.mirror(transcriptId);
      if (copy === null) throw new Error(`no copy of '${transcriptId}' to widen`);
      if (copy.messages === null) throw new Error(`the copy of '${transcriptId}' keeps no messages`);
      if (copy.epoch !== epoch) {
        throw new ServerError({ code: "epoch-changed", message: `'${transcriptId}' was created again (epoch '${copy.epoch}')` });
      }
      if (copy.start === 0) break;
      const end = copy.start;
      const start = Math.max(0, end - Math.min(count - added, READ_MAX));
      const query = `start=${start}&end=${end}&epoch=${encodeURIComponent(copy.epoch)}`;
      const body = await this._get(`/v1/transcripts/${encodeURIComponent(transcriptId)}/messages?${query}`);
      if (body.epoch !== copy.epoch) {
        throw new ServerError({ code: "epoch-changed", message: `'${transcriptId}' is of epoch '${body.epoch}' now` });
      }
      checkMessages(body.messages, "messages");
      if (this.mirror(transcriptId) !== copy || copy.start !== end) continue; // replaced meanwhile: again
      if (body.start !== start || body.messages.length !== end - start) {
        throw new InvalidFrame(`asked for messages [${start}, ${end}), got [${body.start}, ${body.start + body.messages.length})`);
      }
      copy.prepend(start, body.messages);
      added += body.messages.length;
      this._emit("earlier", { transcriptId, start, messages: body.messages, mirror: copy });
    }
    return added;
  }

  /** GET a path of the HTTP API; a problem+json answer rejects with a ServerError. */
  async _get(path) {
    const headers = { Accept: "application/json" };
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const response = await this._fetch(`${this.httpUrl}${path}`, { headers });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      throw new ServerError({
        type: "error",
        code: body?.code ?? "internal",
        message: body?.detail ?? `HTTP ${response.status}`,
        status: response.status,
      });
    }
    return body;
  }

  // -- appends -------------------------------------------------------------------------

  /**
   * Append messages; resolves with the ack ({revision, start, count,
   * duplicate}) or rejects with a ServerError. The append survives lost
   * connections: it is sent again on the next one with the same
   * idempotency key, so it is applied once.
   */
  append(transcriptId, messages, { idempotencyKey, expectedRevision, draftId, format } = {}) {
    if (this._closed && this.state !== "idle") {
      return Promise.reject(new Error(`client ${this.state}`));
    }
    const key = idempotencyKey ?? this._newKey();
    const ref = `append:${key}`;
    const op = { op: "append", transcriptId, messages, idempotencyKey: key, ref };
    if (expectedRevision !== undefined && expectedRevision !== null) {
      op.expectedRevision = expectedRevision;
    }
    // draftId: the append commits that draft; format "ui": messages are AI SDK UIMessages.
    if (draftId !== undefined && draftId !== null) op.draftId = draftId;
    if (format !== undefined && format !== null) op.format = format;
    return new Promise((resolve, reject) => {
      this._pending.set(ref, { key, op, resolve, reject });
      this._send(op);
    });
  }

  /** The appends sent or waiting to be sent, not yet acknowledged: [{key, op}]. */
  get pendingAppends() {
    return [...this._pending.values()].filter(({ op }) => op.op === "append").map(({ key, op }) => ({ key, op }));
  }

  /**
   * Stop a reply someone else is writing (a draft of a transcript this
   * client may write): the server commits what it holds as its message,
   * marked stopped, and tells its writer. Resolves with the ack (revision:
   * the commit's); rejects with a ServerError (draft-closed: it was not open).
   * Sent again after a reconnect until answered.
   */
  stopDraft(transcriptId, draftId) {
    if (this._closed && this.state !== "idle") {
      return Promise.reject(new Error(`client ${this.state}`));
    }
    const ref = `stop:${this._newKey()}`;
    const op = { op: "draft", transcriptId, draftId, stop: true, ref };
    return new Promise((resolve, reject) => {
      this._pending.set(ref, { key: null, op, resolve, reject });
      this._send(op);
    });
  }

  /**
   * Pipe an AI SDK UI message stream (a ReadableStream of UIMessageChunks,
   * as streamText(...).toUIMessageStream() returns, or any async iterable
   * of chunks) into a draft of the transcript: draft ops with the chunks
   * (those that arrive together in one op), folded here as the SDK folds
   * them; at the finish chunk (or the stream's end) the reply commits as
   * its UIMessage (append with format "ui" and the draft's id) and this
   * resolves with the append's ack. An abort chunk, an error chunk, a chunk
   * the fold refuses, an error of the stream, signal's abort or a refused
   * commit cancels the draft and rejects with the reason. When a reader
   * stops the reply (stopDraft), the stream is read no more (cancelled) and
   * this resolves {transcriptId, revision, stopped: true}: the server
   * committed what was written. The draft's id is draftId, else a new uuid
   * (also the UIMessage's id until the stream's start chunk names one).
   */
  async writeUIMessageStream(transcriptId, stream, { draftId = null, signal = null, expectedRevision, idempotencyKey } = {}) {
    if (this._closed && this.state !== "idle") throw new Error(`client ${this.state}`);
    const id = draftId ?? this._newKey();
    const writer = new UIStreamWriter(this, this._writerLink(), transcriptId, id, signal);
    let writers = this._writers.get(transcriptId);
    if (!writers) this._writers.set(transcriptId, (writers = new Set()));
    writers.add(writer);
    try {
      return await writer.run(stream, { expectedRevision, idempotencyKey });
    } finally {
      writers.delete(writer);
      if (writers.size === 0) this._writers.delete(transcriptId);
    }
  }

  /** What a UIStreamWriter may use of the connection (ui_writer.js): no more than this. */
  _writerLink() {
    return {
      onWebSocket: () => !(this._ws instanceof StreamFaceSocket),
      isOpen: () => this._open,
      isClosed: () => this._closed,
      send: (op) => this._send(op),
      whenOpen: () => this._whenOpen(),
    };
  }

  /** A ref-less error naming a transcript: its writers' draft ops were refused, or a reader stopped them. */
  _toWriters(frame) {
    if (frame.ref !== undefined && frame.ref !== null) return;
    const writers = this._writers.get(frame.transcriptId);
    if (!writers) return;
    for (const writer of writers) writer.refused(frame);
  }

  // -- frames ---------------------------------------------------------------------------

  _onMessage(ws, data) {
    if (ws !== this._ws) return;
    this._lastFrameAt = this._timers.now();
    this._attempt = 0; // the server answered: a close that follows is not "full" or "refused"
    if (typeof data !== "string") return; // only the JSON subprotocol is spoken here
    this.core.receiveData(data);
    this._flush();
  }

  /** Handle one decoded server frame (public for tests and custom transports). */
  handleFrame(frame) {
    this.core.receiveFrame(frame);
    this._flush();
  }

  /** Act on one update of the core. */
  _onUpdate(update) {
    this._emit("update", { transcriptId: update.transcriptId ?? null, update });
    switch (update.kind) {
      case "replaced": {
        const mirror = this.mirror(update.transcriptId);
        if (mirror) {
          this._emit("baseline", {
            transcriptId: update.transcriptId,
            mirror,
            snapshot: update.snapshot,
            epochChanged: update.epochChanged,
          });
        }
        break;
      }
      case "applied":
        this._applied(update.transcriptId, update.event);
        break;
      case "resubscribed":
        if (update.reason === LAGGED) this._resyncing(LAGGED);
        else if (update.reason === "mismatch") {
          this._emit("error", {
            code: "mirror",
            message: "an event did not fit the copy: taking a fresh baseline",
            transcriptId: update.transcriptId,
          });
        } else if (update.reason === "digest") {
          this._emit("error", {
            code: "digest",
            message: "the copy's digest differs from the server's: taking a fresh baseline",
            transcriptId: update.transcriptId,
          });
        }
        break;
      case "frames-lost":
        this._resyncing("seq-gap");
        break;
      case "stopped":
        this._emit("stop", { transcriptId: update.transcriptId, code: update.code, message: update.message });
        break;
      case "answered":
        this._onAnswer(update.frame);
        break;
      case "error":
        this._toWriters(update.frame);
        this._emit("error", update.frame);
        break;
      case "invalid":
        this._emit("error", { code: "invalid-frame", message: update.reason });
        break;
      case "draft":
      case "draft-closed":
        this._draft(update);
        break;
      case "presence":
        this._emit("presence", presenceEvent(update));
        break;
      case "synced":
        if (this._awaiting) {
          const state = this._awaiting;
          this._awaiting = null;
          this._status(state);
        }
        break;
      default:
        break;
    }
  }

  _resyncing(reason) {
    this.stats.resyncs += 1;
    this._status("resyncing", { reason });
    this._awaiting = "resynced";
  }

  _onAnswer(frame) {
    if (typeof frame.ref === "string" && frame.ref.startsWith("auth:")) {
      // The answer to an auth op: taken (pong), or refused (an error; the
      // server closes a connection without valid credentials with 4001).
      if (frame.type === "pong") this._refusedToken = undefined;
      else this._emit("error", frame);
      return;
    }
    if (frame.type === "pong") return; // a heartbeat's: any frame is a sign of life
    const pending = this._pending.get(frame.ref);
    if (frame.type === "ack") {
      if (frame.duplicate) this.stats.duplicateAcks += 1;
      if (pending) {
        this._pending.delete(frame.ref);
        pending.resolve(frame);
      }
      this._emit("ack", frame);
      return;
    }
    if (pending) {
      this._pending.delete(frame.ref);
      pending.reject(new ServerError(frame));
      return;
    }
    this._emit("error", frame);
  }

  _draft(update) {
    const { transcriptId } = update;
    this._emit("draft", draftEvent(update, this.drafts(transcriptId), this.mirror(transcriptId)));
  }

  _applied(transcriptId, event) {
    const [type, detail] = appliedEvent(transcriptId, event, this.mirror(transcriptId));
    this._emit(type, detail);
  }
}
