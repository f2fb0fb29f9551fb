// @transcript-sync/client/render: one chat message as the chat page shows it.
//
// Markdown (CommonMark + GFM tables, strikethrough, task lists) made safe, code blocks with
// their language, a copy button and highlight.js colours, math ($...$, $$...$$, \(...\),
// \[...\]) with KaTeX, images, attachments, tool calls and their results, folded system and
// context messages, metadata behind a toggle; and the growing draft of a message still being
// written. Only DOM building: no state, no network. The chat page served by transcript-sync
// (server/static/messages.js) uses this very module.
//
// The libraries are handed in, not imported (no build step, no bare import a browser cannot
// resolve, and the app picks the versions): `createRenderer({ Marked, DOMPurify, ... })`.
// Required: marked's `Marked` class and DOMPurify. Optional: highlight.js (an instance, or a
// function that loads one on first use) and KaTeX (the same); without them code stays plain
// and math shows as its TeX source.
//
// Safety: raw HTML in a message is escaped (shown as text, never parsed); DOMPurify then parses
// marked's output in an inert document and keeps only the elements Markdown produces. Links keep
// http(s) and mailto targets only and open in a new tab with rel="noopener noreferrer nofollow";
// Markdown images keep http(s) sources only, and only with `remoteImages: true`: otherwise they
// become links, so that whoever wrote a message cannot learn who reads it. Everything else a
// message holds goes in as textContent. KaTeX builds its output with DOM calls (no HTML
// parsing), with `trust: false`: no links, classes or styles from the TeX.

import { attachmentBytes } from "./wire.js";

const ROLE_LABELS = { user: "User", assistant: "Assistant", system: "System", tool: "Tool", context: "Context" };
const PREVIEW_CHARS = 120;
const INERT_TYPES = /^(text\/plain|text\/csv|application\/json|application\/pdf|image\/(png|jpeg|gif|webp|avif))(;|$)/i;

// --- helpers that need no libraries ----------------------------------------------------------

function make(doc, tag, attrs = {}, ...children) {
  const node = doc.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

/** Create an element of this document: attrs.class, attrs.text (textContent) and plain attributes. */
export function el(tag, attrs = {}, ...children) {
  return make(globalThis.document, tag, attrs, ...children);
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
  for (const hidden of copy.querySelectorAll("[aria-hidden=true], .code-head, .katex-html")) hidden.remove();
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

export function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/**
 * The "result: message 6" link of a call (or "waiting for the result"). People count messages
 * from 1: the label says index + 1, while ids and data-target keep the 0-based index.
 */
export function resultLink(resultIndex, doc = globalThis.document) {
  if (resultIndex === undefined) return make(doc, "span", { class: "hint", text: "waiting for the result…" });
  return make(doc, "a", { href: `#m-${resultIndex}`, "data-action": "reveal", "data-target": String(resultIndex), text: `result: message ${resultIndex + 1}` });
}

// --- math ------------------------------------------------------------------------------------
//
// As chat UIs do: $$...$$ and \[...\] are display math, $...$ and \(...\) inline math. A `$`
// opens only when a non-space follows it, and closes only after a non-space and before a
// non-digit, so that "$5 and $10" stays prices.

const INLINE_MATH = [
  [/^\$\$(?!\$)((?:\\[\s\S]|[^\\$])+?)\$\$/, true],
  [/^\$(?![\s$])((?:\\[\s\S]|[^\\$\n])*?[^\\\s$])\$(?!\d)/, false],
  [/^\$(?![\s$])([^\\\s$])\$(?!\d)/, false],
  [/^\\\[((?:\\(?!\])|[^\\])+?)\\\]/, true],
  [/^\\\(((?:\\(?!\))|[^\\\n])+?)\\\)/, false],
];
const BLOCK_MATH = [
  /^ {0,3}\$\$(?!\$)((?:\\[\s\S]|[^\\$])+?)\$\$[ \t]*(?:\n+|$)/,
  /^ {0,3}\\\[((?:\\(?!\])|[^\\])+?)\\\][ \t]*(?:\n+|$)/,
];
const MATH_HINT = /\$|\\[([]/;

const mathExtensions = (escapeHtml) => [
  {
    name: "mathBlock",
    level: "block",
    start: (src) => src.match(/^ {0,3}(\$\$|\\\[)/m)?.index,
    tokenizer(src) {
      for (const rule of BLOCK_MATH) {
        const match = rule.exec(src);
        if (match && match[1].trim()) return { type: "mathBlock", raw: match[0], tex: match[1].trim() };
      }
      return undefined;
    },
    renderer: (token) => `<div class="math math-display">${escapeHtml(token.tex)}</div>\n`,
  },
  {
    name: "mathInline",
    level: "inline",
    start: (src) => src.match(/\$|\\[([]/)?.index,
    tokenizer(src) {
      for (const [rule, display] of INLINE_MATH) {
        const match = rule.exec(src);
        if (match && match[1].trim()) return { type: "mathInline", raw: match[0], tex: match[1].trim(), display };
      }
      return undefined;
    },
    renderer: (token) => `<span class="math ${token.display ? "math-display" : "math-inline"}">${escapeHtml(token.tex)}</span>`,
  },
];

// --- the renderer ----------------------------------------------------------------------------

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (ch) => ESCAPES[ch]);

/**
 * Text without any of these is one plain paragraph in Markdown: punctuation with a meaning,
 * line breaks, autolinks (GFM links bare URLs and e-mail addresses), list markers, indented
 * code at the start, and math.
 */
const MARKDOWN_SYNTAX = /[\\`*_~[\]<>&#|!\n\r=$]|https?:|www\.|@|^\s*([-+]|\d+[.)])|^( {4}|\t)/i;

/** Everything that Markdown (and math) can produce, and nothing else. */
const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "img", "input", "li", "ol", "p", "pre", "span", "strong", "table", "tbody", "td", "th", "thead",
  "tr", "ul",
];
const ALLOWED_ATTR = ["align", "alt", "checked", "class", "disabled", "href", "src", "start", "title", "type"];
const LANGUAGE_CLASS = /^language-[\w+#.-]{1,40}$/;
const HLJS_CLASS = /^hljs-[\w -]{1,60}$/; // spans exist only in highlight.js output
const MATH_CLASS = /^math math-(inline|display)$/;
const LINK_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);
const IMAGE_PROTOCOLS = new Set(["http:", "https:"]);
const LANGUAGES = [
  "bash", "c", "cpp", "css", "diff", "go", "java", "javascript", "json", "markdown",
  "plaintext", "python", "rust", "shell", "sql", "typescript", "xml", "yaml",
];
const MAX_HIGHLIGHT_CHARS = 20_000; // longer blocks stay plain: colour is not worth a long task
const MAX_MATH_CHARS = 5_000;

/**
 * A renderer for one document.
 *
 * @param {object} options
 * @param {Function} options.Marked marked's `Marked` class (`import { Marked } from "marked"`)
 * @param {Function|object} options.DOMPurify DOMPurify's default export
 * @param {Window} [options.window] the window to build in (default: globalThis.window)
 * @param {object} [options.hljs] a highlight.js instance: code blocks are coloured at once
 * @param {() => Promise<object>} [options.loadHighlighter] or one loaded on the first code block
 * @param {object} [options.katex] KaTeX: math is typeset at once
 * @param {() => Promise<object>} [options.loadKatex] or KaTeX loaded on the first formula
 * @param {boolean} [options.remoteImages] load Markdown images from other servers (default: no,
 *   they become links)
 */
export function createRenderer(options = {}) {
  const { Marked, DOMPurify } = options;
  if (typeof Marked !== "function") throw new TypeError("createRenderer needs options.Marked (marked's Marked class)");
  if (!DOMPurify) throw new TypeError("createRenderer needs options.DOMPurify");
  const win = options.window ?? globalThis.window;
  const doc = win.document;
  const remoteImages = Boolean(options.remoteImages);
  const h = (tag, attrs, ...children) => make(doc, tag, attrs, ...children);

  const marked = new Marked({
    gfm: true,
    breaks: true, // a line break typed in a message is a line break, as in GitHub comments
    async: false,
    renderer: {
      // Raw HTML is text: "<b>hi</b>" shows the tags, it does not make "hi" bold.
      html({ text, block }) {
        const shown = escapeHtml(text.replace(/\n+$/, "")).replace(/\n/g, "<br>");
        return block ? `<p>${shown}</p>\n` : shown;
      },
    },
    extensions: mathExtensions(escapeHtml),
  });

  /** The URL's protocol as the browser would resolve it ("" if it does not parse). */
  const protocolOf = (url) => {
    try {
      return new URL(url, doc.baseURI).protocol;
    } catch {
      return "";
    }
  };

  const purify = DOMPurify(win); // an instance of our own: its hooks touch no one else's
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeType !== 1) return;
    const tag = node.nodeName;
    const cls = node.getAttribute("class");
    if (
      cls !== null &&
      !((tag === "CODE" && LANGUAGE_CLASS.test(cls)) ||
        (tag === "SPAN" && (HLJS_CLASS.test(cls) || MATH_CLASS.test(cls))) ||
        (tag === "DIV" && MATH_CLASS.test(cls)))
    ) {
      node.removeAttribute("class");
    }
    if (tag === "A") {
      const href = node.getAttribute("href");
      if (href === null || !LINK_PROTOCOLS.has(protocolOf(href))) {
        node.removeAttribute("href"); // unwrapped below: the words stay, the link goes
      } else {
        node.setAttribute("rel", "noopener noreferrer nofollow");
        node.setAttribute("target", "_blank");
      }
    } else if (tag === "IMG") {
      const src = node.getAttribute("src");
      if (src === null || !IMAGE_PROTOCOLS.has(protocolOf(src))) node.removeAttribute("src");
      else if (!remoteImages) {
        // Never a src to load, not even in passing: made a link below.
        node.setAttribute("data-remote-src", src);
        node.removeAttribute("src");
      }
      node.setAttribute("loading", "lazy");
      node.setAttribute("decoding", "async");
      node.setAttribute("referrerpolicy", "no-referrer");
    } else if (tag === "INPUT") {
      // Task list boxes only, and they show state: they cannot be ticked.
      node.setAttribute("type", "checkbox");
      node.setAttribute("disabled", "");
    }
  });
  const PURIFY_OPTIONS = {
    ALLOWED_TAGS,
    ALLOWED_ATTR,
    ALLOW_DATA_ATTR: false,
    ALLOW_ARIA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };

  /** A link to an image the page does not load: "[image: alt]", opened only when clicked. */
  function remoteImageLink(url, alt) {
    const a = doc.createElement("a");
    a.href = url;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    a.referrerPolicy = "no-referrer";
    a.className = "remote-image";
    a.title = `Image on another server, not loaded: ${url}`;
    a.textContent = alt ? `[image: ${alt}]` : "[image]";
    return a;
  }

  // -- libraries loaded on first use -----------------------------------------------------

  let highlighter = options.hljs ? Promise.resolve(options.hljs) : null;
  const loadHighlighter = () => {
    if (!highlighter && options.loadHighlighter) highlighter = Promise.resolve().then(options.loadHighlighter);
    return highlighter;
  };
  let katexLoading = null;
  const loadKatex = () => {
    if (!katexLoading && options.loadKatex) {
      katexLoading = Promise.resolve().then(options.loadKatex);
      katexLoading.then((k) => { katex = k; }, () => {});
    }
    return katexLoading;
  };
  let katex = options.katex ?? null;

  function highlight(hljs, code, language, text) {
    if (!hljs.getLanguage(language) || code.textContent !== text) return;
    const html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
    // highlight.js escapes the text it wraps; sanitizing again costs little and trusts nothing.
    code.replaceChildren(purify.sanitize(html, { ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], RETURN_DOM_FRAGMENT: true }));
    code.classList.add("hljs");
  }

  function queueHighlight(code, language) {
    const text = code.textContent;
    if (text.length > MAX_HIGHLIGHT_CHARS) return;
    if (options.hljs) {
      highlight(options.hljs, code, language, text);
      return;
    }
    loadHighlighter()?.then((hljs) => highlight(hljs, code, language, text), () => {}); // no colours, same text
  }

  function typeset(node) {
    const tex = node.textContent;
    if (tex.length > MAX_MATH_CHARS) return;
    const display = node.classList.contains("math-display");
    try {
      katex.render(tex, node, {
        displayMode: display,
        throwOnError: false, // a formula KaTeX cannot read shows as its source, in red
        trust: false,
        strict: "ignore",
        output: "htmlAndMathml", // MathML for screen readers, HTML for the eye
        maxSize: 20,
        maxExpand: 200,
      });
      node.classList.add("typeset");
      node.setAttribute("title", tex);
    } catch {
      node.textContent = tex; // as written
    }
  }

  function queueMath(nodes) {
    if (katex) {
      for (const node of nodes) typeset(node);
      return;
    }
    loadKatex()?.then(() => {
      for (const node of nodes) typeset(node);
    }, () => {}); // TeX stays as written
  }

  function wrapCodeBlock(pre) {
    const code = pre.querySelector("code");
    const match = /^language-(.+)$/.exec(code?.getAttribute("class") ?? "");
    const language = match ? match[1] : "";
    const block = h("div", { class: "code-block" },
      h("div", { class: "code-head" },
        h("span", { class: "code-lang", text: language || "code" }),
        h("button", { type: "button", class: "copy", "data-action": "copy", "aria-label": `Copy ${language || "code"} code`, text: "Copy" })));
    pre.tabIndex = 0; // long lines scroll sideways
    pre.replaceWith(block);
    block.append(pre);
    if (language && code && (options.hljs || options.loadHighlighter)) queueHighlight(code, language);
  }

  /**
   * The Markdown text as a sanitized DocumentFragment. Code blocks come wrapped with their
   * language and a copy button (a button with data-action="copy").
   */
  function markdownFragment(text) {
    text = String(text ?? "");
    if (!MARKDOWN_SYNTAX.test(text)) {
      // Plain words (most chat turns): the paragraph Markdown would make, without parsing.
      const fragment = doc.createDocumentFragment();
      if (text.trim()) fragment.append(h("p", { text: text.trim() }));
      return fragment;
    }
    const html = marked.parse(text);
    const fragment = purify.sanitize(html, PURIFY_OPTIONS);
    for (const node of [...fragment.childNodes]) {
      if (node.nodeType === 3 && !node.data.trim()) node.remove(); // newlines between blocks
    }
    for (const a of fragment.querySelectorAll("a:not([href])")) a.replaceWith(...a.childNodes);
    for (const img of fragment.querySelectorAll("img[data-remote-src]")) {
      img.replaceWith(remoteImageLink(img.getAttribute("data-remote-src"), img.getAttribute("alt")));
    }
    for (const img of fragment.querySelectorAll("img:not([src])")) {
      const alt = img.getAttribute("alt");
      img.replaceWith(doc.createTextNode(alt ? `[image: ${alt}]` : "[image]"));
    }
    for (const table of fragment.querySelectorAll("table")) {
      const wrap = h("div", { class: "table-wrap", tabindex: "0" }); // wide tables scroll sideways
      table.replaceWith(wrap);
      wrap.append(table);
    }
    for (const pre of fragment.querySelectorAll("pre")) wrapCodeBlock(pre);
    if (MATH_HINT.test(text)) {
      const math = [...fragment.querySelectorAll(".math")];
      if (math.length && (katex || options.loadKatex)) queueMath(math);
    }
    return fragment;
  }

  /** The Markdown text as sanitized HTML (code coloured and math typeset only with options.hljs and options.katex). */
  function renderMarkdown(text) {
    const box = doc.createElement("div");
    box.append(markdownFragment(text));
    return box.innerHTML;
  }

  /** A code block like Markdown's, for JSON and tool output (same copy button, same colours). */
  function codeBlock(text, language) {
    const fence = "`".repeat(Math.max(3, ...[...String(text).matchAll(/`+/g)].map((m) => m[0].length + 1)));
    return markdownFragment(`${fence}${language}\n${text}\n${fence}`);
  }

  /**
   * One message as an <li>.
   *   index: its place in the transcript (0-based; shown to people from 1); null: none
   *   tools.callOf(id) -> {index, name} | undefined: the call a tool result answers;
   *   tools.resultOf(id) -> index | undefined: the result that answered a call;
   *   blobUrls: a Set that receives the blob: URLs made for attachments (revoke them later);
   *   draft: true for a message still being written (typing indicator, aria-busy).
   */
  function renderMessage(message, context = {}) {
    const index = Number.isInteger(context.index) ? context.index : null;
    const role = typeof message?.role === "string" ? message.role : "unknown";
    const draft = Boolean(context.draft);
    const item = h("li", {
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
        h("details", { class: "folded" },
          h("summary", {},
            h("span", { class: "role", text: what }),
            h("span", { class: "preview", text: oneLine(textOf(message)) || "(no text)" })),
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
    return h("div", { class: "who" },
      h("span", { class: "role", text: ROLE_LABELS[role] ?? role }),
      typeof message.name === "string" && message.name ? h("span", { class: "name", text: message.name }) : null,
      draft
        ? h("span", { class: "typing", role: "img", "aria-label": "writing…" },
          h("span", {}), h("span", {}), h("span", {}))
        : null,
    );
  }

  function body(message, index, context) {
    const node = h("div", { class: "body" });
    const content = message.content;
    if (typeof content === "string") {
      if (content) node.append(h("div", { class: "text md" }, markdownFragment(content)));
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
      node.append(h("ul", { class: "tool-calls" }, ...calls.map((call) => toolCall(call, context))));
    }
    return node;
  }

  function toolCall(call, context) {
    const pretty = prettyJson(call.args) ?? String(call.args);
    const resultIndex = call.id ? context.tools?.resultOf(call.id) : undefined;
    return h("li", { class: "tool-call", "data-call-id": call.id },
      h("details", {},
        h("summary", {},
          h("span", { class: "verb", text: "called " }),
          h("code", { class: "tool-name", text: call.name }),
          " ",
          h("span", { class: "args", text: oneLine(compactArgs(call.args), 100) })),
        codeBlock(pretty, "json")),
      // Without `tools` nothing is known about results: no status at all.
      context.tools ? h("span", { class: "tool-status" }, resultLink(resultIndex, doc)) : null,
    );
  }

  function toolResult(message, index, context) {
    const call = message.tool_call_id ? context.tools?.callOf(message.tool_call_id) : undefined;
    const text = textOf(message);
    const pretty = prettyJson(text);
    const node = h("details", { class: "tool-result" },
      h("summary", {},
        h("span", { class: "role", text: "Result" }),
        call ? h("span", {}, " of ", h("code", { class: "tool-name", text: call.name })) : null,
        typeof message.name === "string" && message.name && !call
          ? h("span", {}, " of ", h("code", { class: "tool-name", text: message.name }))
          : null,
        h("span", { class: "preview", text: oneLine(text, 100) || "(empty)" })),
      pretty !== null ? codeBlock(pretty, "json") : body(message, index, context),
    );
    const wrap = h("div", { class: "tool-result-wrap" }, node);
    if (call) {
      wrap.append(h("a", { class: "call-link", href: `#m-${call.index}`, "data-action": "reveal", "data-target": String(call.index), text: `call: message ${call.index + 1}` }));
    }
    return wrap;
  }

  function about(message, index) {
    const rows = index === null ? [] : [["message", `#${index + 1}`]];
    rows.push(["role", String(message.role)]);
    if (message.name) rows.push(["name", String(message.name)]);
    if (message.tool_call_id) rows.push(["tool call id", String(message.tool_call_id)]);
    const list = h("dl", {}, ...rows.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]));
    const panel = h("div", { class: "about-panel" }, list);
    if (message.metadata !== undefined) {
      panel.append(h("p", { class: "about-title", text: "metadata" }), codeBlock(JSON.stringify(message.metadata, null, 2), "json"));
    }
    return h("details", { class: "about" },
      h("summary", { "aria-label": index === null ? "About this message" : `About message ${index + 1}`, title: "About this message" },
        h("span", { "aria-hidden": "true", text: "⋯" })),
      panel);
  }

  function safeImageUrl(url) {
    return typeof url === "string" && /^(https?:|data:image\/|blob:)/i.test(url);
  }

  function partNode(part, index, n, context) {
    if (part?.type === "text") return h("div", { class: "text md" }, markdownFragment(part.text));
    if (part?.type === "image_url") {
      const url = part.image_url?.url;
      if (!safeImageUrl(url)) return h("p", { class: "hint", text: "(an image with an unsupported URL)" });
      const alt = index === null ? `Image ${n + 1} of the ${context.draft ? "draft" : "message"}` : `Image ${n + 1} of message #${index + 1}`;
      if (!remoteImages && /^https?:/i.test(url)) return h("p", { class: "image" }, remoteImageLink(url, alt));
      return h("figure", { class: "image" },
        h("img", { src: url, alt, loading: "lazy", decoding: "async", referrerpolicy: "no-referrer" }));
    }
    if (part?.type === "attachment") {
      const bytes = attachmentBytes(part);
      const mime = typeof part.mime === "string" && part.mime ? part.mime : "application/octet-stream";
      // The blob is served under the page's origin: only types that cannot run anything keep
      // their type (an HTML or SVG attachment opened in a tab must not become a page there).
      const url = win.URL.createObjectURL(new win.Blob([bytes], { type: INERT_TYPES.test(mime) ? mime : "application/octet-stream" }));
      context.blobUrls?.add(url);
      const name = typeof part.name === "string" && part.name ? part.name : "attachment";
      return h("p", { class: "attachment" },
        h("a", { href: url, download: name, text: `⬇ ${name}` }),
        h("span", { class: "hint", text: ` ${mime}, ${formatSize(bytes.length)}` }));
    }
    return h("pre", { class: "unknown-part", text: JSON.stringify(part, null, 2) });
  }

  return { markdownFragment, renderMarkdown, renderMessage, remoteImageLink, resultLink: (i) => resultLink(i, doc) };
}

/** The highlight.js languages the chat page registers (its vendored grammars). */
export const HIGHLIGHT_LANGUAGES = LANGUAGES;
