// @transcript-sync/client/ui-stream: the AI SDK's fold of a UI message
// stream (readUIMessageStream's), a port of the server's protocol/ui_stream.py
// and protocol/partial_json.py, held to both and to the `ai` package by the
// shared case files tests/cases/ui_stream/*.json.
//
//   import { UIMessageState } from "@transcript-sync/client/ui-stream";
//   const state = new UIMessageState("reply-1");
//   for await (const chunk of uiMessageStream) if (state.apply(chunk)) show(state.message());
//
// The code is in client.js (its section "replies with parts"), which the
// server serves as one file at /v1/client.js and whose DraftCopy folds
// replies with this; this entry gives the fold alone.
export { UIMessageState, UIStreamError, fixJson, parsePartialJson } from "./client.js";
