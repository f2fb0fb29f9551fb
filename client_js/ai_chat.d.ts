// Types of @transcript-sync/client/ai-chat (ai_chat.js): an AI SDK Chat (and
// so useChat) kept equal to a transcript, in every tab and on every device.

import type { TsyncClient, ClientOptions } from "./client.js";

/**
 * What syncChat needs of a Chat: the AI SDK's `Chat` (from `@ai-sdk/react`, or any
 * `AbstractChat`) is one. Its messages are set to the transcript's; its status tells
 * whether a request of its own is streaming.
 */
export interface SyncableChat<M extends { id: string } = { id: string }> {
  messages: M[];
  readonly status: string;
  stop(): Promise<void> | void;
}

export interface SyncChatOptions {
  /** The transcript followed: the chat's id (the one useChat and the transports send). */
  transcriptId: string;
  /** The server, in any form TsyncClient takes (http(s)://host[:port][/base] or ws(s)://...). Not needed with client. */
  url?: string | URL;
  /** A client of your own to read through (it is not closed by stop; you connect it). */
  client?: TsyncClient;
  token?: ClientOptions["token"];
  getToken?: ClientOptions["getToken"];
  WebSocket?: ClientOptions["WebSocket"];
  fetch?: typeof globalThis.fetch;
  /**
   * A read of the transcript's UIMessages failed (it is tried again a second later), or the
   * transcript cannot be followed (forbidden, ...: "code: message"). A chat that does not
   * exist yet is no error: it is followed once a send created it.
   */
  onError?: (error: unknown) => void;
}

/** The handle syncChat returns: call it (or stop()) to stop syncing; a useEffect cleanup as it is. */
export interface ChatSync {
  (): void;
  stop(): void;
  /**
   * Stop the reply being written, for every tab and device: the transcript's open assistant
   * drafts are stopped (the server commits what they hold and tells their writer) and the
   * Chat's own request ends. Every Chat synced to the transcript then shows the same partial reply.
   */
  stopReply(): Promise<void>;
  /** The client it reads through (its own unless options.client was given). */
  readonly client: TsyncClient;
}

/**
 * Keep chat.messages equal to the transcript's UIMessages followed by the replies being
 * written (folded into UIMessages with parts as they grow): another tab's user message and
 * the reply streaming show in every tab, and a tab's own turn shows once (same ids as the
 * SDK's: the user message's UI id, the reply's messageId). While the Chat streams a request
 * of its own, the message it streams is left to it; once it is ready, the transcript wins.
 */
export function syncChat<M extends { id: string }>(
  chat: SyncableChat<M>,
  options: SyncChatOptions,
): ChatSync;
