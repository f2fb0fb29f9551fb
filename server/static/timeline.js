// The conversation as a scrolling list that follows the newest message.
//
// - Only the newest messages are rendered at first; older ones are rendered a chunk at a time
//   as the reader scrolls up (or presses "Show earlier messages"), with the scroll position
//   kept, so a 5,000-message transcript opens as fast as a 50-message one. The page holds
//   only the newest messages too (a windowed subscription): when the reader goes past the
//   oldest one held, older ones are fetched from the server (`loadEarlier`) and rendered
//   the same way.
// - While the reader is at the bottom, new messages and growing content keep it there. When
//   they have scrolled up, nothing moves: a "new messages" button counts what arrived below.
// - Drafts (messages still being written) sit after the committed messages and are swapped
//   for the committed message in one DOM operation, so the swap neither flickers nor jumps.
// - New messages are announced politely through a live region (not the whole list).

import { el, readableText, renderMessage, resultLink, toolCallsOf } from "./messages.js";

export const CHUNK = 25; // messages rendered per step: a few milliseconds of work
export const FETCH = 200; // older messages fetched from the server per request
const NEAR_BOTTOM_PX = 64; // closer than this counts as "at the bottom"
const PRELOAD_PX = 1200; // render older messages when the reader is this close to them

export class Timeline {
  /**
   * @param {object} parts the elements: scroller (the scrolling element), list (<ol>),
   *   drafts (<ul>), loader (the "show earlier" row), jump (the new-messages button),
   *   announcer (a polite live region), composer (where the focus goes after the button);
   *   loadEarlier: async (count) => the older messages are fetched and handed to prepend()
   *   (null: the page holds the whole transcript)
   */
  constructor({ scroller, list, drafts, loader, jump, announcer, composer = null, loadEarlier = null }) {
    Object.assign(this, { scroller, list, drafts, loader, jump, announcer, composer, loadEarlier });
    this.fetching = null; // the loadEarlier() under way
    this.epoch = null;
    this.start = 0; // transcript index of messages[0]
    this.messages = [];
    this.segmentStarts = new Set();
    this.lo = 0; // the first rendered index; everything from lo to the end is rendered
    this.following = true;
    this._lastTop = 0;
    this.unseen = 0;
    this.blobUrls = new Set();
    this.calls = new Map(); // tool call id -> {index, name}
    this.results = new Map(); // tool call id -> index of its result
    this.draftItems = new Map(); // key -> {item, commitsAs}
    this.tools = {
      callOf: (id) => this.calls.get(id),
      resultOf: (id) => this.results.get(id),
    };

    scroller.addEventListener("scroll", () => this._onScroll(), { passive: true });
    // Growing content (an image that loaded, a draft's next words) keeps a follower at the
    // bottom, and so does a shrinking view (the dock below grew: the presence line appeared).
    this._resize = new ResizeObserver(() => {
      if (this.following) this.scrollToBottom();
    });
    this._resize.observe(list);
    this._resize.observe(drafts);
    this._resize.observe(scroller);
    this._older = new IntersectionObserver(
      (entries) => {
        if (entries.some((e) => e.isIntersecting)) this.renderOlder();
      },
      { root: scroller, rootMargin: `${PRELOAD_PX}px 0px 0px 0px` },
    );
    this._older.observe(loader);
    loader.querySelector("button")?.addEventListener("click", () => this.renderOlder());
    jump.addEventListener("click", () => this.follow());
  }

  /** The transcript index after the last message. */
  get length() {
    return this.start + this.messages.length;
  }

  // -- the model ---------------------------------------------------------------------------

  /**
   * Show a baseline. A baseline of the same history that only adds to what is shown (a
   * resync after a lost connection) extends it, so the reader keeps their place; any other
   * shows the transcript anew: the newest chunk, scrolled to the bottom.
   */
  load({ epoch, start, messages, segments }) {
    const extends_ = epoch === this.epoch && start === this.start && messages.length >= this.messages.length;
    this.epoch = epoch;
    if (!extends_ || this.messages.length === 0) {
      this.reset({ start, messages, segments });
      return;
    }
    const known = this.length;
    const fresh = segments.map((s) => s.start).filter((s) => s > 0 && !this.segmentStarts.has(s));
    for (const s of fresh.filter((s) => s <= known)) this.segment(s);
    if (messages.length > this.messages.length) this.append(known, messages.slice(this.messages.length));
    for (const s of fresh.filter((s) => s > known)) this.segment(s);
  }

  /** Show a transcript anew: the newest chunk, scrolled to the bottom. */
  reset({ start, messages, segments }) {
    for (const url of this.blobUrls) URL.revokeObjectURL(url);
    this.blobUrls.clear();
    this.start = start;
    this.messages = [...messages];
    this.segmentStarts = new Set(segments.map((s) => s.start).filter((s) => s > 0));
    this.calls.clear();
    this.results.clear();
    this.messages.forEach((m, i) => this._indexTools(m, start + i));
    this.lo = Math.max(start, this.length - CHUNK);
    const items = [];
    for (let i = this.lo; i < this.length; i += 1) items.push(...this._itemsFor(i));
    if (this.segmentStarts.has(this.length)) items.push(this._separator(this.length));
    this.list.replaceChildren(...items);
    this._updateLoader();
    this.unseen = 0;
    this._setFollowing(true);
    this.scrollToBottom();
  }

  /** Messages appended at `start` (must continue what is shown). */
  append(start, messages) {
    if (start !== this.length) return false;
    const wasFollowing = this.following;
    const items = [];
    messages.forEach((message, i) => {
      const index = start + i;
      this.messages.push(message);
      const answered = this._indexTools(message, index);
      if (answered !== null) this._showResult(answered, index);
      // A separator for `start` already ends the list (segments start at the length).
      items.push(...this._itemsFor(index, index !== start));
    });
    this.list.append(...items);
    this._swapCommittedDrafts();
    if (wasFollowing) {
      this.scrollToBottom();
    } else {
      this.unseen += messages.length;
      this._updateJump();
    }
    this._announce(messages, items);
    return true;
  }

  /** A segment started at `start`: a separator before that message. */
  segment(start) {
    this.segmentStarts.add(start);
    if (start < this.lo) return; // rendered with its chunk later
    const before = this.list.querySelector(`li.message[data-index="${start}"]`);
    const separator = this._separator(start);
    if (before) before.before(separator);
    else if (start === this.length) this.list.append(separator);
  }

  /**
   * Older messages fetched from the server: they end where the held ones begin. Rendered
   * when the reader scrolls up to them, like any older message.
   */
  prepend(start, messages) {
    if (start + messages.length !== this.start) return false;
    this.messages.unshift(...messages);
    this.start = start;
    // Calls now known may be answered by messages already held: index them in order again.
    this.calls.clear();
    this.results.clear();
    this.messages.forEach((m, i) => this._indexTools(m, start + i));
    this._updateLoader();
    return true;
  }

  /** Record the calls a message makes or answers; returns the id of the call it answers. */
  _indexTools(message, index) {
    for (const call of toolCallsOf(message)) if (call.id) this.calls.set(call.id, { index, name: call.name });
    const id = message?.role === "tool" ? message.tool_call_id : undefined;
    if (typeof id !== "string" || !this.calls.has(id) || this.results.has(id)) return null;
    this.results.set(id, index);
    return id;
  }

  /** A call on screen still says "waiting for the result": point it to its result now. */
  _showResult(id, index) {
    const call = [...this.list.querySelectorAll("li.tool-call")].find((li) => li.dataset.callId === id);
    call?.querySelector(".tool-status")?.replaceChildren(resultLink(index));
  }

  _itemsFor(index, withSeparator = true) {
    const item = renderMessage(this.messages[index - this.start], index, { tools: this.tools, blobUrls: this.blobUrls });
    return withSeparator && this.segmentStarts.has(index) ? [this._separator(index), item] : [item];
  }

  _separator(start) {
    const label = `New segment from message ${start + 1}: earlier messages are not sent to the model`;
    return el("li", { class: "segment", role: "separator", "aria-label": label, "data-start": String(start) },
      el("span", { text: "New segment" }));
  }

  // -- rendering older messages ------------------------------------------------------------

  /**
   * Render the chunk before the first rendered message, keeping what is on screen in place;
   * when every message held is rendered, fetch older ones first.
   */
  renderOlder() {
    if (this.lo <= this.start) {
      if (this.start > 0 && this.loadEarlier) this._fetchEarlier();
      return;
    }
    const anchor = this._firstVisible();
    const before = anchor?.getBoundingClientRect().top;
    const from = Math.max(this.start, this.lo - CHUNK);
    const items = [];
    for (let i = from; i < this.lo; i += 1) items.push(...this._itemsFor(i));
    this.list.prepend(...items);
    this.lo = from;
    if (anchor) this.scroller.scrollTop += anchor.getBoundingClientRect().top - before;
    this._updateLoader();
    this._continueIfVisible();
  }

  /**
   * The observer reports changes only: a loader still in view after a chunk was rendered
   * (or fetched) would never be reported again, and a reader at the top would wait for
   * ever. So look once more, on the next frame, when the layout has settled.
   */
  _continueIfVisible() {
    requestAnimationFrame(() => {
      if (this.fetching || this.lo <= 0 || this.loader.hidden) return;
      const box = this.loader.getBoundingClientRect();
      const view = this.scroller.getBoundingClientRect();
      if (box.bottom >= view.top - PRELOAD_PX && box.top <= view.bottom) this.renderOlder();
    });
  }

  _fetchEarlier() {
    if (this.fetching) return;
    this.loader.setAttribute("aria-busy", "true");
    this.fetching = Promise.resolve()
      .then(() => this.loadEarlier(FETCH))
      .then(
        () => this.renderOlder(), // prepend() has added them: show the next chunk
        (err) => {
          const note = this.loader.querySelector(".note");
          if (note) {
            note.hidden = false;
            note.textContent = `Could not load earlier messages: ${err?.message ?? err}`;
          }
        },
      )
      .finally(() => {
        this.fetching = null;
        this.loader.removeAttribute("aria-busy");
      });
  }

  /** Render everything down from `index` (at least), so that message can be shown. */
  ensureRendered(index) {
    while (this.lo > Math.max(index, this.start)) this.renderOlder();
  }

  _firstVisible() {
    const top = this.scroller.getBoundingClientRect().top;
    for (const item of this.list.children) {
      if (item.getBoundingClientRect().bottom > top) return item;
    }
    return null;
  }

  _updateLoader() {
    // Everything before the first rendered message: held but not rendered, and not held yet.
    const hidden = this.loadEarlier ? this.lo : this.lo - this.start;
    this.loader.hidden = hidden === 0;
    const button = this.loader.querySelector("button");
    if (button) button.textContent = `Show earlier messages (${hidden} more)`;
    const note = this.loader.querySelector(".note");
    if (note) note.hidden = this.start === 0 || this.loadEarlier !== null;
  }

  /** Scroll to a message, render it first if needed, and move the focus there. */
  reveal(index) {
    this.ensureRendered(index);
    const item = this.list.querySelector(`li.message[data-index="${index}"]`);
    if (!item) return;
    this._setFollowing(false);
    item.scrollIntoView({ block: "center" });
    item.focus({ preventScroll: true });
  }

  // -- following the newest ----------------------------------------------------------------

  /** At once, never smoothly: a smooth scroll is still "not at the bottom" while it runs. */
  scrollToBottom() {
    this.scroller.scrollTo({ top: this.scroller.scrollHeight, behavior: "instant" });
  }

  /** Start following again (after the reader sent a message, say). */
  follow() {
    this._setFollowing(true);
    this.scrollToBottom();
  }

  _distanceFromBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight;
  }

  _onScroll() {
    const top = this.scroller.scrollTop;
    const movedUp = top < this._lastTop;
    this._lastTop = top;
    if (this._distanceFromBottom() <= NEAR_BOTTOM_PX) {
      this._setFollowing(true);
    } else if (movedUp) {
      this._setFollowing(false); // the reader scrolled up: leave them there
    } else if (this.following) {
      // Layout moved us (content grew above, sizes of off-screen messages became known):
      // a follower stays at the bottom.
      this.scrollToBottom();
    }
  }

  _setFollowing(following) {
    this.following = following;
    if (following) this.unseen = 0;
    this._updateJump();
  }

  _updateJump() {
    const show = !this.following;
    if (!show && document.activeElement === this.jump) {
      // Hiding a focused button would drop the focus to <body>: move it on.
      (this.composer && !this.composer.matches(":disabled") ? this.composer : this.scroller).focus({ preventScroll: true });
    }
    this.jump.hidden = !show;
    this.jump.textContent =
      this.unseen > 0 ? `↓ ${this.unseen} new message${this.unseen === 1 ? "" : "s"}` : "↓ Jump to the newest";
    this.jump.classList.toggle("has-new", this.unseen > 0);
  }

  _announce(messages, items) {
    if (messages.length === 1) {
      const m = messages[0];
      const who = typeof m.role === "string" ? m.role : "someone";
      const body = items.at(-1)?.querySelector(".body, details");
      const words = (body && readableText(body, 140)) || "no text";
      this.announcer.textContent = `New message from ${who}: ${words}`;
    } else if (messages.length > 1) {
      this.announcer.textContent = `${messages.length} new messages`;
    }
  }

  // -- drafts ------------------------------------------------------------------------------

  /**
   * Show or update a message still being written (key: any string naming the draft). The
   * first call adds it after the committed messages; later calls re-render it in place.
   */
  showDraft(key, message) {
    const wasFollowing = this.following;
    const item = renderMessage(message, null, { draft: true, tools: this.tools, blobUrls: this.blobUrls });
    item.dataset.draft = key;
    const known = this.draftItems.get(key);
    if (known) known.item.replaceWith(item);
    else this.drafts.append(item);
    this.draftItems.set(key, { item, commitsAs: known?.commitsAs ?? null });
    if (wasFollowing) this.scrollToBottom();
    return item;
  }

  /**
   * The draft became the message at `index`: swap it for that message as soon as it is
   * shown (now if it already is), in one DOM step: no frame shows both or neither.
   */
  commitDraft(key, index) {
    const draft = this.draftItems.get(key);
    if (!draft) return;
    draft.commitsAs = index;
    this._swapCommittedDrafts();
  }

  /** Remove a draft that will not become a message (abandoned, failed). */
  dropDraft(key) {
    this.draftItems.get(key)?.item.remove();
    this.draftItems.delete(key);
  }

  _swapCommittedDrafts() {
    // The committed message was appended at the end of the list, right where the draft
    // begins, in this same task: removing the draft now leaves no frame with both or neither.
    for (const [key, draft] of this.draftItems) {
      if (draft.commitsAs === null || draft.commitsAs >= this.length) continue;
      draft.item.remove();
      this.draftItems.delete(key);
    }
  }
}
