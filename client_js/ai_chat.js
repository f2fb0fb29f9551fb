// @transcript-sync/client/ai-chat: an AI SDK Chat (and so useChat) kept
// equal to a transcript, in every tab and on every device.
//
//   import { Chat } from "@ai-sdk/react";
//   import { WebSocketChatTransport } from "ai";
//   import { syncChat } from "@transcript-sync/client/ai-chat";
//
//   const chat = new Chat({ id: "chat-1", transport: new WebSocketChatTransport({ url }) });
//   const sync = syncChat(chat, { url: "https://tsync.example", transcriptId: "chat-1" });
//   ...
//   sync.stopReply(); // Stop for every tab: the agent is told, the partial reply kept
//   sync();           // stop syncing (also sync.stop())
//
// The AI SDK's transports stream a tab's own turn; what they leave out is
// everyone else's: another tab's user message, and the reply it is getting.
// syncChat follows the transcript on /v1/ws (a TsyncClient) and sets
// chat.messages to the transcript's UIMessages (GET .../ui-messages, read
// again at every revision) followed by the replies being written (drafts,
// folded into UIMessages with parts as they grow). The ids are the ones the
// SDK already uses (a user message keeps its UI id, a reply the messageId of
// its start chunk), so when it is the tab's own turn the Chat's streamed
// message and the transcript's are one message, never two.
//
// While the Chat is busy with a request of its own ("submitted" or
// "streaming"), the message it streams is left as it streams it, and the
// messages it sent that the transcript does not hold yet stay at the end;
// once it is "ready" again (or errs), the transcript's messages win: a
// stopped reply then shows what was committed, in every tab alike.
import { TsyncClient } from "./client.js";

const BUSY = new Set(["submitted", "streaming"]);
const RETRY_MS = 1000;

/** The text parts of a reply written as text alone, as the SDK shows them. */
function textMessage(id, text) {
  return { id, role: "assistant", parts: text ? [{ type: "text", text, state: "streaming" }] : [] };
}

function draftMessage(draft) {
  return draft.message ? draft.message : textMessage(draft.draftId, draft.text ?? "");
}

/**
 * Keep an AI SDK Chat's messages equal to a transcript's (see the module's
 * comment). Returns a function that stops it, with stop(), stopReply() and
 * the client it reads through.
 */
export function syncChat(chat, options = {}) {
  const { transcriptId } = options;
  if (typeof transcriptId !== "string" || !transcriptId) {
    throw new TypeError("syncChat: options.transcriptId (the chat's id) is required");
  }
  const own = !options.client;
  const client =
    options.client ??
    new TsyncClient(options.url, {
      token: options.token,
      getToken: options.getToken,
      WebSocket: options.WebSocket,
      fetch: options.fetch,
    });
  const fetchFn = options.fetch ?? ((...args) => globalThis.fetch(...args));

  let stopped = false;
  /** The transcript's UIMessages as of revision committedAt. */
  let committed = [];
  let committedAt = -1;
  let reading = false;
  /** Replies committed at a revision the UIMessages read has not reached: draftId -> {message, revision}. */
  const lingering = new Map();
  const retries = new Map();
  /** The message id each reply had while it was written -> the revision that committed it. */
  const committedReplies = new Map();
  /** Whether message is a reply that the UIMessages read holds committed (maybe under another id). */
  const superseded = (message) => (committedReplies.get(message.id) ?? Infinity) <= committedAt;
  const removers = [];

  const transcriptMessages = () => {
    const seen = new Set();
    const out = [];
    const add = (message) => {
      if (seen.has(message.id)) return;
      seen.add(message.id);
      out.push(message);
    };
    for (const message of committed) add(message);
    for (const [draftId, held] of lingering) {
      if (held.revision <= committedAt) lingering.delete(draftId);
      else add(held.message);
    }
    for (const draft of client.drafts(transcriptId).values()) {
      if (draft.role === "assistant") add(draftMessage(draft));
    }
    return out;
  };

  /** chat.messages := the transcript's, keeping what a busy Chat streams. */
  const apply = () => {
    if (stopped || committedAt < 0) return;
    const next = transcriptMessages();
    const local = chat.messages;
    if (BUSY.has(chat.status) && local.length > 0) {
      const ids = new Set(next.map((m) => m.id));
      const last = local[local.length - 1];
      const streaming = chat.status === "streaming" && !superseded(last) ? last : null;
      for (let i = 0; i < next.length; i += 1) {
        if (streaming && next[i].id === streaming.id) next[i] = streaming;
      }
      // What the Chat sent and streams that the transcript does not hold yet. A reply
      // written as text alone is committed under another id (msg-<index>): not twice.
      let from = local.length;
      while (from > 0 && !ids.has(local[from - 1].id)) from -= 1;
      next.push(...local.slice(from).filter((message) => !superseded(message)));
    }
    if (JSON.stringify(next) !== JSON.stringify(local)) chat.messages = next;
  };

  /** Read the UIMessages until they are as new as the copy on /v1/ws. */
  const read = async () => {
    if (reading) return;
    reading = true;
    try {
      for (;;) {
        const want = client.mirror(transcriptId)?.revision ?? null;
        if (stopped || want === null || want <= committedAt) return;
        const headers = client.token ? { authorization: `Bearer ${client.token}` } : {};
        const url = `${client.httpUrl}/v1/transcripts/${encodeURIComponent(transcriptId)}/ui-messages`;
        const response = await fetchFn(url, { headers });
        if (!response.ok) throw new Error(`GET ui-messages: ${response.status}`);
        const body = await response.json();
        const revision = Number(response.headers.get("x-transcript-revision") ?? want);
        if (stopped) return;
        if (revision > committedAt) {
          committed = body.messages;
          committedAt = revision;
          apply();
        }
      }
    } catch (error) {
      if (!stopped) later(read);
      if (options.onError) options.onError(error);
    } finally {
      reading = false;
    }
  };

  /** Do what (a read, a follow) again in a second, once. */
  const later = (what) => {
    if (!retries.has(what) && !stopped) {
      retries.set(
        what,
        setTimeout(() => {
          retries.delete(what);
          what();
        }, RETRY_MS),
      );
    }
  };

  const follow = () => {
    if (!stopped) client.subscribe(transcriptId);
  };
  const mine = (handler) => (detail) => {
    if (detail.transcriptId === transcriptId) handler(detail);
  };
  removers.push(
    client.on(
      "baseline",
      mine(({ epochChanged }) => {
        // The transcript was made again under its id: what was read belongs to another history.
        if (epochChanged) {
          committed = [];
          committedAt = -1;
          lingering.clear();
          committedReplies.clear();
        }
        void read();
      }),
    ),
    ...["messages", "segment"].map((type) => client.on(type, mine(() => void read()))),
    client.on(
      "draft",
      mine((draft) => {
        if (draft.role !== "assistant") return;
        if (draft.state === "final" && draft.revision !== null) {
          const message = draftMessage(draft);
          committedReplies.set(message.id, draft.revision);
          if (draft.revision > committedAt) {
            lingering.set(draft.draftId, { message, revision: draft.revision });
          }
        }
        apply();
      }),
    ),
    // A chat that does not exist yet (the first send creates it): follow it again later.
    client.on(
      "stop",
      mine(({ code, message }) => {
        client.unsubscribe(transcriptId);
        if (code === "not-found") later(follow);
        else if (options.onError) options.onError(new Error(`${code}: ${message}`));
      }),
    ),
  );
  if (typeof chat["~registerStatusCallback"] === "function") {
    // After the Chat's own step (a request reads chat.messages right after it sets its status).
    removers.push(chat["~registerStatusCallback"](() => queueMicrotask(apply)));
  }
  follow();
  if (own) client.connect();

  const stop = () => {
    if (stopped) return;
    stopped = true;
    for (const timer of retries.values()) clearTimeout(timer);
    for (const remove of removers) remove();
    if (own) client.close();
    else client.unsubscribe(transcriptId);
  };

  /**
   * Stop the reply being written, for every tab: the transcript's open
   * assistant drafts are stopped (the server commits what they hold and
   * tells their writer), and the Chat's own request ends.
   */
  const stopReply = async () => {
    const open = [...client.drafts(transcriptId).values()].filter((d) => d.role === "assistant");
    const stops = open.map((d) => client.stopDraft(transcriptId, d.draftId));
    await Promise.allSettled([...stops, chat.stop()]);
  };

  return Object.assign(() => stop(), { stop, stopReply, client });
}
