// @transcript-sync/client/ui-stream: the AI SDK's fold of a UI message
// stream (readUIMessageStream's), a port of the server's protocol/ui_stream.py
// (UIMessageState.apply and its handlers, message()) and
// protocol/partial_json.py (fixJson, parsePartialJson), held to both and to
// the `ai` package by the shared case files tests/cases/ui_stream/*.json. Not
// ported: the compacted log and the dry run (check), which only the server
// needs. A chunk the SDK would refuse throws UIStreamError. The client's
// DraftCopy (drafts.js) folds replies with this; this entry gives the fold
// alone (the server serves it at /v1/ui_stream.js, beside /v1/client.js).
//
//   import { UIMessageState } from "@transcript-sync/client/ui-stream";
//   const state = new UIMessageState("reply-1");
//   for await (const chunk of uiMessageStream) if (state.apply(chunk)) show(state.message());

import { isObject } from "./wire.js";

/** A chunk that does not fit the stream so far (the SDK's UIMessageStreamError). */
export class UIStreamError extends Error {
  constructor(message) {
    super(message);
    this.name = "UIStreamError";
  }
}

// partial JSON

const DIGITS = "0123456789";
const HEX = "0123456789abcdefABCDEF";

/**
 * The SDK's fixJson: the longest valid prefix of partial JSON text, closed
 * (strings, arrays, objects, literals) so that it parses.
 */
export function fixJson(text) {
  const stack = ["ROOT"];
  let lastValid = -1;
  let literalStart = 0;
  let unicodeDigits = 0;
  const top = () => (stack.length ? stack[stack.length - 1] : null);
  const setTop = (s) => {
    stack[stack.length - 1] = s;
  };

  const valueStart = (char, i, swap) => {
    if (char === '"') {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_STRING");
    } else if (char === "f" || char === "t" || char === "n") {
      lastValid = i;
      literalStart = i;
      setTop(swap);
      stack.push("INSIDE_LITERAL");
    } else if (char === "-") {
      setTop(swap);
      stack.push("INSIDE_NUMBER");
    } else if (DIGITS.includes(char)) {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_NUMBER");
    } else if (char === "{") {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_OBJECT_START");
    } else if (char === "[") {
      lastValid = i;
      setTop(swap);
      stack.push("INSIDE_ARRAY_START");
    }
  };
  const afterObjectValue = (char, i) => {
    if (char === ",") setTop("INSIDE_OBJECT_AFTER_COMMA");
    else if (char === "}") {
      lastValid = i;
      stack.pop();
    }
  };
  const afterArrayValue = (char, i) => {
    if (char === ",") setTop("INSIDE_ARRAY_AFTER_COMMA");
    else if (char === "]") {
      lastValid = i;
      stack.pop();
    }
  };

  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    switch (top()) {
      case "ROOT":
        valueStart(char, i, "FINISH");
        break;
      case "INSIDE_OBJECT_START":
        if (char === '"') setTop("INSIDE_OBJECT_KEY");
        else if (char === "}") {
          lastValid = i;
          stack.pop();
        }
        break;
      case "INSIDE_OBJECT_AFTER_COMMA":
        if (char === '"') setTop("INSIDE_OBJECT_KEY");
        break;
      case "INSIDE_OBJECT_KEY":
        if (char === '"') setTop("INSIDE_OBJECT_AFTER_KEY");
        break;
      case "INSIDE_OBJECT_AFTER_KEY":
        if (char === ":") setTop("INSIDE_OBJECT_BEFORE_VALUE");
        break;
      case "INSIDE_OBJECT_BEFORE_VALUE":
        valueStart(char, i, "INSIDE_OBJECT_AFTER_VALUE");
        break;
      case "INSIDE_OBJECT_AFTER_VALUE":
        afterObjectValue(char, i);
        break;
      case "INSIDE_STRING":
        if (char === '"') {
          stack.pop();
          lastValid = i;
        } else if (char === "\\") {
          stack.push("INSIDE_STRING_ESCAPE");
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_ARRAY_START":
        if (char === "]") {
          lastValid = i;
          stack.pop();
        } else {
          valueStart(char, i, "INSIDE_ARRAY_AFTER_VALUE");
        }
        break;
      case "INSIDE_ARRAY_AFTER_VALUE":
        if (char === ",") setTop("INSIDE_ARRAY_AFTER_COMMA");
        else if (char === "]") {
          lastValid = i;
          stack.pop();
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_ARRAY_AFTER_COMMA":
        valueStart(char, i, "INSIDE_ARRAY_AFTER_VALUE");
        break;
      case "INSIDE_STRING_ESCAPE":
        stack.pop();
        if (char === "u") {
          unicodeDigits = 0;
          stack.push("INSIDE_STRING_UNICODE_ESCAPE");
        } else {
          lastValid = i;
        }
        break;
      case "INSIDE_STRING_UNICODE_ESCAPE":
        if (HEX.includes(char)) {
          unicodeDigits += 1;
          if (unicodeDigits === 4) {
            stack.pop();
            lastValid = i;
          }
        }
        break;
      case "INSIDE_NUMBER":
        if (DIGITS.includes(char)) {
          lastValid = i;
        } else if ("eE-.".includes(char)) {
          // part of the number, not yet valid
        } else if (char === ",") {
          stack.pop();
          if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
        } else if (char === "}") {
          stack.pop();
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
        } else if (char === "]") {
          stack.pop();
          if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
        } else {
          stack.pop();
        }
        break;
      case "INSIDE_LITERAL": {
        const partial = text.slice(literalStart, i + 1);
        if (!["false", "true", "null"].some((word) => word.startsWith(partial))) {
          stack.pop();
          if (top() === "INSIDE_OBJECT_AFTER_VALUE") afterObjectValue(char, i);
          else if (top() === "INSIDE_ARRAY_AFTER_VALUE") afterArrayValue(char, i);
        } else {
          lastValid = i;
        }
        break;
      }
      default:
        break;
    }
  }

  let result = text.slice(0, lastValid + 1);
  for (let k = stack.length - 1; k >= 0; k--) {
    const state = stack[k];
    if (state === "INSIDE_STRING") result += '"';
    else if (
      state === "INSIDE_OBJECT_KEY" ||
      state === "INSIDE_OBJECT_AFTER_KEY" ||
      state === "INSIDE_OBJECT_AFTER_COMMA" ||
      state === "INSIDE_OBJECT_START" ||
      state === "INSIDE_OBJECT_BEFORE_VALUE" ||
      state === "INSIDE_OBJECT_AFTER_VALUE"
    ) {
      result += "}";
    } else if (state === "INSIDE_ARRAY_START" || state === "INSIDE_ARRAY_AFTER_COMMA" || state === "INSIDE_ARRAY_AFTER_VALUE") {
      result += "]";
    } else if (state === "INSIDE_LITERAL") {
      const partial = text.slice(literalStart);
      for (const word of ["true", "false", "null"]) {
        if (word.startsWith(partial)) {
          result += word.slice(partial.length);
          break;
        }
      }
    }
  }
  return result;
}

/**
 * The SDK's parsePartialJson(text).value: the text parsed, else its fixJson
 * repair parsed, else undefined.
 */
export function parsePartialJson(text) {
  for (const candidate of [text, fixJson(text)]) {
    try {
      return JSON.parse(candidate);
    } catch {
      // try the repair, then give up
    }
  }
  return undefined;
}

// the fold

const jsonCopy = (v) => (v === undefined ? undefined : JSON.parse(JSON.stringify(v)));

/** The SDK's mergeObjects: a deep merge of plain objects. */
function mergeObjects(base, overrides) {
  if (base === undefined && overrides === undefined) return undefined;
  if (base === undefined) return overrides;
  if (overrides === undefined) return base;
  const result = { ...base };
  for (const [key, value] of Object.entries(overrides)) {
    if (key === "__proto__" || key === "constructor" || key === "prototype" || value === undefined) continue;
    const baseValue = base[key];
    if (isObject(value) && isObject(baseValue)) result[key] = mergeObjects(baseValue, value);
    else result[key] = value;
  }
  return result;
}

const isTool = (part) => part.type.startsWith("tool-") || part.type === "dynamic-tool";
const isStaticTool = (part) => part.type.startsWith("tool-");
const staticName = (part) => part.type.split("-").slice(1).join("-");
const RESULT_STATES = ["output-available", "output-error"];

/** The fields each chunk type must carry as strings (the SDK's schema; the fold reads them). */
const REQUIRED = {
  "text-start": ["id"],
  "text-delta": ["id", "delta"],
  "text-end": ["id"],
  "reasoning-start": ["id"],
  "reasoning-delta": ["id", "delta"],
  "reasoning-end": ["id"],
  custom: ["kind"],
  error: ["errorText"],
  "tool-input-start": ["toolCallId", "toolName"],
  "tool-input-delta": ["toolCallId", "inputTextDelta"],
  "tool-input-available": ["toolCallId", "toolName"],
  "tool-input-error": ["toolCallId", "toolName", "errorText"],
  "tool-approval-request": ["approvalId", "toolCallId"],
  "tool-approval-response": ["approvalId"],
  "tool-output-available": ["toolCallId"],
  "tool-output-error": ["toolCallId", "errorText"],
  "tool-output-denied": ["toolCallId"],
  "source-url": ["sourceId", "url"],
  "source-document": ["sourceId", "mediaType", "title"],
  file: ["url", "mediaType"],
  "reasoning-file": ["url", "mediaType"],
  "steering-message": ["id"],
};

/**
 * One assistant UIMessage being streamed, as readUIMessageStream builds it
 * from the chunks (with resetStateOnMessageIdChange). Port of
 * protocol.ui_stream.UIMessageState (without its compacted log).
 */
export class UIMessageState {
  constructor(messageId = "") {
    this._reset(messageId);
    this.finishReason = undefined;
  }

  _reset(messageId) {
    this.msg = { id: messageId, metadata: undefined, role: "assistant", parts: [] };
    this.activeText = new Map();
    this.activeReasoning = new Map();
    this.partialTools = new Map();
  }

  get id() {
    return String(this.msg.id);
  }

  get parts() {
    return this.msg.parts;
  }

  /** The message as the SDK shows it now (a copy, JSON-ready: keys set to undefined left out). */
  message() {
    return JSON.parse(JSON.stringify(this.msg));
  }

  /**
   * Fold one chunk in (a copy of it). True when the SDK would show a new
   * state of the message for it (not for start-step, finish-step, abort,
   * error, a transient data part, nor a start, finish or message-metadata
   * that changed nothing). Throws UIStreamError for a chunk that does not fit.
   */
  apply(chunk) {
    if (!isObject(chunk) || typeof chunk.type !== "string") {
      throw new UIStreamError("a chunk is an object with a string type");
    }
    const kind = chunk.type;
    for (const key of REQUIRED[kind] ?? []) {
      if (typeof chunk[key] !== "string") throw new UIStreamError(`a ${kind} chunk needs ${key} (a string)`);
    }
    const own = jsonCopy(chunk);
    const handler = Object.hasOwn(HANDLERS, kind) ? HANDLERS[kind] : undefined;
    if (handler !== undefined) return handler(this, own) !== false;
    if (kind.startsWith("data-")) return this._data(own);
    // Any other type (abort, error and what a newer SDK adds) changes nothing.
    return false;
  }

  /** Fold chunks in, in order; true when any would show a new state. */
  applyAll(chunks) {
    let shown = false;
    for (const chunk of chunks) shown = this.apply(chunk) || shown;
    return shown;
  }

  // -- helpers, named as the SDK's --

  _stepParts() {
    const parts = this.parts;
    let start = parts.length - 1;
    while (start >= 0 && parts[start].type !== "step-start") start -= 1;
    return parts.slice(start + 1);
  }

  _toolInvocation(callId) {
    for (const part of this._stepParts()) {
      if (isTool(part) && part.toolCallId === callId) return part;
    }
    for (let k = this.parts.length - 1; k >= 0; k--) {
      const earlier = this.parts[k];
      if (isTool(earlier) && earlier.toolCallId === callId) return earlier;
    }
    throw new UIStreamError(`No tool invocation found for tool call ID "${callId}".`);
  }

  _updateTool(options, existing, dynamic) {
    let part = existing;
    if (part === null) {
      part =
        this._stepParts().find(
          (c) => (dynamic ? c.type === "dynamic-tool" : isStaticTool(c)) && c.toolCallId === options.toolCallId,
        ) ?? null;
    }
    const state = options.state;
    const providerMetadata = options.providerMetadata;
    if (part !== null) {
      part.state = state;
      if (dynamic) part.toolName = options.toolName;
      else part.type = `tool-${options.toolName}`;
      part.input = options.input;
      part.output = options.output;
      part.errorText = options.errorText;
      part.rawInput = options.rawInput;
      if (options.inputEncoding != null) part.inputEncoding = options.inputEncoding;
      else delete part.inputEncoding;
      part.preliminary = options.preliminary;
      if (options.title !== undefined) part.title = options.title;
      if (options.toolMetadata !== undefined) part.toolMetadata = options.toolMetadata;
      part.providerExecuted = options.providerExecuted ?? part.providerExecuted;
      if (providerMetadata != null) {
        part[RESULT_STATES.includes(state) ? "resultProviderMetadata" : "callProviderMetadata"] = providerMetadata;
      }
      return;
    }
    const created = dynamic ? { type: "dynamic-tool", toolName: options.toolName } : { type: `tool-${options.toolName}` };
    created.toolCallId = options.toolCallId;
    created.state = state;
    created.title = options.title;
    if (options.toolMetadata !== undefined) created.toolMetadata = options.toolMetadata;
    created.input = options.input;
    if (options.inputEncoding != null) created.inputEncoding = options.inputEncoding;
    created.output = options.output;
    if (!dynamic) created.rawInput = options.rawInput; // the SDK's new dynamic part has no rawInput
    created.errorText = options.errorText;
    created.providerExecuted = options.providerExecuted;
    created.preliminary = options.preliminary;
    if (providerMetadata != null) {
      created[RESULT_STATES.includes(state) ? "resultProviderMetadata" : "callProviderMetadata"] = providerMetadata;
    }
    this.parts.push(created);
  }

  _metadata(metadata) {
    if (metadata == null) return false;
    const current = this.msg.metadata;
    this.msg.metadata = current != null ? mergeObjects(current, metadata) : metadata;
    return true;
  }

  // -- the chunks --

  _textStart(chunk) {
    const part = { type: "text", text: "", providerMetadata: chunk.providerMetadata, state: "streaming" };
    this.activeText.set(chunk.id, part);
    this.parts.push(part);
  }

  _textDelta(chunk) {
    const part = this.activeText.get(chunk.id);
    if (part === undefined) throw new UIStreamError(`Received text-delta for missing text part with ID "${chunk.id}".`);
    part.text += String(chunk.delta ?? "");
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
  }

  _textEnd(chunk) {
    const part = this.activeText.get(chunk.id);
    if (part === undefined) throw new UIStreamError(`Received text-end for missing text part with ID "${chunk.id}".`);
    part.state = "done";
    if (chunk.citations != null) part.citations = chunk.citations;
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
    this.activeText.delete(chunk.id);
  }

  _custom(chunk) {
    this.parts.push({ type: "custom", kind: chunk.kind, providerMetadata: chunk.providerMetadata });
  }

  _reasoningStart(chunk) {
    const part = { type: "reasoning", id: chunk.id, text: "", providerMetadata: chunk.providerMetadata, state: "streaming" };
    this.activeReasoning.set(chunk.id, part);
    this.parts.push(part);
  }

  _reasoningDelta(chunk) {
    const part = this.activeReasoning.get(chunk.id);
    if (part === undefined) {
      throw new UIStreamError(`Received reasoning-delta for missing reasoning part with ID "${chunk.id}".`);
    }
    part.text += String(chunk.delta ?? "");
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
  }

  _reasoningEnd(chunk) {
    const part = this.activeReasoning.get(chunk.id);
    if (part === undefined) {
      throw new UIStreamError(`Received reasoning-end for missing reasoning part with ID "${chunk.id}".`);
    }
    part.providerMetadata = chunk.providerMetadata ?? part.providerMetadata;
    part.state = "done";
    this.activeReasoning.delete(chunk.id);
  }

  _file(chunk) {
    const part = { type: chunk.type, mediaType: chunk.mediaType, url: chunk.url };
    if (chunk.providerMetadata != null) part.providerMetadata = chunk.providerMetadata;
    this.parts.push(part);
  }

  _sourceUrl(chunk) {
    this.parts.push({
      type: "source-url",
      sourceId: chunk.sourceId,
      url: chunk.url,
      title: chunk.title,
      providerMetadata: chunk.providerMetadata,
    });
  }

  _sourceDocument(chunk) {
    this.parts.push({
      type: "source-document",
      sourceId: chunk.sourceId,
      mediaType: chunk.mediaType,
      title: chunk.title,
      filename: chunk.filename,
      providerMetadata: chunk.providerMetadata,
    });
  }

  _toolInputStart(chunk) {
    const statics = this._stepParts().filter(isStaticTool);
    const dynamic = Boolean(chunk.dynamic);
    this.partialTools.set(chunk.toolCallId, {
      text: "",
      inputEncoding: chunk.inputEncoding,
      toolName: chunk.toolName,
      index: statics.length,
      dynamic,
      title: chunk.title,
      toolMetadata: chunk.toolMetadata,
    });
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "input-streaming",
        inputEncoding: chunk.inputEncoding,
        input: undefined,
        providerExecuted: chunk.providerExecuted,
        title: chunk.title,
        toolMetadata: chunk.toolMetadata,
        providerMetadata: chunk.providerMetadata,
      },
      null,
      dynamic,
    );
  }

  _toolInputDelta(chunk) {
    const partial = this.partialTools.get(chunk.toolCallId);
    if (partial === undefined) {
      throw new UIStreamError(`Received tool-input-delta for missing tool call with ID "${chunk.toolCallId}".`);
    }
    partial.text += String(chunk.inputTextDelta ?? "");
    const args = partial.inputEncoding === "text" ? partial.text : parsePartialJson(partial.text);
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: partial.toolName,
        state: "input-streaming",
        inputEncoding: partial.inputEncoding,
        input: args,
        rawInput: partial.text,
        title: partial.title,
        toolMetadata: partial.toolMetadata,
      },
      null,
      partial.dynamic,
    );
  }

  _toolInputAvailable(chunk) {
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "input-available",
        input: chunk.input,
        providerExecuted: chunk.providerExecuted,
        providerMetadata: chunk.providerMetadata,
        title: chunk.title,
        toolMetadata: chunk.toolMetadata,
      },
      null,
      Boolean(chunk.dynamic),
    );
  }

  _toolInputError(chunk) {
    const existing = this._stepParts().find((p) => isTool(p) && p.toolCallId === chunk.toolCallId);
    const dynamic = existing ? existing.type === "dynamic-tool" : Boolean(chunk.dynamic);
    this._updateTool(
      {
        toolCallId: chunk.toolCallId,
        toolName: chunk.toolName,
        state: "output-error",
        input: chunk.input,
        errorText: chunk.errorText,
        providerExecuted: chunk.providerExecuted,
        providerMetadata: chunk.providerMetadata,
        toolMetadata: chunk.toolMetadata,
      },
      null,
      dynamic,
    );
  }

  _approvalRequest(chunk) {
    const part = this._toolInvocation(chunk.toolCallId);
    part.state = "approval-requested";
    const approval = { id: chunk.approvalId };
    if (chunk.approvalDescriptor != null) approval.descriptor = chunk.approvalDescriptor;
    if (Object.hasOwn(chunk, "inputSchemaInput")) approval.inputSchemaInput = chunk.inputSchemaInput;
    if (chunk.reason != null) approval.requestReason = chunk.reason;
    if (chunk.isAutomatic === true) approval.isAutomatic = true;
    if (chunk.signature != null) approval.signature = chunk.signature;
    part.approval = approval;
  }

  _approvalResponse(chunk) {
    const approvalId = chunk.approvalId;
    const part = this.parts.find((p) => isTool(p) && isObject(p.approval) && p.approval.id === approvalId);
    if (part === undefined) throw new UIStreamError(`No tool invocation found for approval ID "${approvalId}".`);
    const approval = { ...(part.approval || { id: approvalId }) };
    approval.id = approvalId;
    approval.approved = chunk.approved;
    if (chunk.reason != null) approval.reason = chunk.reason;
    part.state = "approval-responded";
    part.approval = approval;
    if (chunk.providerExecuted != null) part.providerExecuted = chunk.providerExecuted;
    if (chunk.providerMetadata != null) part.callProviderMetadata = chunk.providerMetadata;
  }

  _outputDenied(chunk) {
    this._toolInvocation(chunk.toolCallId).state = "output-denied";
  }

  _output(chunk, state) {
    const part = this._toolInvocation(chunk.toolCallId);
    const dynamic = part.type === "dynamic-tool";
    const options = {
      toolCallId: chunk.toolCallId,
      toolName: dynamic ? part.toolName : staticName(part),
      state,
      input: part.input,
      providerExecuted: chunk.providerExecuted,
      providerMetadata: chunk.providerMetadata,
      title: part.title,
      toolMetadata: chunk.toolMetadata ?? part.toolMetadata,
    };
    if (state === "output-available") {
      options.output = chunk.output;
      options.preliminary = chunk.preliminary;
    } else {
      options.errorText = chunk.errorText;
      if (!dynamic) options.rawInput = part.rawInput;
    }
    this._updateTool(options, part, dynamic);
  }

  _steering(chunk) {
    this.parts.push({ type: "steering-message", id: chunk.id, parts: chunk.parts });
  }

  _startStep() {
    this.parts.push({ type: "step-start" });
    return false;
  }

  _resetStep() {
    const step = this._stepParts();
    this.activeText = new Map();
    this.activeReasoning = new Map();
    this.partialTools = new Map();
    if (step.length) this.parts.splice(this.parts.length - step.length);
    return step.length > 0;
  }

  _start(chunk) {
    const messageId = chunk.messageId;
    if (messageId != null && messageId !== this.msg.id) {
      this._reset(messageId);
      this.finishReason = undefined;
    }
    if (messageId != null) this.msg.id = messageId;
    return this._metadata(chunk.messageMetadata) || messageId != null;
  }

  _finish(chunk) {
    if (chunk.finishReason != null) this.finishReason = chunk.finishReason;
    return this._metadata(chunk.messageMetadata);
  }

  _messageMetadata(chunk) {
    return this._metadata(chunk.messageMetadata);
  }

  _data(chunk) {
    if (chunk.transient) return false;
    const chunkId = chunk.id;
    if (chunkId != null) {
      for (const part of this.parts) {
        if (part.type === chunk.type && part.id === chunkId) {
          part.data = chunk.data;
          return true;
        }
      }
    }
    this.parts.push(chunk);
    return true;
  }
}

const HANDLERS = {
  "text-start": (s, c) => s._textStart(c),
  "text-delta": (s, c) => s._textDelta(c),
  "text-end": (s, c) => s._textEnd(c),
  custom: (s, c) => s._custom(c),
  "reasoning-start": (s, c) => s._reasoningStart(c),
  "reasoning-delta": (s, c) => s._reasoningDelta(c),
  "reasoning-end": (s, c) => s._reasoningEnd(c),
  file: (s, c) => s._file(c),
  "reasoning-file": (s, c) => s._file(c),
  "source-url": (s, c) => s._sourceUrl(c),
  "source-document": (s, c) => s._sourceDocument(c),
  "tool-input-start": (s, c) => s._toolInputStart(c),
  "tool-input-delta": (s, c) => s._toolInputDelta(c),
  "tool-input-available": (s, c) => s._toolInputAvailable(c),
  "tool-input-error": (s, c) => s._toolInputError(c),
  "tool-approval-request": (s, c) => s._approvalRequest(c),
  "tool-approval-response": (s, c) => s._approvalResponse(c),
  "tool-output-denied": (s, c) => s._outputDenied(c),
  "tool-output-available": (s, c) => s._output(c, "output-available"),
  "tool-output-error": (s, c) => s._output(c, "output-error"),
  "steering-message": (s, c) => s._steering(c),
  "start-step": (s) => s._startStep(),
  "reset-step": (s) => s._resetStep(),
  start: (s, c) => s._start(c),
  finish: (s, c) => s._finish(c),
  "message-metadata": (s, c) => s._messageMetadata(c),
};
