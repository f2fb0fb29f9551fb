// The consumer core (the port of protocol/consumer.py): one connection's
// consumer sans I/O, text in, ops and updates out; a Subscription per followed
// transcript holds its Continuity, its copy, its drafts and its presence. The
// shared cases in tests/cases/consumer run against both ports.

import { Continuity, SeqTracker, SeqVerdict, subscribeOp } from "./continuity.js";
import { DigestMismatch, InvalidChange, TranscriptCopy } from "./copy.js";
import { DraftCopy } from "./drafts.js";
import { LAGGED, PresenceCopy, acceptFrame } from "./wire.js";

/** Refs of the consumer's barrier pings (sync:1, sync:2, ...). */
export const BARRIER_PREFIX = "sync:";

function barrierNumber(ref) {
  if (typeof ref === "string" && ref.startsWith(BARRIER_PREFIX)) {
    const digits = ref.slice(BARRIER_PREFIX.length);
    if (/^[0-9]+$/.test(digits)) return Number(digits);
  }
  return null;
}


/**
 * One followed transcript: its Continuity and its copy (port of
 * protocol.consumer.Subscription). Each on* method returns the update it
 * causes, or null. drafts: the open drafts by id (DraftCopy); finals: how
 * many of them wait for their commit.
 */
export class Subscription {
  /**
   * window: {tail: N} | {from: index} | {segment: "active"} | {view: name}, sent
   * with every subscribe op (a baseline then holds only that part).
   */
  constructor(transcriptId, { keepMessages = true, window = null } = {}) {
    this.transcriptId = transcriptId;
    this.continuity = new Continuity(transcriptId);
    this.copy = null;
    this.window = window;
    this.barrier = 0;
    this._keep = keepMessages;
    this._lastEpoch = null;
    this.drafts = new Map();
    this.finals = 0;
    this._draftsEpoch = null;
    /** The transcript's presence (a PresenceCopy) when followed, else null. */
    this.presence = null;
    /** This consumer's own presence op, stated again on every new connection. */
    this.stated = null;
  }

  get revision() {
    return this.continuity.revision;
  }

  request() {
    const op = this.continuity.resubscribeRequest();
    if (this.window !== null) op.window = this.window;
    if (this.presence !== null) op.presence = true;
    return op;
  }

  onBaseline(snapshot) {
    const previous = this.continuity.revision;
    const decision = this.continuity.onBaseline(snapshot);
    if (decision.kind === "resubscribe") return this._resubscribed(decision);
    if (decision.kind !== "replace") return null; // a stale baseline
    let copy;
    try {
      copy = new TranscriptCopy(snapshot, { keepMessages: this._keep });
    } catch {
      return this._drop("mismatch");
    }
    const old = this.copy;
    if (
      old !== null &&
      old.messages !== null &&
      copy.messages !== null &&
      old.epoch === copy.epoch &&
      old.start < copy.start &&
      copy.start <= old.length
    ) {
      // A window of the same history that begins inside what the copy held
      // (a resume answered with a baseline): keep the older messages.
      copy.prepend(old.start, old.messages.slice(0, copy.start - old.start));
    }
    this.copy = copy;
    const epochChanged = this._lastEpoch !== null && this._lastEpoch !== snapshot.epoch;
    this._lastEpoch = snapshot.epoch;
    return { kind: "replaced", transcriptId: this.transcriptId, snapshot, previousRevision: previous, epochChanged };
  }

  onEvent(event) {
    const decision = this.continuity.onEvent(event);
    if (decision.kind === "resubscribe") return this._resubscribed(decision);
    if (decision.kind !== "apply") return null; // a repeat, or a gap already being repaired
    try {
      if (this.copy === null) throw new InvalidChange("no copy to apply the event to");
      this.copy.apply(event);
    } catch (err) {
      // A copy whose history differs from the server's (its digest says so),
      // or an event whose revision continued the copy and whose change did
      // not: either way, start over from a baseline.
      return this._drop(err instanceof DigestMismatch ? "digest" : "mismatch");
    }
    return { kind: "applied", transcriptId: this.transcriptId, event };
  }

  onError(frame) {
    const decision = this.continuity.onError(frame);
    if (decision.kind === "resubscribe") return this._resubscribed(decision);
    if (decision.kind === "stop") {
      return { kind: "stopped", transcriptId: this.transcriptId, code: decision.code, message: decision.reason };
    }
    return { kind: "error", frame };
  }

  /** Take a draft frame: {kind: "draft"} or {kind: "draft-closed"}, or null. */
  onDraft(frame) {
    let draft = this.drafts.get(frame.draftId) ?? null;
    const state = frame.state ?? "open";
    if (state === "open") {
      const text = frame.text ?? null;
      if (draft === null) {
        if (text === null && frame.n !== 1) return null; // its start was missed: wait for a text
        if (this.drafts.size === 0 && this.copy !== null) this._draftsEpoch = this.copy.epoch;
        draft = new DraftCopy(frame.draftId, frame.role);
        this.drafts.set(frame.draftId, draft);
      }
      if (draft.finalRevision !== null || !draft.take(frame)) return null;
      return {
        kind: "draft",
        transcriptId: this.transcriptId,
        draftId: draft.draftId,
        role: draft.role,
        n: frame.n,
        delta: frame.delta ?? null,
        text,
      };
    }
    if (draft === null) return null;
    if (state !== "final") return this._close(draft, state, null);
    if (this.copy !== null && this.copy.revision >= frame.revision) return this._close(draft, "final", frame.revision);
    // Its message is not in the copy yet: close it when it is.
    if (draft.finalRevision === null) this.finals += 1;
    draft.finalRevision = frame.revision;
    return null;
  }

  /** Close the drafts whose commit the copy holds now (all of them after an epoch change). */
  settleDrafts() {
    const copy = this.copy;
    if (copy === null || this.drafts.size === 0) return [];
    const drafts = [...this.drafts.values()];
    if (this._draftsEpoch !== null && copy.epoch !== this._draftsEpoch) {
      return drafts.map((draft) => this._close(draft, "gone", null));
    }
    if (!this.finals) return [];
    return drafts
      .filter((draft) => draft.finalRevision !== null && draft.finalRevision <= copy.revision)
      .map((draft) => this._close(draft, "final", draft.finalRevision));
  }

  _close(draft, state, revision) {
    this.drafts.delete(draft.draftId);
    if (draft.finalRevision !== null) this.finals -= 1;
    return {
      kind: "draft-closed",
      transcriptId: this.transcriptId,
      draftId: draft.draftId,
      role: draft.role,
      state,
      revision,
      text: draft.text,
      message: draft.message,
    };
  }

  onSeqGap() {
    return this._resubscribed(this.continuity.onSeqGap());
  }

  onNewConnection() {
    return this._resubscribed(this.continuity.onNewConnection());
  }

  onConnectionLost() {
    this.continuity.onConnectionLost();
    this.barrier = 0;
  }

  /** The resubscribe was answered: drafts no text refreshed since close as "gone". */
  onResubscribeAnswered() {
    this.barrier = 0;
    this.continuity.onResubscribeAnswered();
    if (this.drafts.size === 0) return [];
    return [...this.drafts.values()]
      .filter((draft) => draft.stale && draft.finalRevision === null)
      .map((draft) => this._close(draft, "gone", null));
  }

  _resubscribed(decision) {
    for (const draft of this.drafts.values()) draft.stale = true; // until a text says it is still open
    if (decision.fromRevision === null) this.copy = null;
    return {
      kind: "resubscribed",
      transcriptId: this.transcriptId,
      reason: decision.reason,
      fromRevision: decision.fromRevision,
      epoch: decision.epoch,
    };
  }

  _drop(reason) {
    return this._resubscribed(this.continuity.drop(reason));
  }
}

/**
 * The whole consumer of one connection, sans I/O: the port of
 * protocol.consumer.Consumer. Text in (receiveData), ops out (opsToSend) and
 * updates out (updatesReceived): {kind: "applied"|"replaced"|"resubscribed"|
 * "stopped"|"answered"|"error"|"invalid"|"frames-lost"|"synced"|"draft"|
 * "draft-closed", ...}.
 * The shared cases in tests/cases/consumer run against both.
 */
export class Consumer {
  constructor({ keepMessages = true } = {}) {
    this.keepMessages = keepMessages;
    /** transcriptId -> Subscription */
    this.subscriptions = new Map();
    this.seq = new SeqTracker();
    this.connected = false;
    this.invalidFrames = 0;
    this._ops = [];
    this._updates = [];
    this._barrier = 0;
    this._unmarked = new Set(); // resubscribed since the last barrier ping
    this._barrierDue = false;
  }

  /** Follow a transcript, or only a window of it (the same subscription if already followed). */
  subscribe(transcriptId, { window = null, presence = false } = {}) {
    let sub = this.subscriptions.get(transcriptId);
    if (sub) return sub;
    sub = new Subscription(transcriptId, { keepMessages: this.keepMessages, window });
    if (presence) sub.presence = new PresenceCopy();
    this.subscriptions.set(transcriptId, sub);
    sub.continuity.resyncing = true; // the baseline is on its way
    if (this.connected) {
      this._queueSubscribe(sub, sub.request());
      this._flushBarrier();
    }
    return sub;
  }

  /** Stop following a transcript; false if it was not followed. */
  unsubscribe(transcriptId) {
    const sub = this.subscriptions.get(transcriptId);
    if (!sub) return false;
    this.subscriptions.delete(transcriptId);
    this._unmarked.delete(sub);
    if (this.connected) this._ops.push({ op: "unsubscribe", transcriptId });
    return true;
  }

  /**
   * State (or with leave: true end) this consumer's presence on a followed
   * transcript: {transcriptId, kind?, state?, name?, leave?}. Stated again on
   * every new connection (what an op leaves out keeps what earlier ones said).
   */
  statePresence(op) {
    const sub = this.subscriptions.get(op.transcriptId);
    if (!sub) throw new Error(`presence on ${JSON.stringify(op.transcriptId)}, which is not followed`);
    const { ref: _ref, ...kept } = op;
    sub.stated = op.leave ? null : { ...(sub.stated ?? {}), ...kept, op: "presence" };
    if (this.connected) this._ops.push({ ...op, op: "presence" });
  }

  /** A new connection is up: seq starts over, every subscription resubscribes, then a barrier. */
  connectionMade() {
    this.connected = true;
    this.seq.reset();
    this._ops = [];
    this._unmarked.clear();
    for (const sub of [...this.subscriptions.values()]) this._resubscribe(sub, sub.onNewConnection());
    for (const sub of this.subscriptions.values()) if (sub.stated) this._ops.push({ ...sub.stated });
    this._barrierDue = true;
    this._flushBarrier();
  }

  /** The connection is gone; ops not yet taken are dropped. */
  connectionLost() {
    this.connected = false;
    this._ops = [];
    this._unmarked.clear();
    for (const sub of this.subscriptions.values()) sub.onConnectionLost();
  }

  /** Take one WebSocket text message: every frame in it, in order. */
  receiveData(data) {
    for (const line of String(data).split("\n")) {
      if (!line.trim()) continue;
      let frame;
      try {
        frame = acceptFrame(JSON.parse(line));
      } catch (err) {
        this.invalidFrames += 1;
        this._updates.push({ kind: "invalid", reason: String(err.message ?? err) });
        continue;
      }
      this._receive(frame);
    }
    this._flushBarrier();
  }

  /** Take one decoded frame (validated here like any other). */
  receiveFrame(frame) {
    try {
      acceptFrame(frame);
    } catch (err) {
      this.invalidFrames += 1;
      this._updates.push({ kind: "invalid", reason: String(err.message ?? err) });
      return;
    }
    this._receive(frame);
    this._flushBarrier();
  }

  /** The ops to send now, in order (then empty). */
  opsToSend() {
    const ops = this._ops;
    this._ops = [];
    return ops;
  }

  /** The updates since the last call, in order (then empty). */
  updatesReceived() {
    const updates = this._updates;
    this._updates = [];
    return updates;
  }

  _receive(frame) {
    const last = this.seq.last;
    const verdict = this.seq.observe(frame.seq);
    if (verdict === SeqVerdict.REPEAT) return;
    if (verdict === SeqVerdict.GAP) {
      this._updates.push({ kind: "frames-lost", missing: frame.seq - last - 1 });
      for (const sub of [...this.subscriptions.values()]) this._resubscribe(sub, sub.onSeqGap());
    }
    switch (frame.type) {
      case "increment": {
        const sub = this.subscriptions.get(frame.event.transcriptId);
        if (sub) {
          const update = sub.onEvent(frame.event);
          this._take(sub, update);
          // A committed draft closes right behind its message.
          if (update?.kind === "applied" && sub.finals) this._updates.push(...sub.settleDrafts());
        }
        break;
      }
      case "draft": {
        const sub = this.subscriptions.get(frame.transcriptId);
        const update = sub ? sub.onDraft(frame) : null;
        if (update !== null) this._updates.push(update);
        break;
      }
      case "presence": {
        const sub = this.subscriptions.get(frame.transcriptId);
        if (sub && sub.presence) {
          sub.presence.take(frame);
          this._updates.push({ kind: "presence", transcriptId: frame.transcriptId, presence: sub.presence, frame });
        }
        break;
      }
      case "baseline": {
        const sub = this.subscriptions.get(frame.snapshot.transcriptId);
        if (sub) {
          const update = sub.onBaseline(frame.snapshot);
          this._take(sub, update);
          if (update?.kind === "replaced") this._updates.push(...sub.settleDrafts());
        }
        break;
      }
      case "pong": {
        const number = barrierNumber(frame.ref);
        if (number === null) this._updates.push({ kind: "answered", frame });
        else this._onBarrier(number);
        break;
      }
      case "ack":
        this._updates.push({ kind: "answered", frame });
        break;
      default:
        this._onError(frame);
    }
  }

  _onError(frame) {
    if (frame.ref !== undefined && frame.ref !== null && barrierNumber(frame.ref) === null) {
      this._updates.push({ kind: "answered", frame });
      return;
    }
    const about = frame.transcriptId;
    if (about === undefined || about === null) {
      if (frame.code === LAGGED) {
        for (const sub of [...this.subscriptions.values()]) this._take(sub, sub.onError(frame));
        return;
      }
      this._updates.push({ kind: "error", frame });
      return;
    }
    const sub = this.subscriptions.get(about);
    if (!sub) this._updates.push({ kind: "error", frame });
    else this._take(sub, sub.onError(frame));
  }

  _take(sub, update) {
    if (update === null) return;
    if (update.kind === "resubscribed") {
      this._resubscribe(sub, update);
      return;
    }
    if (update.kind === "stopped") {
      if (this.subscriptions.get(sub.transcriptId) === sub) this.subscriptions.delete(sub.transcriptId);
      this._unmarked.delete(sub);
    }
    this._updates.push(update);
  }

  _resubscribe(sub, update) {
    this._updates.push(update);
    if (this.connected) {
      this._queueSubscribe(
        sub,
        subscribeOp(update.transcriptId, update.fromRevision, update.epoch, null, sub.window, sub.presence !== null),
      );
    }
  }

  _queueSubscribe(sub, op) {
    this._ops.push(op);
    sub.barrier = 0; // an earlier barrier's pong does not answer this subscribe: the next one does
    this._unmarked.add(sub);
  }

  _flushBarrier() {
    if (!this.connected || !(this._unmarked.size || this._barrierDue)) return;
    this._barrier += 1;
    this._barrierDue = false;
    this._ops.push({ op: "ping", ref: `${BARRIER_PREFIX}${this._barrier}` });
    for (const sub of this._unmarked) sub.barrier = this._barrier;
    this._unmarked.clear();
  }

  _onBarrier(number) {
    for (const sub of this.subscriptions.values()) {
      if (sub.barrier > 0 && sub.barrier <= number) this._updates.push(...sub.onResubscribeAnswered());
    }
    if (number === this._barrier) this._updates.push({ kind: "synced", barrier: number });
  }
}
