// Types of @transcript-sync/client/ui-stream (ui_stream.js): the AI SDK's fold
// of a UI message stream (readUIMessageStream's), ported from the server's
// protocol/ui_stream.py and held to both by shared case files.

/** A JSON value, as chunks and messages carry them. */
export type UIJson = null | boolean | number | string | UIJson[] | { [key: string]: UIJson };

/** One chunk of an AI SDK UI message stream (`UIMessageChunk`): {type, ...}. */
export interface UIMessageChunkLike {
  type: string;
  [key: string]: unknown;
}

/** One part of a UIMessage: {type, ...} (text, reasoning, tool-*, dynamic-tool, file, source-*, data-*, step-start...). */
export interface UIPartLike {
  type: string;
  [key: string]: unknown;
}

/** An assistant `UIMessage` as the AI SDK shows it (JSON: no key set to undefined). */
export interface UIMessageLike {
  id: string;
  role: "assistant";
  metadata?: unknown;
  parts: UIPartLike[];
}

/** A chunk that does not fit the stream so far (the SDK's UIMessageStreamError). */
export class UIStreamError extends Error {}

/** One assistant UIMessage being streamed, as readUIMessageStream builds it from the chunks. */
export class UIMessageState {
  /** messageId: the message's id until a start chunk names another. */
  constructor(messageId?: string);
  readonly id: string;
  /** The finish chunk's finishReason, once one came. */
  finishReason: string | undefined;
  /** The message as the SDK shows it now (a copy). */
  message(): UIMessageLike;
  /** Fold one chunk in; true when the SDK would show a new state for it. Throws UIStreamError. */
  apply(chunk: UIMessageChunkLike): boolean;
  /** Fold chunks in, in order; true when any would show a new state. */
  applyAll(chunks: Iterable<UIMessageChunkLike>): boolean;
}

/** The SDK's fixJson: the longest valid prefix of partial JSON text, closed so that it parses. */
export function fixJson(text: string): string;

/** The SDK's parsePartialJson(text).value: the text parsed, else its repair parsed, else undefined. */
export function parsePartialJson(text: string): unknown;
