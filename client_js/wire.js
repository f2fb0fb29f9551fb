// The wire (docs/protocol.md section 2): the subprotocol, what each close code
// advises, the codes that stop a subscription, and what a frame must be to be
// read at all (the port of protocol/wire.py's accept_transcript_update and of
// protocol/validation.py), with the copy of a transcript's presence
// (protocol/presence.py) and the bytes of an attachment part (docs/lmml.md).
// Pure: no socket, no clock.

import { isDigest } from "./digest.js";

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
export const LAGGED = "lagged";


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

export const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
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

export function checkMessages(list, path) {
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
