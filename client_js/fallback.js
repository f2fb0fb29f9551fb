// The HTTP fallback (docs/protocol.md section 5): SSE reads of the Durable
// Streams face and HTTP appends behind the WebSocket's interface
// (StreamFaceSocket), for where no WebSocket gets through.

import { STOP_CODES } from "./wire.js";

/** The transports a client can speak: the WebSocket, or SSE reads and HTTP appends. */
export const TRANSPORTS = Object.freeze(["websocket", "sse"]);

/**
 * The 16 digits that stand for an epoch in a transcript stream's offsets (the
 * port of server.streams.transcripts.epoch_number): each hex character of the
 * epoch, in order, as its value modulo 10; the first 16 of them, zero-padded
 * on the left to 16.
 */
export function epochNumber(epoch) {
  let digits = "";
  for (const c of String(epoch)) {
    if (/[0-9a-fA-F]/.test(c)) digits += String(parseInt(c, 16) % 10);
  }
  return (digits || "0").slice(0, 16).padStart(16, "0");
}

/**
 * The offset of a transcript's Durable Stream just after revision (docs/protocol.md
 * section 5): `<epoch number>_<revision>`, 16 digits each.
 */
export function streamOffset(epoch, revision) {
  return `${epochNumber(epoch)}_${String(revision).padStart(16, "0")}`;
}

/**
 * A Server-Sent Events parser (the WHATWG rules): text in, in chunks cut
 * anywhere; events out, {event, data} ("message" when the event has no name,
 * data lines joined with "\n"). Comments, ids and retry fields are dropped.
 */
export class SseParser {
  constructor() {
    this._buffer = "";
    this._event = "";
    this._data = [];
  }

  /** Take a chunk of the text; returns the events it completed, in order. */
  push(chunk) {
    this._buffer += chunk;
    const events = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this._buffer);
      // A lone \r at the end may be the first half of \r\n: wait for more.
      if (!match || (match[0] === "\r" && match.index === this._buffer.length - 1)) break;
      const line = this._buffer.slice(0, match.index);
      this._buffer = this._buffer.slice(match.index + match[0].length);
      if (line === "") {
        if (this._data.length) events.push({ event: this._event || "message", data: this._data.join("\n") });
        this._event = "";
        this._data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") this._event = value;
      else if (field === "data") this._data.push(value);
    }
    return events;
  }
}

/** An HTTP answer that is not a success: status, and the problem's code and detail. */
class HttpRefusal extends Error {
  constructor(status, code, detail, body) {
    super(`${status} ${code}: ${detail}`);
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
  }
}

/** The wire code for an HTTP status without a problem+json body (the stream face's plain text). */
const STATUS_CODES = { 400: "invalid-frame", 401: "unauthorized", 403: "forbidden", 404: "not-found", 410: "gone", 413: "too-large", 429: "rate-limited" };

const CLOSED_BY_CLIENT = "closed by the client";

/**
 * A WebSocket-shaped connection that speaks the wire protocol's ops over plain
 * HTTP, for networks that let no WebSocket through (docs/protocol.md, "The
 * HTTP fallback"). The client hands it ops as it would a WebSocket and gets
 * frames back, numbered 1, 2, 3, ... like a connection's, so the same consumer
 * core checks them:
 * - subscribe: a baseline from GET /v1/transcripts/{id} (a window resolved as
 *   the server would: tail, from, the active segment, a View), then the
 *   transcript's Durable Stream in SSE mode from the copy's revision
 *   (/v1/stream/transcripts/{id}?offset=...&live=sse), each event an
 *   increment; a resume (fromRevision and epoch) reads the stream from that
 *   revision, and an offset the server no longer serves (410, or an answer
 *   that ends with no control event) brings a fresh baseline. A response that
 *   ends (the server ends SSE after a minute) is read on from its last offset.
 * - append: POST /v1/transcripts/{id}/messages with the op's idempotency key
 *   and expectedRevision, one after another in the order sent; the answer
 *   becomes an ack or an error frame.
 * - ping: a pong once every subscribe sent before it was answered (its stream
 *   caught up: a control event says upToDate): the barrier the core relies on.
 * - auth: the token for the Authorization header of every request; a pong.
 * It "opens" once GET /healthz answers, and "closes" (onclose, code 1006) when
 * a request cannot reach the server, or with 4001 when one is refused 401, as a
 * WebSocket would. Reads are fetch() streams, not EventSource: a fetch carries
 * the Authorization header (the HTTP face takes credentials there only, never
 * in the URL) and sees the status of a refusal. Drafts are not followed.
 */
export class StreamFaceSocket {
  constructor(httpUrl, { fetch = (...args) => globalThis.fetch(...args), token = null } = {}) {
    this.url = httpUrl;
    this.readyState = 0;
    this.onopen = this.onmessage = this.onclose = this.onerror = null;
    this._fetch = fetch;
    this._token = token;
    this._seq = 0;
    this._readers = new Map(); // transcriptId -> {abort, answered}
    this._inflight = new Set(); // AbortControllers of appends
    this._appends = Promise.resolve(); // the chain that sends appends one after another
    this._probe = new AbortController();
    this._open();
  }

  async _open() {
    try {
      await this._fetch(`${this.url}/healthz`, { headers: { Accept: "application/json" }, signal: this._probe.signal });
    } catch (err) {
      this._lost(1006, `HTTP fallback: the server cannot be reached (${err?.message ?? err})`);
      return;
    }
    if (this.readyState !== 0) return;
    this.readyState = 1;
    this.onopen?.({});
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("send on a connection that is not open");
    for (const line of String(data).split("\n")) {
      if (!line.trim()) continue;
      let op;
      try {
        op = JSON.parse(line);
      } catch {
        this._frame({ type: "error", code: "invalid-frame", message: "malformed JSON" });
        continue;
      }
      this._take(op);
    }
  }

  /** Stop every request; no close event follows (the client let go of it). */
  close(code = 1000, reason = CLOSED_BY_CLIENT) {
    if (this.readyState >= 2) return;
    this.readyState = 3;
    this._stopAll();
    this.closeCode = code;
    this.closeReason = reason;
  }

  _stopAll() {
    this._probe.abort();
    for (const reader of this._readers.values()) reader.abort.abort();
    this._readers.clear();
    for (const controller of this._inflight) controller.abort();
    this._inflight.clear();
  }

  /** The connection is gone: every request stops, and onclose says why (once). */
  _lost(code, reason) {
    if (this.readyState >= 2) return;
    this.readyState = 3;
    this._stopAll();
    this.onclose?.({ code, reason });
  }

  /** Send a frame to the client: numbered now, delivered in a later task as a socket would. */
  _frame(frame) {
    if (this.readyState !== 1) return;
    this._seq += 1;
    const data = JSON.stringify({ ...frame, seq: this._seq });
    queueMicrotask(() => {
      if (this.readyState === 1) this.onmessage?.({ data });
    });
  }

  _headers(extra = {}) {
    const headers = { Accept: "application/json", ...extra };
    if (this._token) headers.Authorization = `Bearer ${this._token}`;
    return headers;
  }

  /** fetch, or HttpRefusal for an answer that is not 2xx. */
  async _request(path, init, signal) {
    const response = await this._fetch(`${this.url}${path}`, { ...init, signal });
    if (response.ok) return response;
    const text = await response.text().catch(() => "");
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      // the stream face answers plain text
    }
    const code = body?.code ?? STATUS_CODES[response.status] ?? (response.status >= 500 ? "unavailable" : "invalid-frame");
    throw new HttpRefusal(response.status, code, body?.detail ?? (text || `HTTP ${response.status}`), body);
  }

  async _json(path, signal) {
    const response = await this._request(path, { headers: this._headers() }, signal);
    return response.json();
  }

  /** A request failed in a way that ends the connection: true if it did. */
  _endsConnection(err) {
    if (this.readyState !== 1) return true;
    if (err instanceof HttpRefusal) {
      if (err.status === 401) {
        this._lost(4001, `unauthorized: ${err.detail}`);
        return true;
      }
      if (err.status >= 500) {
        this._lost(1011, `HTTP fallback: ${err.status} ${err.detail}`.slice(0, 123));
        return true;
      }
      return false;
    }
    this._lost(1006, `HTTP fallback: ${err?.message ?? err}`);
    return true;
  }

  _take(op) {
    switch (op?.op) {
      case "auth":
        this._token = op.token ?? null;
        this._frame({ type: "pong", ref: op.ref ?? null });
        break;
      case "ping": {
        const waits = [...this._readers.values()].map((r) => r.answered);
        Promise.all(waits).then(() => this._frame({ type: "pong", ref: op.ref ?? null }));
        break;
      }
      case "subscribe":
        this._subscribe(op);
        break;
      case "unsubscribe": {
        const reader = this._readers.get(op.transcriptId);
        if (reader) {
          reader.abort.abort();
          reader.answer();
          this._readers.delete(op.transcriptId);
        }
        break;
      }
      case "append":
        // One at a time, in the order sent: they land in that order, as on a WebSocket.
        this._appends = this._appends.then(() => this._append(op));
        break;
      case "presence":
        // Not carried (it needs the WebSocket); the client states its presence again when one
        // opens, so this is no refusal for it to report.
        if (op.ref !== undefined && op.ref !== null) this._frame({ type: "pong", ref: op.ref });
        break;
      default:
        this._frame({
          type: "error",
          code: "invalid-frame",
          message: `the HTTP fallback does not carry ${JSON.stringify(op?.op)} ops (it needs the WebSocket)`,
          ref: op?.ref ?? null,
        });
    }
  }

  _subscribe(op) {
    const id = op.transcriptId;
    this._readers.get(id)?.abort.abort();
    let answer;
    const answered = new Promise((resolve) => {
      answer = resolve;
    });
    const reader = { abort: new AbortController(), answered, answer };
    this._readers.set(id, reader);
    this._follow(id, op, reader).finally(() => {
      reader.answer();
      if (this._readers.get(id) === reader) this._readers.delete(id);
    });
  }

  async _follow(id, op, reader) {
    const signal = reader.abort.signal;
    let epoch = op.epoch ?? null;
    let revision = op.fromRevision ?? null;
    let empty = 0; // answers in a row that ended with no control event
    while (!signal.aborted && this.readyState === 1) {
      try {
        if (revision === null || epoch === null) {
          const snapshot = await this._baseline(id, op.window ?? null, signal);
          if (signal.aborted) return;
          this._frame({ type: "baseline", snapshot });
          epoch = snapshot.epoch;
          revision = snapshot.revision;
        }
        const read = await this._read(id, epoch, revision, reader, signal);
        revision = read.revision;
        if (read.controls === 0) {
          // Deleted meanwhile, or the events are no longer held: start over.
          empty += 1;
          if (empty > 1) throw new HttpRefusal(503, "unavailable", "the transcript's stream ends with nothing", null);
          revision = null;
        } else {
          empty = 0;
        }
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof HttpRefusal && (err.status === 410 || (err.status === 400 && revision !== null))) {
          // Another history, events no longer held, or a copy ahead of the
          // server: a fresh baseline, as the WebSocket would send.
          epoch = null;
          revision = null;
          continue;
        }
        if (this._endsConnection(err)) return;
        if (STOP_CODES.includes(err.code)) {
          // not-found, forbidden, invalid-view: the subscription is over.
          this._frame({ type: "error", code: err.code, message: String(err.detail), transcriptId: id });
          return;
        }
        // Anything else (rate-limited, a range that moved): the connection
        // starts over after a backoff, and resubscribes.
        this._lost(1013, `HTTP fallback: ${err.status} ${err.detail}`.slice(0, 123));
        return;
      }
    }
  }

  /** The baseline of a subscribe: the whole snapshot, or the window's part. */
  async _baseline(id, window, signal) {
    const path = `/v1/transcripts/${encodeURIComponent(id)}`;
    if (window === null) return this._json(path, signal);
    const head = await this._json(`${path}?start=0&end=0`, signal);
    let start;
    if (window.tail !== undefined) start = Math.max(0, head.length - window.tail);
    else if (window.from !== undefined) start = Math.min(window.from, head.length);
    else if (window.segment !== undefined) start = head.activeStart;
    else {
      const view = (head.views ?? []).find((v) => v.name === window.view);
      if (!view) throw new HttpRefusal(422, "invalid-view", `no View named ${JSON.stringify(window.view)}`, null);
      start = view.start;
    }
    return this._json(`${path}?start=${start}`, signal);
  }

  /** Read the transcript's stream in SSE mode after revision until the answer ends. */
  async _read(id, epoch, revision, reader, signal) {
    const query = `offset=${streamOffset(epoch, revision)}&live=sse`;
    const response = await this._request(
      `/v1/stream/transcripts/${encodeURIComponent(id)}?${query}`,
      { headers: this._headers({ Accept: "text/event-stream" }) },
      signal,
    );
    const parser = new SseParser();
    const decoder = new TextDecoder();
    const body = response.body.getReader();
    let controls = 0;
    for (;;) {
      const { value, done } = await body.read();
      const events = parser.push(done ? decoder.decode() : decoder.decode(value, { stream: true }));
      for (const { event, data } of events) {
        if (signal.aborted) return { revision, controls };
        if (event === "data") {
          for (const item of JSON.parse(data)) {
            this._frame({ type: "increment", event: item });
            revision = Math.max(revision, item.revision);
          }
        } else if (event === "control") {
          controls += 1;
          if (JSON.parse(data).upToDate) reader.answer();
        }
      }
      if (done) return { revision, controls };
    }
  }

  async _append(op) {
    if (this.readyState !== 1) return; // lost meanwhile: the client sends it again
    const controller = new AbortController();
    this._inflight.add(controller);
    const body = { messages: op.messages, idempotencyKey: op.idempotencyKey };
    if (op.expectedRevision !== undefined && op.expectedRevision !== null) body.expectedRevision = op.expectedRevision;
    if (op.draftId !== undefined && op.draftId !== null) body.draftId = op.draftId;
    try {
      const format = op.format ? `?format=${encodeURIComponent(op.format)}` : "";
      const response = await this._request(
        `/v1/transcripts/${encodeURIComponent(op.transcriptId)}/messages${format}`,
        { method: "POST", headers: this._headers({ "Content-Type": "application/json" }), body: JSON.stringify(body) },
        controller.signal,
      );
      const ack = await response.json();
      this._frame({ ...ack, type: "ack", ref: op.ref ?? null });
    } catch (err) {
      if (controller.signal.aborted || this._endsConnection(err)) return;
      const frame = { type: "error", code: err.code, message: String(err.detail), transcriptId: op.transcriptId, ref: op.ref ?? null };
      if (Number.isInteger(err.body?.revision)) frame.revision = err.body.revision;
      this._frame(frame);
    } finally {
      this._inflight.delete(controller);
    }
  }
}
