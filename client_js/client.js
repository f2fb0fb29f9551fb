// transcript-sync's JavaScript client: a dependency-free ES module, for
// browsers and Node >= 20 (where, before Node 22, the optional `ws` package
// provides the WebSocket).
//
// Published as the npm package in client_js/ (types in client.d.ts) and
// served by the server at /v1/client.js: one source, the same file. It
// speaks the wire protocol of docs/protocol.md section 2 (subprotocol
// tsync.v1.json), keeps one mirror per
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
//   const client = new TsyncClient("ws://host/v1/ws", { getToken: async () => token });
//   client.on("baseline", ({ mirror }) => render(mirror));
//   client.on("messages", ({ start, messages }) => add(start, messages));
//   client.on("status", ({ state }) => show(state));
//   client.subscribe("t1");
//   client.connect();
//   await client.append("t1", [{ role: "user", content: "hi" }]);

export const SUBPROTOCOL_JSON = "tsync.v1.json";

/**
 * What to do after the server closed the connection with each code (the close
 * codes of protocol/codes.py, tests/cases/errors.json): "backoff" reconnect
 * after a growing random pause, "resume" reconnect now, "new-token" only with
 * new credentials, "no" not before the cause is fixed. Codes not listed
 * (1006, a dropped network) mean "backoff".
 */
export const CLOSE_ADVICE = Object.freeze({
  1001: "backoff",
  1007: "no",
  1008: "no",
  1009: "no",
  1011: "backoff",
  1012: "backoff",
  1013: "backoff",
  4001: "new-token",
  4008: "resume",
  4010: "backoff",
});

/** The exp of a JWT in milliseconds since the epoch (unverified), or null. */
export function tokenExpiry(token) {
  const part = typeof token === "string" ? token.split(".")[1] : undefined;
  if (!part || token.split(".").length !== 3) return null;
  try {
    const json = atob(part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "="));
    const exp = JSON.parse(json)?.exp;
    return typeof exp === "number" && Number.isFinite(exp) ? exp * 1000 : null;
  } catch {
    return null;
  }
}

/** Error codes after which a subscription cannot go on by resubscribing. */
export const STOP_CODES = Object.freeze(["not-found", "forbidden", "unauthorized", "too-many-subscriptions", "invalid-view"]);
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

function subscribeOp(transcriptId, fromRevision, epoch, ref, window, presence = false) {
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

// --- validation: what protocol.wire.accept_transcript_update accepts -------------------

const ID = /^[A-Za-z0-9._:-]{1,128}$/;
const VIEW_NAME = /^[A-Za-z0-9._:-]{1,64}$/;
const ROLES = ["user", "assistant", "system", "tool", "context"];
const MESSAGE_FIELDS = new Set(["role", "content", "name", "tool_call_id", "tool_calls", "metadata"]);
const PART_FIELDS = {
  text: ["text"],
  image_url: ["image_url"],
  attachment: ["name", "mime", "content"],
};
const MAX_REF_LENGTH = 200;
/** The largest presence state, as its JSON in bytes (protocol.limits.MAX_PRESENCE_STATE_BYTES). */
export const MAX_PRESENCE_STATE_BYTES = 1024;

/** A frame, snapshot or event the consumer cannot accept; message says why. */
export class InvalidFrame extends Error {
  constructor(message) {
    super(message);
    this.name = "InvalidFrame";
  }
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const isInt = (v, min) => Number.isInteger(v) && v >= min;
const isOptional = (v, check) => v === undefined || v === null || check(v);
const isRef = (v) => isOptional(v, (r) => (typeof r === "string" && r.length <= MAX_REF_LENGTH) || Number.isInteger(r));

function need(ok, path, what) {
  if (!ok) throw new InvalidFrame(`${path}: expected ${what}`);
}

function checkMessage(m, path) {
  need(isObject(m), path, "a message object");
  for (const key of Object.keys(m)) need(MESSAGE_FIELDS.has(key), `${path}.${key}`, "no unknown field");
  need(ROLES.includes(m.role), `${path}.role`, `one of ${ROLES.join(", ")}`);
  if (Array.isArray(m.content)) {
    m.content.forEach((part, j) => {
      const where = `${path}.content[${j}]`;
      need(isObject(part) && Object.hasOwn(PART_FIELDS, part.type), `${where}.type`, "a known content part");
      const fields = PART_FIELDS[part.type];
      for (const key of Object.keys(part)) {
        need(key === "type" || fields.includes(key), `${where}.${key}`, "no unknown field");
      }
      if (part.type === "image_url") {
        const image = part.image_url;
        need(isObject(image) && typeof image.url === "string", `${where}.image_url.url`, "a string");
        need(isOptional(image.detail, (d) => typeof d === "string"), `${where}.image_url.detail`, "a string");
        for (const key of Object.keys(image)) {
          need(key === "url" || key === "detail", `${where}.image_url.${key}`, "no unknown field");
        }
      } else {
        for (const key of fields) need(typeof part[key] === "string", `${where}.${key}`, "a string");
      }
    });
  } else {
    need(typeof m.content === "string", `${path}.content`, "a string or a list of content parts");
  }
  for (const key of ["name", "tool_call_id"]) {
    need(isOptional(m[key], (v) => typeof v === "string"), `${path}.${key}`, "a string");
  }
  need(isOptional(m.tool_calls, (v) => Array.isArray(v) && v.every(isObject)), `${path}.tool_calls`, "a list of objects");
  need(isOptional(m.metadata, isObject), `${path}.metadata`, "an object");
}

function checkMessages(list, path) {
  need(Array.isArray(list), path, "a list of messages");
  list.forEach((m, i) => checkMessage(m, `${path}[${i}]`));
}

/**
 * Raise InvalidFrame unless some sequence of changes could have produced the
 * snapshot: the port of protocol.state.check_snapshot (the same invariants
 * Transcript.restore and every copy check). Fills in length when an older
 * server left it out (its snapshots are whole).
 */
export function checkSnapshot(s, path = "snapshot") {
  need(isObject(s), path, "an object");
  need(typeof s.transcriptId === "string" && ID.test(s.transcriptId), `${path}.transcriptId`, "a transcript id");
  need(typeof s.epoch === "string", `${path}.epoch`, "a string");
  for (const key of ["revision", "start", "activeStart"]) need(isInt(s[key], 0), `${path}.${key}`, "an integer >= 0");
  checkMessages(s.messages, `${path}.messages`);
  need(Array.isArray(s.segments), `${path}.segments`, "a list");
  s.segments.forEach((seg, i) => {
    need(isObject(seg) && isInt(seg.start, 0), `${path}.segments[${i}].start`, "an integer >= 0");
    need(seg.end === null || isInt(seg.end, 0), `${path}.segments[${i}].end`, "an integer >= 0 or null");
  });
  need(s.length === undefined || isInt(s.length, 0), `${path}.length`, "an integer >= 0");
  need(isOptional(s.digest, isDigest), `${path}.digest`, "a digest (32 lowercase hex digits)");
  need(s.views === undefined || Array.isArray(s.views), `${path}.views`, "a list");
  (s.views ?? []).forEach((v, i) => {
    need(isObject(v) && typeof v.name === "string" && VIEW_NAME.test(v.name), `${path}.views[${i}].name`, "a View name");
    need(isInt(v.start, 0), `${path}.views[${i}].start`, "an integer >= 0");
    need(isOptional(v.end, (e) => isInt(e, 0)), `${path}.views[${i}].end`, "an integer >= 0 or null");
  });
  need(s.viewChanges === undefined || isInt(s.viewChanges, 0), `${path}.viewChanges`, "an integer >= 0");
  const problem = snapshotProblem(s, s.length ?? s.start + s.messages.length);
  if (problem) throw new InvalidFrame(`inconsistent snapshot of transcript '${s.transcriptId}': ${problem}`);
}

function snapshotProblem(s, length) {
  const end = s.start + s.messages.length;
  if (end > length) return `its messages end at ${end}, past its length ${length}`;
  const segments = s.segments;
  if (!segments.length) return "no segments (there is always an open one)";
  if (segments[0].start !== 0) return "the first segment does not start at 0";
  for (let i = 0; i < segments.length - 1; i += 1) {
    if (segments[i].end === null) return `segments[${i}] is open, but only the last segment may be open`;
  }
  const open = segments[segments.length - 1];
  if (open.end !== null) return "the last segment is closed: it must be the open one";
  if (open.start !== s.activeStart) {
    return `activeStart ${s.activeStart} is not the start of the open segment (${open.start})`;
  }
  if (s.activeStart > length) return `activeStart ${s.activeStart} is past the length ${length}`;
  for (let i = 0; i < segments.length - 1; i += 1) {
    const older = segments[i];
    const newer = segments[i + 1];
    if (older.end > length) return `segments[${i}] ends at ${older.end}, past the length ${length}`;
    if (!(older.start < newer.start && newer.start <= older.end)) {
      return `segments[${i + 1}] does not start inside segments[${i}]`;
    }
    if (newer.end !== null && newer.end < older.end) return `segments[${i + 1}] ends before segments[${i}]`;
  }
  const views = s.views ?? [];
  const viewChanges = s.viewChanges ?? 0;
  const names = new Set();
  for (let i = 0; i < views.length; i += 1) {
    const v = views[i];
    if (names.has(v.name)) return `views[${i}]: a second View named '${v.name}'`;
    names.add(v.name);
    const end = v.end ?? length;
    if (!(v.start <= end && end <= length)) return `views[${i}] ('${v.name}') is not within [0, ${length}] with start <= end`;
  }
  if (viewChanges < views.length) return `${views.length} Views but only ${viewChanges} View changes`;
  const starts = segments.length - 1;
  const changes = starts + viewChanges;
  const low = changes + (length ? 1 : 0);
  const high = changes + length;
  if (!(low <= s.revision && s.revision <= high)) {
    return `revision ${s.revision} cannot follow from ${length} messages, ${starts} segment starts and ${viewChanges} View changes (it must be within ${low}..${high})`;
  }
  return null;
}

/** checkSnapshot, and the messages reach the length (a baseline may leave out the start, never the end). */
export function checkBaseline(s, path = "snapshot") {
  checkSnapshot(s, path);
  const length = s.length ?? s.start + s.messages.length;
  if (s.start + s.messages.length !== length) {
    throw new InvalidFrame(
      `snapshot of transcript '${s.transcriptId}' holds [${s.start}, ${s.start + s.messages.length}) of ${length} messages: a baseline's messages reach the length`,
    );
  }
}

/** Raise InvalidFrame unless the event is well formed (port of protocol.state.check_event). */
export function checkEvent(e, path = "event") {
  need(isObject(e), path, "an object");
  need(typeof e.transcriptId === "string" && ID.test(e.transcriptId), `${path}.transcriptId`, "a transcript id");
  need(typeof e.epoch === "string", `${path}.epoch`, "a string");
  need(isInt(e.revision, 1), `${path}.revision`, "an integer >= 1");
  need(Number.isInteger(e.occurredAt), `${path}.occurredAt`, "an integer");
  need(isOptional(e.origin, (o) => isObject(o) && typeof o.contextId === "string"), `${path}.origin`, "an origin");
  need(isOptional(e.digest, isDigest), `${path}.digest`, "a digest (32 lowercase hex digits)");
  const c = e.change;
  need(isObject(c), `${path}.change`, "an object");
  if (c.kind === "messages-appended") {
    need(isInt(c.start, 0), `${path}.change.start`, "an integer >= 0");
    checkMessages(c.messages, `${path}.change.messages`);
    if (!c.messages.length) throw new InvalidFrame("event.change: an append carries at least one message");
  } else if (c.kind === "segment-started") {
    for (const key of ["previousStart", "start", "end"]) need(isInt(c[key], 0), `${path}.change.${key}`, "an integer >= 0");
    if (!(c.previousStart < c.start && c.start <= c.end)) {
      throw new InvalidFrame("event.change: a segment start needs previousStart < start <= end");
    }
  } else if (c.kind === "view-changed" || c.kind === "view-left") {
    need(typeof c.name === "string" && VIEW_NAME.test(c.name), `${path}.change.name`, "a View name");
    need(isInt(c.start, 0), `${path}.change.start`, "an integer >= 0");
    need(isOptional(c.end, (v) => isInt(v, 0)), `${path}.change.end`, "an integer >= 0 or null");
    if (c.end !== undefined && c.end !== null && c.end < c.start) {
      throw new InvalidFrame("event.change: a View's range needs start <= end");
    }
  } else {
    throw new InvalidFrame(`${path}.change.kind: expected messages-appended, segment-started, view-changed or view-left`);
  }
}

const DRAFT_STATES = ["open", "final", "cancelled", "expired"];

/** A draft frame's shape (port of protocol.wire.check_draft_frame). */
function checkDraftFrame(frame) {
  need(typeof frame.transcriptId === "string" && ID.test(frame.transcriptId), "transcriptId", "a transcript id");
  need(typeof frame.draftId === "string" && ID.test(frame.draftId), "draftId", "a draft id");
  need(ROLES.includes(frame.role), "role", `one of ${ROLES.join(", ")}`);
  need(isInt(frame.n, 0), "n", "an integer >= 0");
  const state = frame.state ?? "open";
  need(DRAFT_STATES.includes(state), "state", `one of ${DRAFT_STATES.join(", ")}`);
  for (const key of ["delta", "text"]) need(isOptional(frame[key], (v) => typeof v === "string"), key, "a string");
  need(isOptional(frame.revision, (v) => isInt(v, 0)), "revision", "an integer >= 0");
  const hasDelta = frame.delta !== undefined && frame.delta !== null;
  const hasText = frame.text !== undefined && frame.text !== null;
  const hasRevision = frame.revision !== undefined && frame.revision !== null;
  if (state === "open") {
    if (frame.n < 1 || hasDelta === hasText) throw new InvalidFrame("an open draft's frame has n >= 1 and one of delta and text");
    if (hasRevision) throw new InvalidFrame("only a final draft frame carries a revision");
    return;
  }
  if (hasDelta || hasText) throw new InvalidFrame(`a ${state} draft frame carries no delta or text`);
  if (hasRevision !== (state === "final")) throw new InvalidFrame("a final draft frame carries the revision, no other close does");
}

/**
 * Validate ONE decoded server frame (port of accept_transcript_update): the
 * frame itself, or InvalidFrame with a readable reason.
 */
export function acceptFrame(frame) {
  need(isObject(frame), "frame", "an object");
  need(isInt(frame.seq, 1), "seq", "an integer >= 1");
  switch (frame.type) {
    case "baseline":
      checkBaseline(frame.snapshot);
      break;
    case "increment":
      checkEvent(frame.event);
      break;
    case "ack":
      need(typeof frame.transcriptId === "string" && ID.test(frame.transcriptId), "transcriptId", "a transcript id");
      need(isInt(frame.revision, 0), "revision", "an integer >= 0");
      need(isRef(frame.ref), "ref", "a ref");
      for (const key of ["start", "count"]) need(isOptional(frame[key], (v) => isInt(v, 0)), key, "an integer >= 0");
      need(isOptional(frame.duplicate, (v) => typeof v === "boolean"), "duplicate", "a boolean");
      break;
    case "pong":
      need(isRef(frame.ref), "ref", "a ref");
      break;
    case "error":
      need(typeof frame.code === "string", "code", "a string");
      need(typeof frame.message === "string", "message", "a string");
      need(isOptional(frame.transcriptId, (v) => typeof v === "string"), "transcriptId", "a string");
      need(isRef(frame.ref), "ref", "a ref");
      need(isOptional(frame.revision, (v) => isInt(v, 0)), "revision", "an integer >= 0");
      break;
    case "draft":
      checkDraftFrame(frame);
      break;
    case "presence":
      checkPresenceFrame(frame);
      break;
    default:
      throw new InvalidFrame(`type: unknown frame type ${JSON.stringify(frame.type)}`);
  }
  return frame;
}

const PRESENCE_KINDS = ["viewer", "writer", "agent"];

function checkMember(member, where) {
  need(isObject(member), where, "a member object");
  need(typeof member.id === "string" && member.id.length > 0, `${where}.id`, "a string");
  need(typeof member.who === "string" && member.who.length > 0, `${where}.who`, "a string");
  need(isOptional(member.kind, (v) => PRESENCE_KINDS.includes(v)), `${where}.kind`, "viewer, writer or agent");
  need(isOptional(member.state, isObject), `${where}.state`, "an object");
}

/** Check a presence frame (port of protocol.wire.PresenceFrame's schema). */
function checkPresenceFrame(frame) {
  need(typeof frame.transcriptId === "string" && ID.test(frame.transcriptId), "transcriptId", "a transcript id");
  need(isObject(frame.counts), "counts", "an object");
  for (const key of ["viewers", "writers", "agents"]) need(isInt(frame.counts[key] ?? 0, 0), `counts.${key}`, "an integer >= 0");
  for (const key of ["members", "joined", "updated"]) {
    need(isOptional(frame[key], Array.isArray), key, "a list");
    (frame[key] ?? []).forEach((member, i) => checkMember(member, `${key}[${i}]`));
  }
  need(isOptional(frame.left, (v) => Array.isArray(v) && v.every((id) => typeof id === "string")), "left", "a list of ids");
}

/**
 * A copy of one transcript's presence (port of protocol.presence.PresenceCopy):
 * members (id -> {id, who, kind, state}) or null while the server sends
 * counts only; counts {viewers, writers, agents}.
 */
export class PresenceCopy {
  constructor() {
    this.members = null;
    this.counts = { viewers: 0, writers: 0, agents: 0 };
  }

  /** Apply one presence frame: a whole list, changes, or counts alone. */
  take(frame) {
    this.counts = { viewers: 0, writers: 0, agents: 0, ...frame.counts };
    const norm = (m) => ({ kind: "viewer", state: {}, ...m });
    if (frame.members !== undefined && frame.members !== null) {
      this.members = new Map(frame.members.map((m) => [m.id, norm(m)]));
      return;
    }
    const changes = [frame.joined, frame.updated, frame.left].some((list) => list && list.length);
    if (!changes) {
      this.members = null;
      return;
    }
    if (this.members === null) this.members = new Map();
    for (const m of frame.joined ?? []) this.members.set(m.id, norm(m));
    for (const m of frame.updated ?? []) this.members.set(m.id, norm(m));
    for (const id of frame.left ?? []) this.members.delete(id);
  }

  /** The members ordered by who and id ([] when only counted). */
  listed() {
    if (this.members === null) return [];
    return [...this.members.values()].sort((a, b) => (a.who < b.who ? -1 : a.who > b.who ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }
}

// --- the rolling digest ------------------------------------------------------------------

// The port of protocol/digest.py (docs/protocol.md, "The digest"):
//   digest(0) = H(JCS(transcriptId)),  digest(R) = H(digest(R-1) || JCS(change R))
// JCS is RFC 8785 (JSON.stringify already writes numbers and strings as it
// says; keys are sorted by UTF-16 code units, which is what sort() does), H
// is SHA-256 cut to 16 bytes, written as 32 lowercase hex digits. Synchronous
// (the copy checks an event as it applies it), so SHA-256 is written out
// here: crypto.subtle only answers with a promise.

const DIGEST_RE = /^[0-9a-f]{32}$/;
const isDigest = (v) => typeof v === "string" && DIGEST_RE.test(v);

/** The RFC 8785 (JCS) text of a JSON value; undefined members are left out. */
export function canonicalJson(value) {
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) throw new Error("JCS: not a finite number");
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
}

const SHA256_K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/** SHA-256 of bytes (a Uint8Array), as a Uint8Array of 32 bytes (FIPS 180-4). */
export function sha256(bytes) {
  const bits = bytes.length * 8;
  const padded = new Uint8Array(((bytes.length + 9 + 63) >> 6) << 6);
  padded.set(bytes);
  padded[bytes.length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(bits / 0x100000000));
  view.setUint32(padded.length - 4, bits >>> 0);
  const h = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < padded.length; off += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(off + i * 4);
    for (let i = 16; i < 64; i++) {
      const s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >>> 3);
      const s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >>> 10);
      w[i] = (w[i - 16] + s0 + w[i - 7] + s1) >>> 0;
    }
    let [a, b, c, d, e, f, g, k] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i]) >>> 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
      k = g;
      g = f;
      f = e;
      e = (d + t1) >>> 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) >>> 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
  }
  const out = new Uint8Array(32);
  const outView = new DataView(out.buffer);
  for (let i = 0; i < 8; i++) outView.setUint32(i * 4, h[i]);
  return out;
}

const UTF8 = new TextEncoder();
const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

function digestOf(bytes) {
  return toHex(sha256(bytes).subarray(0, 16));
}

/** digest(0) of a transcript: from its id alone. */
export function genesisDigest(transcriptId) {
  return digestOf(UTF8.encode(canonicalJson(transcriptId)));
}

/** digest(R) from digest(R-1) and change R (as the wire carries it inside an event). */
export function nextDigest(previous, change) {
  if (!isDigest(previous)) throw new Error(`not a digest: ${JSON.stringify(previous)}`);
  const body = UTF8.encode(canonicalJson(change));
  const bytes = new Uint8Array(16 + body.length);
  for (let i = 0; i < 16; i++) bytes[i] = parseInt(previous.slice(2 * i, 2 * i + 2), 16);
  bytes.set(body, 16);
  return digestOf(bytes);
}

// --- the copy -----------------------------------------------------------------------

/**
 * One transcript's copy: the port of protocol.state.TranscriptState. Holds
 * messages [start, length) (messages[i] is the message at start + i), or
 * none (messages null) when made with keepMessages false; segments are
 * {start, end|null} like a snapshot's; views are {name, start, end|null}
 * ordered by name, viewChanges how many View changes the revision counts.
 * apply() checks every event exactly as the server's entity does;
 * prepend() widens the window backwards (loadEarlier).
 */
export class TranscriptCopy {
  constructor(snapshot, { keepMessages = true } = {}) {
    checkBaseline(snapshot);
    this.transcriptId = snapshot.transcriptId;
    this.epoch = snapshot.epoch;
    this.revision = snapshot.revision;
    this.length = snapshot.length ?? snapshot.start + snapshot.messages.length;
    this.start = keepMessages ? snapshot.start : this.length;
    this.messages = keepMessages ? [...snapshot.messages] : null;
    this.activeStart = snapshot.activeStart;
    this.segments = snapshot.segments.map((s) => ({ start: s.start, end: s.end }));
    this.views = (snapshot.views ?? []).map((v) => ({ name: v.name, start: v.start, end: v.end ?? null }));
    this.views.sort(byName);
    this.viewChanges = snapshot.viewChanges ?? 0;
    // The rolling digest at revision (null: the baseline's server sent none;
    // then the next event's is taken as it comes and checked from there on).
    this.digest = snapshot.digest ?? null;
  }

  /** The View called name, or null. */
  view(name) {
    return this.views.find((v) => v.name === name) ?? null;
  }

  /**
   * Widen the window backwards: messages are [start, this.start), read elsewhere
   * (the caller checked their epoch). Throws unless they end where the window begins.
   */
  prepend(start, messages) {
    if (this.messages === null) throw new Error(`this copy of '${this.transcriptId}' keeps no messages`);
    if (start < 0 || start + messages.length !== this.start) {
      throw new Error(
        `messages [${start}, ${start + messages.length}) do not end where the window [${this.start}, ${this.length}) of '${this.transcriptId}' begins`,
      );
    }
    this.messages.unshift(...messages);
    this.start = start;
  }

  /** Throw InvalidChange unless the event is exactly this copy's next change. */
  checkNext(event) {
    const name = `'${this.transcriptId}'`;
    if (event.transcriptId !== this.transcriptId) {
      throw new InvalidChange(`event of transcript '${event.transcriptId}' applied to ${name}`);
    }
    if (event.epoch !== this.epoch) {
      throw new InvalidChange(`event of epoch '${event.epoch}' applied to transcript ${name} of epoch '${this.epoch}'`);
    }
    if (event.revision !== this.revision + 1) {
      throw new InvalidChange(
        `event for revision ${event.revision} applied to transcript ${name} at revision ${this.revision} (expected ${this.revision + 1})`,
      );
    }
    const change = event.change;
    if (change.kind === "messages-appended") {
      if (!change.messages.length) throw new InvalidChange("event.change: an append carries at least one message");
      if (change.start !== this.length) {
        throw new InvalidChange(`append at index ${change.start} applied to transcript ${name} of length ${this.length}`);
      }
    } else if (change.kind === "segment-started") {
      if (
        change.previousStart !== this.activeStart ||
        change.end !== this.length ||
        !(this.activeStart < change.start && change.start <= this.length)
      ) {
        throw new InvalidChange(
          `segment start (previous ${change.previousStart}, start ${change.start}, end ${change.end}) applied to transcript ${name} with active_start ${this.activeStart} and length ${this.length}`,
        );
      }
    } else if (change.kind === "view-left") {
      const view = this.view(change.name);
      if (view === null || view.start !== change.start || view.end !== (change.end ?? null)) {
        throw new InvalidChange(`View '${change.name}' [${change.start}, ${change.end}) left in transcript ${name}, which has ${JSON.stringify(view)}`);
      }
    } else if (change.kind === "view-changed") {
      const end = change.end ?? this.length;
      if (!(change.start <= end && end <= this.length)) {
        throw new InvalidChange(`View '${change.name}' [${change.start}, ${change.end}) set in transcript ${name} of length ${this.length}`);
      }
    } else {
      throw new InvalidChange(`unknown change kind ${JSON.stringify(change.kind)}`);
    }
  }

  /**
   * The digest at the event's revision, computed from this copy's; throws
   * DigestMismatch if the event carries another one.
   */
  digestAfter(event) {
    if (this.digest === null) return event.digest ?? null;
    const computed = nextDigest(this.digest, event.change);
    if (event.digest != null && event.digest !== computed) {
      throw new DigestMismatch(this.transcriptId, event.revision, event.digest, computed);
    }
    return computed;
  }

  /** Check the event and make it the current state (nothing changes if it does not fit). */
  apply(event) {
    this.checkNext(event);
    const digest = this.digestAfter(event);
    const change = event.change;
    if (change.kind === "messages-appended") {
      this.length += change.messages.length;
      if (this.messages === null) this.start = this.length;
      else this.messages.push(...change.messages);
    } else if (change.kind === "segment-started") {
      this.segments[this.segments.length - 1].end = change.end;
      this.segments.push({ start: change.start, end: null });
      this.activeStart = change.start;
    } else {
      this.views = this.views.filter((v) => v.name !== change.name);
      if (change.kind === "view-changed") {
        this.views.push({ name: change.name, start: change.start, end: change.end ?? null });
        this.views.sort(byName);
      }
      this.viewChanges += 1;
    }
    this.revision = event.revision;
    this.digest = digest;
  }
}

const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);


/** An event that cannot be applied to a copy: malformed, or not the next change. */
export class InvalidChange extends Error {
  constructor(message) {
    super(message);
    this.name = "InvalidChange";
  }
}

/** An event that fits the copy but carries another digest than the copy computes: the histories differ. */
export class DigestMismatch extends InvalidChange {
  constructor(transcriptId, revision, carried, computed) {
    super(`transcript '${transcriptId}' revision ${revision}: the event carries digest ${carried}, this copy computes ${computed}`);
    this.name = "DigestMismatch";
    Object.assign(this, { transcriptId, revision, carried, computed });
  }
}

// --- the consumer core ------------------------------------------------------------------

/** Refs of the consumer's barrier pings (sync:1, sync:2, ...). */
export const BARRIER_PREFIX = "sync:";

function barrierNumber(ref) {
  if (typeof ref === "string" && ref.startsWith(BARRIER_PREFIX)) {
    const digits = ref.slice(BARRIER_PREFIX.length);
    if (/^[0-9]+$/.test(digits)) return Number(digits);
  }
  return null;
}

// --- replies with parts: the AI SDK's fold --------------------------------------------
//
// A port of protocol/ui_stream.py (UIMessageState.apply and its handlers,
// message()) and protocol/partial_json.py (fixJson, parsePartialJson), which
// are themselves a port of the fold of the AI SDK's readUIMessageStream; the
// three are held to one another by the shared case files
// tests/cases/ui_stream/*.json. Not ported: the compacted log and the dry
// run (check), which only the server needs. A chunk the SDK would refuse
// throws UIStreamError. Also the package's "@transcript-sync/client/ui-stream"
// entry (ui_stream.js re-exports it). Here, not in ui_stream.js, because the
// server serves this file alone at /v1/client.js, where a relative import of
// ./ui_stream.js would not be found.

/** A chunk that does not fit the stream so far (the SDK's UIMessageStreamError). */
export class UIStreamError extends Error {
  constructor(message) {
    super(message);
    this.name = "UIStreamError";
  }
}

// partial JSON

const DIGITS = "0123456789";
const HEX = "0123456789abcdefABCDEF";

/**
 * The SDK's fixJson: the longest valid prefix of partial JSON text, closed
 * (strings, arrays, objects, literals) so that it parses.
 */
export function fixJson(text) {
  const stack = ["ROOT"];
  let lastValid = -1;
  let literalStart = 0;
  let unicodeDigits = 0;
  const top = () => (stack.length ? stack[stack.length - 1] : null);
  const setTop = (s) => {
    stack[stack.length - 1] = s;
  };

  const valueStart = (char, i, swap) => {
    if (char === '"') {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_STRING");
    } else if (char === "f" || char === "t" || char === "n") {
      lastValid = i;
      literalStart = i;
      setTop(swap);
      stack.push("INSIDE_LITERAL");
    } else if (char === "-") {
      setTop(swap);
      stack.push("INSIDE_NUMBER");
    } else if (DIGITS.includes(char)) {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_NUMBER");
    } else if (char === "{") {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_OBJECT_START");
    } else if (char === "[") {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_ARRAY_START");
    }
  };
  const afterObjectValue = (char, i) => {
    if (char === ",") setTop("INSIDE_OBJECT_AFTER_COMMA");
    else if (char === "}") {
      lastValid = i;
      stack.pop();
    }
  };
  const afterArrayValue = (char, i) => {
    if (char === ",") setTop("INSIDE_ARRAY_AFTER_COMMA");
    else if (char === "]") {
      lastValid = i;
      stack.pop();
    }
  };

  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    switch (top()) {
      case "ROOT":
        valueStart(char, i, "FINISH");
        break;
      case "INSIDE_OBJECT_START":
        if (char === '"') setTop("INSIDE_OBJECT_KEY");
        else if (char === "}") {
          lastValid = i;
          stack.pop();
        }
        break;
      case "INSIDE_OBJECT_AFTER_COMMA":
        if (char === '"') setTop("INSIDE_OBJECT_KEY");
        break;
      case "INSIDE_OBJECT_KEY":
        if (char === '"') setTop("INSIDE_OBJECT_AFTER_KEY");
        break;
      case "INSIDE_OBJECT_AFTER_KEY":
        if (char === ":") setTop("INSIDE_OBJECT_BEFORE_VALUE");
        break;
      case "INSIDE_OBJECT_BEFORE_VALUE":
        valueStart(char, i, "INSIDE_OBJECT_AFTER_VALUE");
        break;
      case "INSIDE_OBJECT_AFTER_VALUE":
        afterObjectValue(char, i);
        break;
      case "INSIDE_STRING":
        if (char === '"') {
          stack.pop();
          lastValid = i;
        } else if (char === "\\") {
          stack.push("INSIDE_STRING_ESCAPE");
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_ARRAY_START":
        if (char === "]") {
          lastValid = i;
          stack.pop();
        } else {
          valueStart(char, i, "INSIDE_ARRAY_AFTER_VALUE");
        }
        break;
      case "INSIDE_ARRAY_AFTER_VALUE":
        if (char === ",") setTop("INSIDE_ARRAY_AFTER_COMMA");
        else if (char === "]") {
          lastValid = i;
          stack.pop();
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_ARRAY_AFTER_COMMA":
        valueStart(char, i, "INSIDE_ARRAY_AFTER_VALUE");
        break;
      case "INSIDE_STRING_ESCAPE":
        stack.pop();
        if (char === "u") {
          unicodeDigits = 0;
          stack.push("INSIDE_STRING_UNICODE_ESCAPE");
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_STRING_UNICODE_ESCAPE":
        if (HEX.includes(char)) {
          unicodeDigits += 1;
          if (unicodeDigits === 4) {
            stack.pop();
            lastValid = i;
          }
        }
        break;
      case "INSIDE_NUMBER":
        if (DIGITS.includes(char)) {
          lastValid = i;
        } else if ("eE-.".includes(char)) {
          // part of the number, not yet valid
        } else if (char === ",") {
          stack.pop();
          if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
        } else if (char === "}") {
          stack.pop();
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
        } else if (char === "]") {
          stack.pop();
          if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
        } else {
          stack.pop();
        }
        break;
      case "INSIDE_LITERAL": {
        const partial = text.slice(literalStart, i + 1);
        if (!["false", "true", "null"].some((word) => word.startsWith(partial))) {
          stack.pop();
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
          else if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
        } else {
          lastValid = i;
        }
        break;
      }
      default:
        break;
    }
  }

  let result = text.slice(0, lastValid + 1);
  for (let k = stack.length - 1; k >= 0; k--) {
    const state = stack[k];
    if (state === "INSIDE_STRING") result += '"';
    else if (
      state === "INSIDE_OBJECT_KEY" ||
      state === "INSIDE_OBJECT_AFTER_KEY" ||
      state === "INSIDE_OBJECT_AFTER_COMMA" ||
      state === "INSIDE_OBJECT_START" ||
      state === "INSIDE_OBJECT_BEFORE_VALUE" ||
      state === "INSIDE_OBJECT_AFTER_VALUE"
    ) {
      result += "}";
    } else if (state === "INSIDE_ARRAY_START" || state === "INSIDE_ARRAY_AFTER_COMMA" || state === "INSIDE_ARRAY_AFTER_VALUE") {
      result += "]";
    } else if (state === "INSIDE_LITERAL") {
      const partial = text.slice(literalStart);
      for (const word of ["true", "false", "null"]) {
        if (word.startsWith(partial)) {
          result += word.slice(partial.length);
          break;
        }
      }
    }
  }
  return result;
}

/**
 * The SDK's parsePartialJson(text).value: the text parsed, else its fixJson
 * repair parsed, else undefined.
 */
export function parsePartialJson(text) {
  for (const candidate of [text, fixJson(text)]) {
    try {
      return JSON.parse(candidate);
    } catch {
      // try the repair, then give up
    }
  }
  return undefined;
}

// the fold

const jsonCopy = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

/** The SDK's mergeObjects: a deep merge of plain objects. */
function mergeObjects(base, overrides) {
  if (base === undefined && overrides === undefined) return undefined;
  if (base === undefined) return overrides;
  if (overrides === undefined) return base;
  const result = { ...base };
  for (const [key, value] of Object.entries(overrides)) {
    if (key === "__proto__" || key === "constructor" || key === "prototype" || value === undefined) continue;
    const baseValue = base[key];
    if (isObject(value) && isObject(baseValue)) result[key] = mergeObjects(baseValue, value);
    else result[key] = value;
  }
  return result;
}

const isTool = (part) => part.type.startsWith("tool-") || part.type === "dynamic-tool";
const isStaticTool = (part) => part.type.startsWith("tool-");
const staticName = (part) => part.type.split("-").slice(1).join("-");
const RESULT_STATES = ["output-available", "output-error"];

/** The fields each chunk type must carry as strings (the SDK's schema; the fold reads them). */
const REQUIRED = {
  "text-start": ["id"],
  "text-delta": ["id", "delta"],
  "text-end": ["id"],
  "reasoning-start": ["id"],
  "reasoning-delta": ["id", "delta"],
  "reasoning-end": ["id"],
  custom: ["kind"],
  error: ["errorText"],
  "tool-input-start": ["toolCallId", "toolName"],
  "tool-input-delta": ["toolCallId", "inputTextDelta"],
  "tool-input-available": ["toolCallId", "toolName"],
  "tool-input-error": ["toolCallId", "toolName", "errorText"],
  "tool-approval-request": ["approvalId", "toolCallId"],
  "tool-approval-response": ["approvalId"],
  "tool-output-available": ["toolCallId"],
  "tool-output-error": ["toolCallId", "errorText"],
  "tool-output-denied": ["toolCallId"],
  "source-url": ["sourceId", "url"],
  "source-document": ["sourceId", "mediaType", "title"],
  file: ["url", "mediaType"],
  "reasoning-file": ["url", "mediaType"],
  "steering-message": ["id"],
};

/**
 * One assistant UIMessage being streamed, as readUIMessageStream builds it
 * from the chunks (with resetStateOnMessageIdChange). Port of
 * protocol.ui_stream.UIMessageState (without its compacted log).
 */
export class UIMessageState {
  constructor(messageId = "") {
    this._reset(messageId);
    this.finishReason = undefined;
  }

  _reset(messageId) {
    this.msg = { id: messageId, metadata: undefined, role: "assistant", parts: [] };
    this.activeText = new Map();
    this.activeReasoning = new Map();
    this.partialTools = new Map();
  }

  get id() {
    return String(this.msg.id);
  }

  get parts() {
    return this.msg.parts;
  }

  /** The message as the SDK shows it now (a copy, JSON-ready: keys set to undefined left out). */
  message() {
    return JSON.parse(JSON.stringify(this.msg));
  }

  /**
   * Fold one chunk in (a copy of it). True when the SDK would show a new
   * state of the message for it (not for start-step, finish-step, abort,
   * error, a transient data part, nor a start, finish or message-metadata
   * that changed nothing). Throws UIStreamError for a chunk that does not fit.
   */
  apply(chunk) {
    if (!isObject(chunk) || typeof chunk.type !== "string") {
      throw new UIStreamError("a chunk is an object with a string type");
    }
    const kind = chunk.type;
    for (const key of REQUIRED[kind] ?? []) {
      if (typeof chunk[key] !== "string") throw new UIStreamError(`a ${kind} chunk needs ${key} (a string)`);
    }
    const own = jsonCopy(chunk);
    const handler = Object.hasOwn(HANDLERS, kind) ? HANDLERS[kind] : undefined;
    if (handler !== undefined) return handler(this, own) !== false;
    if (kind.startsWith("data-")) return this._data(own);
    // Any other type (abort, error and what a newer SDK adds) changes nothing.
    return false;
  }

  /** Fold chunks in, in order; true when any would show a new state. */
  applyAll(chunks) {
    let shown = false;
    for (const chunk of chunks) shown = this.apply(chunk) || shown;
    return shown;
  }

  // -- helpers, named as the SDK's --

  _stepParts() {
    const parts = this.parts;
    let start = parts.length - 1;
    while (start >= 0 && parts[start].type !== "step-start") start -= 1;
    return parts.slice(start + 1);
  }

  _toolInvocation(callId) {
    for (const part of this._stepParts()) {
      if (isTool(part) && part.toolCallId === callId) return part;
    }
    for (let k = this.parts.length - 1; k >= 0; k--) {
      const earlier = this.parts[k];
      if (isTool(earlier) && earlier.toolCallId === callId) return earlier;
    }
    throw new UIStreamError(`No tool invocation found for tool call ID "${callId}".`);
  }

  _updateTool(options, existing, dynamic) {
    let part = existing;
    if (part === null) {
      part =
        this._stepParts().find(
          (c) => (dynamic ? c.type === "dynamic-tool" : isStaticTool(c)) && c.toolCallId === options.toolCallId,
        ) ?? null;
    }
    const state = options.state;
    const providerMetadata = options.providerMetadata;
    if (part !== null) {
      part.state = state;
      if (dynamic) part.toolName = options.toolName;
      else part.type = `tool-${options.toolName}`;
      part.input = options.input;
      part.output = options.output;
      part.errorText = options.errorText;
      part.rawInput = options.rawInput;
      if (options.inputEncoding != null) part.inputEncoding = options.inputEncoding;
      else delete part.inputEncoding;
      part.preliminary = options.preliminary;
      if (options.title !== undefined) part.title = options.title;
      if (options.toolMetadata !== undefined) part.toolMetadata = options.toolMetadata;
      part.providerExecuted = options.providerExecuted ?? part.providerExecuted;
      if (providerMetadata != null) {
        part[RESULT_STATES.includes(state) ? "resultProviderMetadata" : "callProviderMetadata"] = providerMetadata;
      }
      return;
    }
    const created = dynamic ? { type: "dynamic-tool", toolName: options.toolName } : { type: `tool-${options.toolName}` };
    created.toolCallId = options.toolCallId;
    created.state = state;
    created.title = options.title;
    if (options.toolMetadata !== undefined) created.toolMetadata = options.toolMetadata;
    created.input = options.input;
    if (options.inputEncoding != null) created.inputEncoding = options.inputEncoding;
    created.output = options.output;
    if (!dynamic) created.rawInput = options.rawInput; // the SDK's new dynamic part has no rawInput
    created.errorText = options.errorText;
    created.providerExecuted = options.providerExecuted;
    created.preliminary = options.preliminary;
    if (providerMetadata != null) {
      created[RESULT_STATES.includes(state) ? "resultProviderMetadata" : "callProviderMetadata"] = providerMetadata;
    }
    this.parts.push(created);
  }

  _metadata(metadata) {
    if (metadata == null) return false;
    const current = this.msg.metadata;
    this.msg.metadata = current != null ? mergeObjects(current, metadata) : metadata;
    return true;
  }

  // -- the chunks --

  _textStart(chunk) {
    const part = { type: "text", text: "", providerMetadata: chunk.providerMetadata, state: "streaming" };
    this.activeText.set(chunk.id, part);
    this.parts.push(part);
  }

  _textDelta(chunk) {
    const part = this.activeText.get(chunk.id);
    if (part === undefined) throw new UIStreamError(`Received text-delta for missing text part with ID "${chunk.id}".`);
    part.text += String(chunk.delta ?? "");
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
  }

  _textEnd(chunk) {
    const part = this.activeText.get(chunk.id);
    if (part === undefined) throw new UIStreamError(`Received text-end for missing text part with ID "${chunk.id}".`);
    part.state = "done";
    if (chunk.citations != null) part.citations = chunk.citations;
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
    this.activeText.delete(chunk.id);
  }

  _custom(chunk) {
    this.parts.push({ type: "custom", kind: chunk.kind, providerMetadata: chunk.providerMetadata });
  }

  _reasoningStart(chunk) {
    const part = { type: "reasoning", id: chunk.id, text: "", providerMetadata: chunk.providerMetadata, state: "streaming" };
    this.activeReasoning.set(chunk.id, part);
    this.parts.push(part);
  }

  _reasoningDelta(chunk) {
    const part = this.activeReasoning.get(chunk.id);
    if (part === undefined) {
      throw new UIStreamError(`Received reasoning-delta for missing reasoning part with ID "${chunk.id}".`);
    }
    part.text += String(chunk.delta ?? "");
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
  }

  _reasoningEnd(chunk) {
    const part = this.activeReasoning.get(chunk.id);
    if (part === undefined) {
      throw new UIStreamError(`Received reasoning-end for missing reasoning part with ID "${chunk.id}".`);
    }
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
    part.state = "done";
    this.activeReasoning.delete(chunk.id);
  }

  _file(chunk) {
    const part = { type: chunk.type, mediaType: chunk.mediaType, url: chunk.url };
    if (chunk.providerMetadata != null) part.providerMetadata = chunk.providerMetadata;
    this.parts.push(part);
  }

  _sourceUrl(chunk) {
    this.parts.push({
      type: "source-url",
      sourceId: chunk.sourceId,
      url: chunk.url,
      title: chunk.title,
      providerMetadata: chunk.providerMetadata,
    });
  }

  _sourceDocument(chunk) {
    this.parts.push({
      type: "source-document",
      sourceId: chunk.sourceId,
      mediaType: chunk.mediaType,
      title: chunk.title,
      filename: chunk.filename,
      providerMetadata: chunk.providerMetadata,
    });
  }

  _toolInputStart(chunk) {
    const statics = this._stepParts().filter(isStaticTool);
    const dynamic = Boolean(chunk.dynamic);
    this.partialTools.set(chunk.toolCallId, {
      text: "",
      inputEncoding: chunk.inputEncoding,
      toolName: chunk.toolName,
      index: statics.length,
      dynamic,
      title: chunk.title,
      toolMetadata: chunk.toolMetadata,
    });
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "input-streaming",
        inputEncoding: chunk.inputEncoding,
        input: undefined,
        providerExecuted: chunk.providerExecuted,
        title: chunk.title,
        toolMetadata: chunk.toolMetadata,
        providerMetadata: chunk.providerMetadata,
      },
      null,
      dynamic,
    );
  }

  _toolInputDelta(chunk) {
    const partial = this.partialTools.get(chunk.toolCallId);
    if (partial === undefined) {
      throw new UIStreamError(`Received tool-input-delta for missing tool call with ID "${chunk.toolCallId}".`);
    }
    partial.text += String(chunk.inputTextDelta ?? "");
    const args = partial.inputEncoding === "text" ? partial.text : parsePartialJson(partial.text);
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: partial.toolName,
        state: "input-streaming",
        inputEncoding: partial.inputEncoding,
        input: args,
        rawInput: partial.text,
        title: partial.title,
        toolMetadata: partial.toolMetadata,
      },
      null,
      partial.dynamic,
    );
  }

  _toolInputAvailable(chunk) {
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "input-available",
        input: chunk.input,
        providerExecuted: chunk.providerExecuted,
        providerMetadata: chunk.providerMetadata,
        title: chunk.title,
        toolMetadata: chunk.toolMetadata,
      },
      null,
      Boolean(chunk.dynamic),
    );
  }

  _toolInputError(chunk) {
    const existing = this._stepParts().find((p) => isTool(p) && p.toolCallId === chunk.toolCallId);
    const dynamic = existing ? existing.type === "dynamic-tool" : Boolean(chunk.dynamic);
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "output-error",
        input: chunk.input,
        errorText: chunk.errorText,
        providerExecuted: chunk.providerExecuted,
        providerMetadata: chunk.providerMetadata,
        toolMetadata: chunk.toolMetadata,
      },
      null,
      dynamic,
    );
  }

  _approvalRequest(chunk) {
    const part = this._toolInvocation(chunk.toolCallId);
    part.state = "approval-requested";
    const approval = { id: chunk.approvalId };
    if (chunk.approvalDescriptor != null) approval.descriptor = chunk.approvalDescriptor;
    if (Object.hasOwn(chunk, "inputSchemaInput")) approval.inputSchemaInput = chunk.inputSchemaInput;
    if (chunk.reason != null) approval.requestReason = chunk.reason;
    if (chunk.isAutomatic === true) approval.isAutomatic = true;
    if (chunk.signature != null) approval.signature = chunk.signature;
    part.approval = approval;
  }

  _approvalResponse(chunk) {
    const approvalId = chunk.approvalId;
    const part = this.parts.find((p) => isTool(p) && isObject(p.approval) && p.approval.id === approvalId);
    if (part === undefined) throw new UIStreamError(`No tool invocation found for approval ID "${approvalId}".`);
    const approval = { ...(part.approval || { id: approvalId }) };
    approval.id = approvalId;
    approval.approved = chunk.approved;
    if (chunk.reason != null) approval.reason = chunk.reason;
    part.state = "approval-responded";
    part.approval = approval;
    if (chunk.providerExecuted != null) part.providerExecuted = chunk.providerExecuted;
    if (chunk.providerMetadata != null) part.callProviderMetadata = chunk.providerMetadata;
  }

  _outputDenied(chunk) {
    this._toolInvocation(chunk.toolCallId).state = "output-denied";
  }

  _output(chunk, state) {
    const part = this._toolInvocation(chunk.toolCallId);
    const dynamic = part.type === "dynamic-tool";
    const options = {
      toolCallId: chunk.toolCallId,
      toolName: dynamic ? part.toolName : staticName(part),
      state,
      input: part.input,
      providerExecuted: chunk.providerExecuted,
      providerMetadata: chunk.providerMetadata,
      title: part.title,
      toolMetadata: chunk.toolMetadata ?? part.toolMetadata,
    };
    if (state === "output-available") {
      options.output = chunk.output;
      options.preliminary = chunk.preliminary;
    } else {
      options.errorText = chunk.errorText;
      if (!dynamic) options.rawInput = part.rawInput;
    }
    this._updateTool(options, part, dynamic);
  }

  _steering(chunk) {
    this.parts.push({ type: "steering-message", id: chunk.id, parts: chunk.parts });
  }

  _startStep() {
    this.parts.push({ type: "step-start" });
    return false;
  }

  _resetStep() {
    const step = this._stepParts();
    this.activeText = new Map();
    this.activeReasoning = new Map();
    this.partialTools = new Map();
    if (step.length) this.parts.splice(this.parts.length - step.length);
    return step.length > 0;
  }

  _start(chunk) {
    const messageId = chunk.messageId;
    if (messageId != null && messageId !== this.msg.id) {
      this._reset(messageId);
      this.finishReason = undefined;
    }
    if (messageId != null) this.msg.id = messageId;
    return this._metadata(chunk.messageMetadata) || messageId != null;
  }

  _finish(chunk) {
    if (chunk.finishReason != null) this.finishReason = chunk.finishReason;
    return this._metadata(chunk.messageMetadata);
  }

  _messageMetadata(chunk) {
    return this._metadata(chunk.messageMetadata);
  }

  _data(chunk) {
    if (chunk.transient) return false;
    const chunkId = chunk.id;
    if (chunkId != null) {
      for (const part of this.parts) {
        if (part.type === chunk.type && part.id === chunkId) {
          part.data = chunk.data;
          return true;
        }
      }
    }
    this.parts.push(chunk);
    return true;
  }
}

const HANDLERS = {
  "text-start": (s, c) => s._textStart(c),
  "text-delta": (s, c) => s._textDelta(c),
  "text-end": (s, c) => s._textEnd(c),
  custom: (s, c) => s._custom(c),
  "reasoning-start": (s, c) => s._reasoningStart(c),
  "reasoning-delta": (s, c) => s._reasoningDelta(c),
  "reasoning-end": (s, c) => s._reasoningEnd(c),
  file: (s, c) => s._file(c),
  "reasoning-file": (s, c) => s._file(c),
  "source-url": (s, c) => s._sourceUrl(c),
  "source-document": (s, c) => s._sourceDocument(c),
  "tool-input-start": (s, c) => s._toolInputStart(c),
  "tool-input-delta": (s, c) => s._toolInputDelta(c),
  "tool-input-available": (s, c) => s._toolInputAvailable(c),
  "tool-input-error": (s, c) => s._toolInputError(c),
  "tool-approval-request": (s, c) => s._approvalRequest(c),
  "tool-approval-response": (s, c) => s._approvalResponse(c),
  "tool-output-denied": (s, c) => s._outputDenied(c),
  "tool-output-available": (s, c) => s._output(c, "output-available"),
  "tool-output-error": (s, c) => s._output(c, "output-error"),
  "steering-message": (s, c) => s._steering(c),
  "start-step": (s) => s._startStep(),
  "reset-step": (s) => s._resetStep(),
  start: (s, c) => s._start(c),
  finish: (s, c) => s._finish(c),
  "message-metadata": (s, c) => s._messageMetadata(c),
};

// --- drafts ---------------------------------------------------------------------------

/**
 * One draft as a consumer holds it (port of protocol.drafts.DraftCopy): a
 * delta whose n is n + 1 is appended, a newer text replaces, anything older
 * is ignored, a delta past n + 1 makes it wait for the next text (waiting);
 * stale after a resubscribe until a text refreshes it; finalRevision while a
 * final waits for the transcript's copy to reach its revision. A reply with
 * parts also folds the frames' chunks (update n + 1) and replay (the whole
 * reply) into message, its UIMessage; uiBehind when an update's chunks were
 * missed, until the next replay (tests/cases/ui_stream/drafts.json).
 */
export class DraftCopy {
  constructor(draftId, role) {
    this.draftId = draftId;
    this.role = role;
    this.n = 0;
    this.text = "";
    this.waiting = false;
    this.stale = false;
    this.finalRevision = null;
    /**
     * A reply with parts: its UIMessageState as of update n (folded from
     * the frames' chunks and replay); null for a draft of text alone.
     * uiBehind: an update's chunks were missed; the next replay mends it.
     */
    this.ui = null;
    this.uiBehind = false;
  }

  /** A reply with parts as the AI SDK's UIMessage (a copy), null for a draft of text alone. */
  get message() {
    return this.ui === null ? null : this.ui.message();
  }

  /** Apply an open draft's frame; true when the text (or a reply's parts) changed. */
  take(frame) {
    if (frame.text !== undefined && frame.text !== null) {
      if (frame.n >= this.n) this.stale = false; // the server still has it
      if (frame.n <= this.n) return false;
      this._takeParts(frame, frame.n === this.n + 1);
      this.text = frame.text;
      this.n = frame.n;
      this.waiting = false;
      return true;
    }
    if (frame.n <= this.n || this.waiting) return false;
    if (frame.n !== this.n + 1) {
      this.waiting = true; // missed updates: wait for the next text
      return false;
    }
    this._takeParts(frame, true);
    this.text += frame.delta;
    this.n = frame.n;
    return true;
  }

  /** Fold a frame's replay (a new reply) or chunks (update n + 1 when follows) into the reply. */
  _takeParts(frame, follows) {
    if (Array.isArray(frame.replay)) {
      this.ui = new UIMessageState(this.draftId);
      this.uiBehind = !this._fold(frame.replay);
      return;
    }
    if (!Array.isArray(frame.chunks)) return;
    if (this.ui === null) {
      this.ui = new UIMessageState(this.draftId);
      this.uiBehind = this.n > 0; // parts began in an update this copy missed
    }
    if (!follows) this.uiBehind = true;
    else if (!this.uiBehind) this.uiBehind = !this._fold(frame.chunks);
  }

  _fold(chunks) {
    try {
      this.ui.applyAll(chunks);
    } catch (err) {
      if (err instanceof UIStreamError) return false; // not what the server folded: wait for its replay
      throw err;
    }
    return true;
  }
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

/** Most messages one GET .../messages answers (protocol.limits.MAX_READ_MESSAGES). */
export const READ_MAX = 1000;

const WS_PATH = "/v1/ws";
/** The schemes a server URL may have, and the WebSocket's and HTTP's scheme of each. */
const URL_SCHEMES = {
  "http:": ["ws:", "http:"],
  "https:": ["wss:", "https:"],
  "ws:": ["ws:", "http:"],
  "wss:": ["wss:", "https:"],
};
const URL_FORMS = "http(s)://host[:port][/base] or ws(s)://host[:port][/base][/v1/ws]";

/**
 * The WebSocket URL and the HTTP base of a server given by any URL the Python client takes
 * (client_py.http.endpoints): http(s)://host[:port][/base], the form of the CLI and the
 * READMEs, gives ws(s)://host[:port][/base]/v1/ws; ws(s)://host[:port][/base], with or without
 * /v1/ws, gives http(s)://host[:port][/base]. A ws(s) URL keeps its query, a fragment is
 * dropped. Anything else (another scheme, no scheme, a relative URL, a user or password in
 * the URL) throws a TypeError at once: given to a WebSocket it would only fail to connect,
 * again and again. `what` names the argument in the error.
 */
function serverUrls(url, what = "url") {
  const text = url instanceof URL ? url.href : url;
  if (typeof text !== "string") throw new TypeError(`${what}: expected the server's URL, ${URL_FORMS}, not ${url === null ? "null" : typeof url}`);
  let parsed = null;
  try {
    parsed = new URL(text.trim());
  } catch {
    // not an absolute URL: refused below
  }
  if (parsed === null || !Object.hasOwn(URL_SCHEMES, parsed.protocol) || !parsed.host) {
    throw new TypeError(`${what}: expected the server's URL, ${URL_FORMS}, not ${JSON.stringify(text)}`);
  }
  if (parsed.username || parsed.password) {
    // Not echoed: the URL holds a secret. fetch() refuses such URLs, and a token goes in getToken.
    throw new TypeError(`${what}: no user or password in the server's URL (${URL_FORMS}); give the client a token or getToken`);
  }
  const [wsScheme, httpScheme] = URL_SCHEMES[parsed.protocol];
  let path = parsed.pathname.replace(/\/+$/, "");
  const base = path.endsWith(WS_PATH) ? path.slice(0, -WS_PATH.length) : path;
  path = `${base}${WS_PATH}`;
  const query = parsed.protocol.startsWith("ws") ? parsed.search : "";
  return { ws: `${wsScheme}//${parsed.host}${path}${query}`, http: `${httpScheme}//${parsed.host}${base}` };
}

/** The HTTP base of a server given any URL TsyncClient takes (ws(s)://host/.../v1/ws, http(s)://host/...). */
export function httpBase(url) {
  return serverUrls(url).http;
}

/** Raised (as a rejected append) when the server answered with an error frame. */
export class ServerError extends Error {
  constructor(frame) {
    super(`${frame.code}: ${frame.message}`);
    this.name = "ServerError";
    this.code = frame.code;
    this.frame = frame;
  }
}

// --- the HTTP fallback: the Durable Streams face and the HTTP API ------------------------

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
class UIStreamWriter {
  constructor(client, transcriptId, draftId, signal) {
    this.client = client;
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
    return !(this.client._ws instanceof StreamFaceSocket);
  }

  /** Send a batch; while the client is not connected, wait for it (or for the end). */
  async _send(chunks) {
    const op = { op: "draft", transcriptId: this.transcriptId, draftId: this.draftId, chunks };
    if (this.client._open && !this._live) return;
    while (this._end === null && !this.client._send(op)) {
      if (this.client._closed) {
        this._finish({ error: new Error(`client ${this.client.state}: the reply could not be written`) });
        break;
      }
      await Promise.race([this.client._whenOpen(), this.ended]);
    }
  }

  _cancel() {
    if (!this._live) return;
    this.client._send({ op: "draft", transcriptId: this.transcriptId, draftId: this.draftId, cancel: true });
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


/**
 * One logical connection to a transcript-sync server, kept open across
 * reconnects: a driver of the Consumer core, which decides everything about
 * frames (seq, continuity, the copies, resubscribes, barriers); the client
 * moves text in and ops out, keeps appends until acknowledged, and reports.
 *
 * Events (client.on(type, listener) returns a function that removes it):
 * - "status"   {state, transport, attempt, delayMs, reason}; state is one of
 *              "connecting" (first connect), "live" (subscribed and caught up),
 *              "reconnecting" (connection lost, waiting delayMs), "resyncing"
 *              (frames lost on a live connection), "resynced" (caught up again
 *              after a reconnect or a resync), "closed", "unauthorized" (the
 *              credentials were refused or expired and getToken gave no new
 *              ones: stopped), "refused" (closed with a code that says not to
 *              reconnect, e.g. 1008 for a page origin the server does not allow:
 *              stopped; reason says why). transport is "websocket", or "sse" on
 *              the HTTP fallback (see the constructor's transport option), of the
 *              connection this status is about (the one being dialled while
 *              "connecting" or "reconnecting").
 * - "baseline" {transcriptId, mirror, snapshot, epochChanged}: render the mirror anew.
 * - "messages" {transcriptId, start, messages, revision, mirror}: appended at start.
 * - "segment"  {transcriptId, previousStart, start, end, revision, mirror}.
 * - "view"     {transcriptId, name, start, end, left, revision, mirror}: a View was set or left.
 * - "earlier"  {transcriptId, start, messages, mirror}: loadEarlier() widened the copy at start.
 * - "stop"     {transcriptId, code, message}: the subscription is over.
 * - "draft"    {transcriptId, draftId, role, state, n, delta, text, message, revision, mirror}: a
 *              message being written changed. state "open": its text grew by delta
 *              (null when it was replaced); text is its whole text now; message, for a
 *              reply with parts, the AI SDK's UIMessage it is now (else null). Otherwise it
 *              closed: "final" (committed as the messages of revision; sent right after
 *              the "messages" event that added them, in the same task, so a page that
 *              swaps the two never shows both or neither), "cancelled", "expired" or
 *              "gone" (it closed while the client was away); text is its last text.
 *              client.drafts(transcriptId) holds the open ones (draftId -> {role, n, text}).
 * - "presence" {transcriptId, members, counts, joined, updated, left, presence}: who is on
 *              a transcript subscribed with {presence: true} changed. members: every
 *              member ({id, who, kind, state}) ordered by who, or null above the
 *              server's presence_max_members (counts {viewers, writers, agents} only);
 *              joined/updated/left: what this frame changed (left holds ids).
 * - "ack"      the ack frame of an append (also the resolved value of append()).
 * - "error"    an error frame that no append or subscription took (code
 *              "invalid-frame" for a frame that did not validate, "mirror" for
 *              an event that did not fit the copy).
 * - "update"   {transcriptId, update}: every update of the core (for logs and tests).
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
    const writer = new UIStreamWriter(this, transcriptId, id, signal);
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
        this._emit("presence", {
          transcriptId: update.transcriptId,
          members: update.presence.members === null ? null : update.presence.listed(),
          counts: update.presence.counts,
          joined: update.frame.joined ?? [],
          updated: update.frame.updated ?? [],
          left: update.frame.left ?? [],
          presence: update.presence,
        });
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
    const open = update.kind === "draft";
    const { transcriptId, draftId } = update;
    this._emit("draft", {
      transcriptId,
      draftId,
      role: update.role,
      state: open ? "open" : update.state,
      n: open ? update.n : null,
      delta: open ? update.delta : null,
      // Later frames of the same message may be in the copy already: its text is the newest.
      text: open ? (this.drafts(transcriptId).get(draftId)?.text ?? update.text ?? "") : update.text,
      // A reply with parts: its UIMessage (the AI SDK's), else null.
      message: open ? (this.drafts(transcriptId).get(draftId)?.message ?? null) : (update.message ?? null),
      revision: open ? null : update.revision,
      mirror: this.mirror(transcriptId),
    });
  }

  _applied(transcriptId, event) {
    const mirror = this.mirror(transcriptId);
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
    } else if (change.kind === "segment-started") {
      this._emit("segment", {
        transcriptId,
        previousStart: change.previousStart,
        start: change.start,
        end: change.end,
        revision: event.revision,
        event,
        mirror,
      });
    } else {
      this._emit("view", {
        transcriptId,
        name: change.name,
        start: change.start,
        end: change.end ?? null,
        left: change.kind === "view-left",
        revision: event.revision,
        event,
        mirror,
      });
    }
  }
}

// --- a store for UI frameworks -----------------------------------------------------------

const NOTHING = Object.freeze([]);

/**
 * A framework-agnostic store of one transcript: what a UI renders, as an
 * immutable snapshot. subscribe(listener) returns a function that removes the
 * listener; getSnapshot() returns the same frozen object until something
 * changed, then a new one, so React's
 * useSyncExternalStore(store.subscribe, store.getSnapshot) re-renders exactly
 * when it must. The snapshot:
 *   {transcriptId, status, revision, epoch, start, length, messages, drafts, stopped}
 * status is the client's state ("idle", "connecting", "live", "reconnecting",
 * ...); revision and epoch are null before the first baseline; messages are
 * the copy's [start, length) (the same array until messages change); drafts
 * the open drafts [{draftId, role, n, text, message}] in the order they opened (message:
 * a reply with parts as the AI SDK's UIMessage, else null);
 * stopped {code, message} once the subscription is over (not found,
 * forbidden, ...), else null. A committed draft leaves drafts in the same
 * snapshot that adds its message: no snapshot shows both or neither.
 *
 * The store follows the transcript (client.subscribe(transcriptId, {window}))
 * while it has listeners, from the first one on, and stops following it when
 * the last one leaves (a component that unmounts); creating it costs nothing.
 */
export function createTranscriptStore(client, transcriptId, { window = null } = {}) {
  const listeners = new Set();
  let removers = [];
  let snapshot = null;
  let messages = NOTHING;
  let messagesDirty = true;
  let stopped = null;
  let notifyQueued = false;
  const notify = () => {
    notifyQueued = false;
    for (const listener of [...listeners]) listener();
  };
  const changed = (messagesToo) => {
    if (messagesToo) messagesDirty = true;
    snapshot = null;
    // The changes of one task (an increment and the close of the draft it
    // commits) reach listeners once, after both.
    if (!notifyQueued) {
      notifyQueued = true;
      queueMicrotask(notify);
    }
  };
  const mine = (handler) => (detail) => {
    if (detail.transcriptId === transcriptId) handler(detail);
  };
  const follow = () => {
    removers = [
      client.on("status", () => changed(false)),
      client.on("draft", mine(() => changed(false))),
      client.on(
        "stop",
        mine(({ code, message }) => {
          stopped = Object.freeze({ code, message });
          changed(false);
        }),
      ),
      ...["baseline", "messages", "segment", "view", "earlier"].map((type) =>
        client.on(type, mine(() => changed(true))),
      ),
    ];
    stopped = null;
    client.subscribe(transcriptId, { window });
    changed(true);
  };
  const leave = () => {
    for (const remove of removers) remove();
    removers = [];
    client.unsubscribe(transcriptId);
  };
  const getSnapshot = () => {
    if (snapshot !== null) return snapshot;
    const copy = client.mirror(transcriptId);
    if (messagesDirty) {
      messages = copy?.messages ? Object.freeze([...copy.messages]) : NOTHING;
      messagesDirty = false;
    }
    const open = [...client.drafts(transcriptId).values()];
    snapshot = Object.freeze({
      transcriptId,
      status: client.state,
      revision: copy?.revision ?? null,
      epoch: copy?.epoch ?? null,
      start: copy?.start ?? 0,
      length: copy?.length ?? 0,
      messages,
      drafts: open.length
        ? Object.freeze(open.map((d) => Object.freeze({ draftId: d.draftId, role: d.role, n: d.n, text: d.text, message: d.message })))
        : NOTHING,
      stopped,
    });
    return snapshot;
  };
  return {
    subscribe(listener) {
      if (listeners.size === 0) follow();
      listeners.add(listener);
      return () => {
        if (listeners.delete(listener) && listeners.size === 0) leave();
      };
    },
    getSnapshot,
  };
}
