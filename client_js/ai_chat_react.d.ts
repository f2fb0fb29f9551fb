// Types of @transcript-sync/client/ai-chat/react (ai_chat_react.js): useChat
// kept equal to a transcript, in every tab and on every device.

import type { Chat, UseChatHelpers } from "@ai-sdk/react";
import type { ChatInit, ChatTransport, UIMessage } from "ai";
import type { SyncChatOptions } from "./ai_chat.js";

export interface UseTranscriptChatOptions<M extends UIMessage = UIMessage>
  extends Omit<SyncChatOptions, "onError">,
    Omit<ChatInit<M>, "id" | "transport" | "messages"> {
  /**
   * The transport of the Chat's own requests: WebSocketChatTransport on /v1/ai/chat, or
   * DefaultChatTransport. As with useChat, the latest render's is used (a new one keeps the Chat).
   */
  transport: ChatTransport<M>;
  /** A Chat of your own (its id must be transcriptId); else one is made for transcriptId and transport. */
  chat?: Chat<M>;
  /** Resume a reply being written when mounted (a reload in the middle of it); default true. */
  resume?: boolean;
  /** Throttle re-renders of messages, as useChat's throttle. */
  throttle?: number;
  /** A read of the transcript's messages failed (it is tried again a second later). */
  onSyncError?: (error: unknown) => void;
}

/**
 * useChat({ chat, resume: true }) on a Chat of transcriptId that syncChat keeps equal to the
 * transcript: every tab shows the other tabs' turns and the reply growing, its own turn once.
 * stop() is syncChat's stopReply(): the reply stops for every tab (the agent is told, the
 * partial reply kept in the transcript and shown everywhere).
 */
export function useTranscriptChat<M extends UIMessage = UIMessage>(
  options: UseTranscriptChatOptions<M>,
): UseChatHelpers<M>;
