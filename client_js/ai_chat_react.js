// @transcript-sync/client/ai-chat/react: useChat kept equal to a transcript,
// in every tab and on every device (syncChat of ./ai-chat, as a hook).
//
//   const { messages, sendMessage, status, stop } = useTranscriptChat({
//     url: "https://tsync.example",
//     transcriptId: "chat-1",
//     transport: new WebSocketChatTransport({ url: "wss://tsync.example/v1/ai/chat" }),
//   });
//
// It is useChat({ chat, resume: true }) on a Chat of the transcript's id
// that syncChat keeps in step, and its stop() is syncChat's stopReply(): the
// reply stops for every tab (the agent is told, the partial reply kept).
// Needs react and @ai-sdk/react (optional peer dependencies of the package).
import { useCallback, useEffect, useMemo, useRef } from "react";
import { Chat, useChat } from "@ai-sdk/react";
import { syncChat } from "./ai_chat.js";

const CALLBACKS = ["onError", "onToolCall", "onFinish", "onData", "sendAutomaticallyWhen"];

export function useTranscriptChat(options) {
  const { url, transcriptId, token, getToken, client, WebSocket, fetch } = options;
  const { chat: given, resume = true, throttle, ...init } = options;
  const ours = ["url", "token", "getToken", "client", "WebSocket", "fetch", "onSyncError", "transcriptId", "transport"];
  for (const name of ours) {
    delete init[name];
  }
  // The callbacks of the latest render, as useChat keeps them.
  const latest = useRef(options);
  latest.current = options;
  const chat = useMemo(() => {
    if (given) return given;
    const callbacks = {};
    for (const name of CALLBACKS) {
      if (init[name] !== undefined) callbacks[name] = (...args) => latest.current[name]?.(...args);
    }
    // The transport of the latest render, as useChat does: one made in the render
    // (useTranscriptChat({ transport: new DefaultChatTransport(...) })) keeps the Chat.
    const current = () => latest.current.transport;
    const proxy = {
      get resumeStreamIsReplay() {
        return current().resumeStreamIsReplay;
      },
      sendMessages: (request) => current().sendMessages(request),
      reconnectToStream: (request) => current().reconnectToStream(request),
    };
    return new Chat({ ...init, ...callbacks, id: transcriptId, transport: proxy });
    // A new Chat for another transcript; the rest is read when it is made.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [given, transcriptId]);
  const sync = useRef(null);
  useEffect(() => {
    const handle = syncChat(chat, {
      transcriptId,
      url,
      client,
      token,
      getToken: getToken ? () => latest.current.getToken?.() : undefined,
      WebSocket,
      fetch,
      onError: (error) => latest.current.onSyncError?.(error),
    });
    sync.current = handle;
    return () => {
      if (sync.current === handle) sync.current = null;
      handle();
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [chat, transcriptId, String(url ?? ""), client, token]);
  const helpers = useChat({ chat, resume, throttle });
  const stop = useCallback(async () => {
    if (sync.current) await sync.current.stopReply();
    else await chat.stop();
  }, [chat]);
  return { ...helpers, stop };
}
