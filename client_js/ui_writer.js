// The writer of a reply with parts: client.writeUIMessageStream reads an AI SDK
// UI message stream, folds its chunks, sends them as draft ops and commits or
// cancels the draft. It reaches the client's connection only through the
// link the client hands it.

import { ServerError } from "./connection.js";
import { UIMessageState } from "./ui_stream.js";

const TICK = Symbol("tick");
/** A macrotask later: the chunks a stream has ready before it go out in one op. */
const nextTask = () => new Promise((resolve) => setTimeout(() => resolve(TICK), 0));
/** At most this many chunks in one draft op. */
const MAX_BATCH = 256;
/** How long a writer whose op was refused as draft-closed waits for a stop's notice. */
const STOP_NOTICE_WAIT_MS = 5000;

/** A stream's reader: a ReadableStream's, else an async (or sync) iterable's iterator. */
function chunkReader(stream) {
  if (stream && typeof stream.getReader === "function") {
    const reader = stream.getReader();
    return { next: () => reader.read(), cancel: (reason) => reader.cancel(reason).catch(() => {}) };
  }
  const iterable = stream?.[Symbol.asyncIterator] ? stream : stream?.[Symbol.iterator] ? stream : null;
  if (iterable === null) throw new TypeError("stream: a ReadableStream or an (async) iterable of UIMessageChunks");
  const it = stream[Symbol.asyncIterator] ? stream[Symbol.asyncIterator]() : stream[Symbol.iterator]();
  return {
    next: async () => it.next(),
    cancel: async () => {
      try {
        await it.return?.();
      } catch {
        // the iterator's own cleanup failed: nothing more to do
      }
    },
  };
}

/** One writeUIMessageStream: reads the chunks, folds them, sends them, commits or cancels. */
export class UIStreamWriter {
  /**
   * link: what the writer may use of the client's connection, {onWebSocket(),
   * isOpen(), isClosed(), send(op), whenOpen()} (TsyncClient._writerLink).
   */
  constructor(client, link, transcriptId, draftId, signal) {
    this.client = client;
    this.link = link;
    this.transcriptId = transcriptId;
    this.draftId = draftId;
    this.signal = signal;
    this.state = new UIMessageState(draftId);
    this._end = null; // {stopped, revision} | {error}
    this._closed = false; // the server refused an op: the draft is closed
    this._closedTimer = null;
    this._wake = null;
    this.ended = new Promise((resolve) => {
      this._wake = resolve;
    });
  }

  _finish(end) {
    if (this._end !== null) return;
    this._end = end;
    this._wake(end);
  }

  /** A ref-less error about this transcript: a stop (draft-closed with a revision) or a refused op. */
  refused(frame) {
    if (frame.code !== "draft-closed") {
      this._finish({ error: new ServerError(frame) });
    } else if (frame.revision !== undefined && frame.revision !== null) {
      this._finish({ stopped: true, revision: frame.revision });
    } else if (this._closedTimer === null) {
      // An op refused because the draft closed: a stop closes it before its
      // writer is told (the notice, with the revision, follows once the
      // commit is done). Write no more; wait a while for the notice.
      this._closed = true;
      this._closedTimer = setTimeout(() => this._finish({ error: new ServerError(frame) }), STOP_NOTICE_WAIT_MS);
    }
  }

  /** Draft ops need the WebSocket: on the HTTP fallback the reply shows when it is committed. */
  get _live() {
    return this.link.onWebSocket();
  }

  /** Send a batch; while the client is not connected, wait for it (or for the end). */
  async _send(chunks) {
    const op = { op: "draft", transcriptId: this.transcriptId, draftId: this.draftId, chunks };
    if (this.link.isOpen() && !this._live) return;
    while (this._end === null && !this.link.send(op)) {
      if (this.link.isClosed()) {
        this._finish({ error: new Error(`client ${this.client.state}: the reply could not be written`) });
        break;
      }
      await Promise.race([this.link.whenOpen(), this.ended]);
    }
  }

  _cancel() {
    if (!this._live) return;
    this.link.send({ op: "draft", transcriptId: this.transcriptId, draftId: this.draftId, cancel: true });
  }

  async run(stream, { expectedRevision, idempotencyKey }) {
    const reader = chunkReader(stream);
    const onAbort = () => this._finish({ error: this.signal.reason ?? new Error("aborted") });
    if (this.signal) {
      if (this.signal.aborted) onAbort();
      else this.signal.addEventListener("abort", onAbort, { once: true });
    }
    let pending = null;
    const next = () => (pending ??= reader.next());
    let finished = false;
    let done = false;
    try {
      while (this._end === null && !done && !finished) {
        if (this._closed) {
          await this.ended; // the stop's notice, or the wait for it ran out
          break;
        }
        const first = await Promise.race([next(), this.ended]);
        if (this._end !== null) break;
        pending = null;
        if (first.done) break;
        const batch = [];
        let item = first;
        for (;;) {
          const verdict = this._take(item.value, batch);
          if (verdict === "finish") finished = true;
          if (verdict !== "more" || batch.length >= MAX_BATCH) break;
          // What the stream has ready before the next task goes in the same op.
          const ready = await Promise.race([next(), nextTask(), this.ended]);
          if (ready === TICK || this._end !== null) break;
          pending = null;
          if (ready.done) {
            done = true;
            break;
          }
          item = ready;
        }
        if (this._end === null && !this._closed && batch.length) await this._send(batch);
      }
    } catch (err) {
      this._finish({ error: err });
    } finally {
      this.signal?.removeEventListener("abort", onAbort);
      clearTimeout(this._closedTimer);
    }
    const end = this._end;
    if (end !== null && end.stopped) {
      await reader.cancel("stopped by a reader");
      return { transcriptId: this.transcriptId, revision: end.revision, stopped: true };
    }
    if (end !== null) {
      await reader.cancel(end.error);
      this._cancel();
      throw end.error;
    }
    try {
      return await this.client.append(this.transcriptId, [this.state.message()], {
        draftId: this.draftId,
        format: "ui",
        expectedRevision,
        idempotencyKey,
      });
    } catch (err) {
      this._cancel();
      throw err;
    }
  }

  /** Fold one chunk in and add it to the batch: "more", "finish", or (an end) "end". */
  _take(chunk, batch) {
    const kind = chunk?.type;
    if (kind === "abort") {
      this._finish({ error: new Error(`the stream was aborted${chunk.reason ? `: ${chunk.reason}` : ""}`) });
      return "end";
    }
    if (kind === "error") {
      this._finish({ error: new Error(String(chunk.errorText)) });
      return "end";
    }
    try {
      this.state.apply(chunk);
    } catch (err) {
      this._finish({ error: err });
      return "end";
    }
    batch.push(chunk);
    return kind === "finish" ? "finish" : "more";
  }
}
