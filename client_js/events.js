// What TsyncClient tells its listeners: the detail of each event it emits,
// built from the consumer core's updates (consumer.js). Pure: the client
// looks up the copy and the drafts and emits what these return.
//
// Events (client.on(type, listener) returns a function that removes it):
// - "status"   {state, transport, attempt, delayMs, reason}; state is one of
//              "connecting" (first connect), "live" (subscribed and caught up),
//              "reconnecting" (connection lost, waiting delayMs), "resyncing"
//              (frames lost on a live connection), "resynced" (caught up again
//              after a reconnect or a resync), "closed", "unauthorized" (the
//              credentials were refused or expired and getToken gave no new
//              ones: stopped), "refused" (closed with a code that says not to
//              reconnect, e.g. 1008 for a page origin the server does not allow:
//              stopped; reason says why). transport is "websocket", or "sse" on
//              the HTTP fallback (see the constructor's transport option), of the
//              connection this status is about (the one being dialled while
//              "connecting" or "reconnecting").
// - "baseline" {transcriptId, mirror, snapshot, epochChanged}: render the mirror anew.
// - "messages" {transcriptId, start, messages, revision, mirror}: appended at start.
// - "segment"  {transcriptId, previousStart, start, end, revision, mirror}.
// - "view"     {transcriptId, name, start, end, left, revision, mirror}: a View was set or left.
// - "earlier"  {transcriptId, start, messages, mirror}: loadEarlier() widened the copy at start.
// - "stop"     {transcriptId, code, message}: the subscription is over.
// - "draft"    {transcriptId, draftId, role, state, n, delta, text, message, revision, mirror}: a
//              message being written changed. state "open": its text grew by delta
//              (null when it was replaced); text is its whole text now; message, for a
//              reply with parts, the AI SDK's UIMessage it is now (else null). Otherwise it
//              closed: "final" (committed as the messages of revision; sent right after
//              the "messages" event that added them, in the same task, so a page that
//              swaps the two never shows both or neither), "cancelled", "expired" or
//              "gone" (it closed while the client was away); text is its last text.
//              client.drafts(transcriptId) holds the open ones (draftId -> {role, n, text}).
// - "presence" {transcriptId, members, counts, joined, updated, left, presence}: who is on
//              a transcript subscribed with {presence: true} changed. members: every
//              member ({id, who, kind, state}) ordered by who, or null above the
//              server's presence_max_members (counts {viewers, writers, agents} only);
//              joined/updated/left: what this frame changed (left holds ids).
// - "ack"      the ack frame of an append (also the resolved value of append()).
// - "error"    an error frame that no append or subscription took (code
//              "invalid-frame" for a frame that did not validate, "mirror" for
//              an event that did not fit the copy).
// - "update"   {transcriptId, update}: every update of the core (for logs and tests).
//
// mirror is the core's TranscriptCopy (copy.js).

/** The "messages", "segment" or "view" event of an applied event: [type, detail]. */
export function appliedEvent(transcriptId, event, mirror) {
  const change = event.change;
  const after = { revision: event.revision, event, mirror };
  if (change.kind === "messages-appended") {
    return ["messages", { transcriptId, start: change.start, messages: change.messages, ...after }];
  }
  if (change.kind === "segment-started") {
    const { previousStart, start, end } = change;
    return ["segment", { transcriptId, previousStart, start, end, ...after }];
  }
  const left = change.kind === "view-left";
  return ["view", { transcriptId, name: change.name, start: change.start, end: change.end ?? null, left, ...after }];
}

/**
 * The "draft" event of a core update ("draft": it changed, or "draft-closed"):
 * drafts are the subscription's open drafts (draftId -> DraftCopy).
 */
export function draftEvent(update, drafts, mirror) {
  const open = update.kind === "draft";
  const { transcriptId, draftId } = update;
  return {
    transcriptId,
    draftId,
    role: update.role,
    state: open ? "open" : update.state,
    n: open ? update.n : null,
    delta: open ? update.delta : null,
    // Later frames of the same message may be in the copy already: its text is the newest.
    text: open ? (drafts.get(draftId)?.text ?? update.text ?? "") : update.text,
    // A reply with parts: its UIMessage (the AI SDK's), else null.
    message: open ? (drafts.get(draftId)?.message ?? null) : (update.message ?? null),
    revision: open ? null : update.revision,
    mirror,
  };
}

/** The "presence" event of a core update of kind "presence". */
export function presenceEvent(update) {
  return {
    transcriptId: update.transcriptId,
    members: update.presence.members === null ? null : update.presence.listed(),
    counts: update.presence.counts,
    joined: update.frame.joined ?? [],
    updated: update.frame.updated ?? [],
    left: update.frame.left ?? [],
    presence: update.presence,
  };
}
