// Drafts: a message being written, as a consumer holds it (the port of
// protocol/drafts.py), with the fold of a reply with parts.

import { UIMessageState, UIStreamError } from "./ui_stream.js";

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
