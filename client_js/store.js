// A store for UI frameworks: one transcript as an immutable snapshot that
// React's useSyncExternalStore (or any framework) renders.

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
