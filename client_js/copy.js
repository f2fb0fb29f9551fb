// One transcript's copy (the port of protocol/state.py): the messages, segments
// and views a consumer holds, each event checked as the server checks it, the
// digest included.

import { nextDigest } from "./digest.js";
import { checkBaseline } from "./wire.js";

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
