// Continuity (the port of protocol/continuity.py): a connection's seq
// (SeqTracker), one subscribed transcript's revisions and epoch (Continuity),
// and the decisions they return. Pure: no socket, no clock, no DOM. Node's
// test runner runs the shared cases in tests/cases/continuity/*.json against
// them (tests/js/continuity.test.mjs).

import { LAGGED, STOP_CODES } from "./wire.js";

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

export function subscribeOp(transcriptId, fromRevision, epoch, ref, window, presence = false) {
  const op = { op: "subscribe", transcriptId };
  if (presence) op.presence = true;
  if (fromRevision !== null && fromRevision !== undefined) op.fromRevision = fromRevision;
  if (epoch !== null && epoch !== undefined) op.epoch = epoch;
  if (ref !== null && ref !== undefined) op.ref = ref;
  if (window !== null && window !== undefined) op.window = window;
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
      dropped: 0,
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
    this._tally.dropped += 1;
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
