// One message as a list item: Markdown text, images, attachments, tool calls and results,
// folded system and context messages, metadata behind a toggle; and the growing draft of a
// message still being written. Only DOM building: no state, no network.
//
// Message bodies are whatever someone appended: text goes through markdown.js (sanitized) or
// textContent, never straight into innerHTML.

import { attachmentBytes } from "/v1/client.js";
import { REMOTE_IMAGES, markdownFragment, remoteImageLink } from "./markdown.js";

const ROLE_LABELS = { user: "User", assistant: "Assistant", system: "System", tool: "Tool", context: "Context" };
const PREVIEW_CHARS = 120;
const INERT_TYPES = /^(text\/plain|text\/csv|application\/json|application\/pdf|image\/(png|jpeg|gif|webp|avif))(;|$)/i;

/** Create an element: attrs.class, attrs.text (textContent) and plain attributes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/** The text parts of a message, joined ("" for none). */
export function textOf(message) {
  const content = message?.content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((p) => p?.type === "text" && typeof p.text === "string").map((p) => p.text).join("\n");
}

const BLOCKS = "p, li, pre, td, th, h1, h2, h3, h4, h5, h6, blockquote, summary, figure, dd";

/** The words a rendered element shows, on one line: what a screen reader should announce. */
export function readableText(node, limit = PREVIEW_CHARS) {
  const copy = node.cloneNode(true);
  for (const block of copy.querySelectorAll(BLOCKS)) block.append(" ");
  for (const br of copy.querySelectorAll("br")) br.replaceWith(" ");
  for (const hidden of copy.querySelectorAll("[aria-hidden=true], .code-head")) hidden.remove();
  return oneLine(copy.textContent, limit);
}

/** A one-line preview of some text: whitespace collapsed, cut at `limit` characters. */
export function oneLine(text, limit = PREVIEW_CHARS) {
  const flat = String(text ?? "").replace(/\s+/g, " ").trim();
  return flat.length > limit ? `${flat.slice(0, limit - 1).trimEnd()}…` : flat;
}

/** The tool calls an assistant message makes: [{id, name, args}] with args the raw string. */
export function toolCallsOf(message) {
  if (!Array.isArray(message?.tool_calls)) return [];
  return message.tool_calls.map((call) => ({
    id: typeof call?.id === "string" ? call.id : "",
    name: String(call?.function?.name ?? call?.name ?? "tool"),
    args: call?.function?.arguments ?? call?.arguments ?? "",
  }));
}

/** Arguments as people read them: {city: "Paris", days: 3}; raw text if they are not JSON. */
export function compactArgs(args) {
  let value = args;
  if (typeof args === "string") {
    try {
      value = JSON.parse(args);
    } catch {
      return args;
    }
  }
  return compact(value);
}

function compact(value) {
  if (Array.isArray(value)) return `[${value.map(compact).join(", ")}]`;
  if (value && typeof value === "object") {
    const fields = Object.entries(value).map(
      ([key, v]) => `${/^[A-Za-z_$][\w$]*$/.test(key) ? key : JSON.stringify(key)}: ${compact(v)}`,
    );
    return `{${fields.join(", ")}}`;
  }
  return JSON.stringify(value) ?? String(value);
}

/** Pretty JSON if the text is JSON, else null. */
function prettyJson(text) {
  if (typeof text !== "string") return JSON.stringify(text, null, 2);
  const trimmed = text.trim();
  if (!/^[[{"]/.test(trimmed)) return null;
  try {
    return JSON.stringify(JSON.parse(trimmed), null, 2);
  } catch {
    return null;
  }
}

/** A code block like Markdown's, for JSON and tool output (same copy button, same colours). */
function codeBlock(text, language) {
  const fence = "`".repeat(Math.max(3, ...[...String(text).matchAll(/`+/g)].map((m) => m[0].length + 1)));
  return markdownFragment(`${fence}${language}\n${text}\n${fence}`);
}

function roleLabel(role) {
  return ROLE_LABELS[role] ?? role;
}

/**
 * Render one message as an <li>. `index` is its place in the transcript (null for a draft).
 * `context`:
 *   tools.callOf(id) -> {index, name} | undefined: the call a tool result answers;
 *   tools.resultOf(id) -> index | undefined: the result that answered a call;
 *   blobUrls: a Set that receives the blob: URLs made for attachments (revoke them later);
 *   draft: true for a message still being written (typing indicator, aria-busy).
 */
export function renderMessage(message, index, context = {}) {
  const role = typeof message?.role === "string" ? message.role : "unknown";
  const draft = Boolean(context.draft);
  const item = el("li", {
    class: `message role-${role}${draft ? " draft" : ""}`,
    "data-role": role,
    "data-index": index === null ? null : String(index),
    id: index === null ? null : `m-${index}`,
    tabindex: "-1",
    "aria-busy": draft ? "true" : null,
  });
  if (role === "system" || role === "context") {
    // Instructions and narrative preamble, not turns: folded to one line.
    const what = role === "system" ? "System instructions" : "Context";
    item.append(
      el("details", { class: "folded" },
        el("summary", {},
          el("span", { class: "role", text: what }),
          el("span", { class: "preview", text: oneLine(textOf(message)) || "(no text)" })),
        body(message, index, context)),
    );
  } else if (role === "tool") {
    item.append(toolResult(message, index, context));
  } else {
    item.append(header(message, role, draft), body(message, index, context));
  }
  if (!draft) item.append(about(message, index));
  return item;
}

function header(message, role, draft) {
  return el("div", { class: "who" },
    el("span", { class: "role", text: roleLabel(role) }),
    typeof message.name === "string" && message.name ? el("span", { class: "name", text: message.name }) : null,
    draft
      ? el("span", { class: "typing", role: "img", "aria-label": "writing…" },
        el("span", {}), el("span", {}), el("span", {}))
      : null,
  );
}

function body(message, index, context) {
  const node = el("div", { class: "body" });
  const content = message.content;
  if (typeof content === "string") {
    if (content) node.append(el("div", { class: "text md" }, markdownFragment(content)));
  } else if (Array.isArray(content)) {
    const files = fileNames(content);
    content.forEach((part, n) => {
      // An imported file is shown once, as its part: not also as the text's @@@ fence.
      const shown = files.size && part?.type === "text" ? { ...part, text: withoutFences(part.text, files) } : part;
      node.append(partNode(shown, index, n, context));
    });
  }
  const calls = toolCallsOf(message);
  if (calls.length) {
    node.append(el("ul", { class: "tool-calls" }, ...calls.map((call) => toolCall(call, context))));
  }
  return node;
}

/** The names of the files a message carries as parts ("*image*": it has an image). */
export function fileNames(parts) {
  const names = new Set();
  for (const part of parts) {
    if (part?.type === "attachment" && typeof part.name === "string") names.add(part.name);
    if (part?.type === "image_url") names.add("*image*");
  }
  return names;
}

const FENCE_OPEN = /^@@@([A-Za-z0-9][A-Za-z0-9_.\-/]*)[ \t]*$/;
const FENCE_CLOSE = /^@@@[ \t]*$/;
const IMAGE_NAME = /\.(png|jpe?g|gif|webp|avif|svg|bmp)$/i;

/**
 * `text` without the complete LMML inline fences (`@@@name`, its lines, `@@@`) of the files in
 * `files` (an import keeps the fence in the text, so that an export gives it back, and the file
 * as a part of its own). Linear in the text.
 */
export function withoutFences(text, files) {
  if (typeof text !== "string" || !text.includes("@@@")) return text;
  const lines = text.split("\n");
  const bare = (line) => line.replace(/\r$/, "");
  const closer = new Array(lines.length + 1).fill(lines.length);
  for (let i = lines.length - 1; i >= 0; i--) closer[i] = FENCE_CLOSE.test(bare(lines[i])) ? i : closer[i + 1];
  const kept = [];
  for (let i = 0; i < lines.length; i++) {
    const name = FENCE_OPEN.exec(bare(lines[i]))?.[1];
    const ours = name && (files.has(name) || (files.has("*image*") && IMAGE_NAME.test(name)));
    if (ours && closer[i + 1] < lines.length) {
      i = closer[i + 1];
      continue;
    }
    kept.push(lines[i]);
  }
  return kept.join("\n");
}

function toolCall(call, context) {
  const pretty = prettyJson(call.args) ?? String(call.args);
  const resultIndex = call.id ? context.tools?.resultOf(call.id) : undefined;
  return el("li", { class: "tool-call", "data-call-id": call.id },
    el("details", {},
      el("summary", {},
        el("span", { class: "verb", text: "called " }),
        el("code", { class: "tool-name", text: call.name }),
        " ",
        el("span", { class: "args", text: oneLine(compactArgs(call.args), 100) })),
      codeBlock(pretty, "json")),
    el("span", { class: "tool-status" }, resultLink(resultIndex)),
  );
}

/** The "result in #5" link of a call (or "waiting for the result"). */
export function resultLink(resultIndex) {
  if (resultIndex === undefined) return el("span", { class: "hint", text: "waiting for the result…" });
  return el("a", { href: `#m-${resultIndex}`, "data-action": "reveal", "data-target": String(resultIndex), text: `result: message ${resultIndex}` });
}

function toolResult(message, index, context) {
  const call = message.tool_call_id ? context.tools?.callOf(message.tool_call_id) : undefined;
  const text = textOf(message);
  const pretty = prettyJson(text);
  const node = el("details", { class: "tool-result" },
    el("summary", {},
      el("span", { class: "role", text: "Result" }),
      call ? el("span", {}, " of ", el("code", { class: "tool-name", text: call.name })) : null,
      typeof message.name === "string" && message.name && !call
        ? el("span", {}, " of ", el("code", { class: "tool-name", text: message.name }))
        : null,
      el("span", { class: "preview", text: oneLine(text, 100) || "(empty)" })),
    pretty !== null ? codeBlock(pretty, "json") : body(message, index, context),
  );
  const wrap = el("div", { class: "tool-result-wrap" }, node);
  if (call) {
    wrap.append(el("a", { class: "call-link", href: `#m-${call.index}`, "data-action": "reveal", "data-target": String(call.index), text: `call: message ${call.index}` }));
  }
  return wrap;
}

function about(message, index) {
  const rows = [["message", index === null ? "draft" : `#${index}`], ["role", String(message.role)]];
  if (message.name) rows.push(["name", String(message.name)]);
  if (message.tool_call_id) rows.push(["tool call id", String(message.tool_call_id)]);
  const list = el("dl", {}, ...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
  const panel = el("div", { class: "about-panel" }, list);
  if (message.metadata !== undefined) {
    panel.append(el("p", { class: "about-title", text: "metadata" }), codeBlock(JSON.stringify(message.metadata, null, 2), "json"));
  }
  return el("details", { class: "about" },
    el("summary", { "aria-label": index === null ? "About this draft" : `About message ${index}`, title: "About this message" },
      el("span", { "aria-hidden": "true", text: "⋯" })),
    panel);
}

function safeImageUrl(url) {
  return typeof url === "string" && /^(https?:|data:image\/|blob:)/i.test(url);
}

function partNode(part, index, n, context) {
  if (part?.type === "text") return el("div", { class: "text md" }, markdownFragment(part.text));
  if (part?.type === "image_url") {
    const url = part.image_url?.url;
    if (!safeImageUrl(url)) return el("p", { class: "hint", text: "(an image with an unsupported URL)" });
    const alt = index === null ? `Image ${n + 1} of the draft` : `Image ${n + 1} of message #${index}`;
    if (!REMOTE_IMAGES && /^https?:/i.test(url)) return el("p", { class: "image" }, remoteImageLink(url, alt));
    return el("figure", { class: "image" },
      el("img", { src: url, alt, loading: "lazy", decoding: "async", referrerpolicy: "no-referrer" }));
  }
  if (part?.type === "attachment") {
    const bytes = attachmentBytes(part);
    const mime = typeof part.mime === "string" && part.mime ? part.mime : "application/octet-stream";
    // The blob is served under this page's origin: only types that cannot run anything keep
    // their type (an HTML or SVG attachment opened in a tab must not become a page of ours).
    const url = URL.createObjectURL(new Blob([bytes], { type: INERT_TYPES.test(mime) ? mime : "application/octet-stream" }));
    context.blobUrls?.add(url);
    const name = typeof part.name === "string" && part.name ? part.name : "attachment";
    return el("p", { class: "attachment" },
      el("a", { href: url, download: name, text: `⬇ ${name}` }),
      el("span", { class: "hint", text: ` ${mime}, ${formatSize(bytes.length)}` }));
  }
  return el("pre", { class: "unknown-part", text: JSON.stringify(part, null, 2) });
}

export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
