// Message text as Markdown (CommonMark + GFM tables, strikethrough, task lists), made safe.
//
// marked turns the text into HTML; raw HTML in the text is escaped (shown as text, never
// parsed); DOMPurify then parses the result in an inert document, keeps only the elements
// Markdown produces and returns a fragment of this document. Links keep http(s) and mailto
// targets only and open in a new tab with rel="noopener noreferrer"; Markdown images keep
// http(s) sources only (data: and blob: images are shown as their alt text: the page renders
// images of attachments and image_url parts itself, see messages.js), and only when the server
// lets the page load remote images (page_remote_images): otherwise they become links, so that
// whoever wrote a message cannot learn who reads it. Code blocks get a header with the language
// and a copy button; highlight.js colours them later, loaded on first use.

import { Marked } from "./vendor/marked/marked.esm.js";
import DOMPurify from "./vendor/dompurify/purify.es.mjs";

/** Whether the server lets the page load images from other servers (<html data-remote-images>). */
export const REMOTE_IMAGES = globalThis.document?.documentElement?.dataset?.remoteImages === "on";

/** A link to an image the page does not load: "[image: alt]", opened only when clicked. */
export function remoteImageLink(url, alt) {
  const a = document.createElement("a");
  a.href = url;
  a.target = "_blank";
  a.rel = "noopener noreferrer";
  a.referrerPolicy = "no-referrer";
  a.className = "remote-image";
  a.title = `Image on another server, not loaded: ${url}`;
  a.textContent = alt ? `[image: ${alt}]` : "[image]";
  return a;
}

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (ch) => ESCAPES[ch]);

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
});

/**
 * Text without any of these is one plain paragraph in Markdown: punctuation with a meaning,
 * line breaks, autolinks (GFM links bare URLs and e-mail addresses), list markers and
 * indented code at the start.
 */
const MARKDOWN_SYNTAX = /[\\`*_~[\]<>&#|!\n\r=]|https?:|www\.|@|^\s*([-+]|\d+[.)])|^( {4}|\t)/i;

/** Everything that Markdown can produce, and nothing else. */
const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "img", "input", "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead",
  "tr", "ul",
];
const ALLOWED_ATTR = ["align", "alt", "checked", "class", "disabled", "href", "src", "start", "title", "type"];
const LANGUAGE_CLASS = /^language-[\w+#.-]{1,40}$/;
const HLJS_CLASS = /^hljs-[\w -]{1,60}$/; // spans exist only in highlight.js output
const LINK_PROTOCOLS = new Set(["http:", "https:", "mailto:"]);
const IMAGE_PROTOCOLS = new Set(["http:", "https:"]);

/** The URL's protocol as the browser would resolve it ("" if it does not parse). */
function protocolOf(url) {
  try {
    return new URL(url, document.baseURI).protocol;
  } catch {
    return "";
  }
}

const purify = DOMPurify(window); // an instance of our own: its hooks touch no one else's
purify.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeType !== Node.ELEMENT_NODE) return;
  const tag = node.nodeName;
  const cls = node.getAttribute("class");
  if (cls !== null && !((tag === "CODE" && LANGUAGE_CLASS.test(cls)) || (tag === "SPAN" && HLJS_CLASS.test(cls)))) {
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
    else if (!REMOTE_IMAGES) {
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

/**
 * The Markdown text as a sanitized DocumentFragment of this document. Code blocks come
 * wrapped with their language and a copy button (a button with data-action="copy").
 */
export function markdownFragment(text) {
  text = String(text ?? "");
  if (!MARKDOWN_SYNTAX.test(text)) {
    // Plain words (most chat turns): the paragraph Markdown would make, without parsing.
    const fragment = document.createDocumentFragment();
    if (text.trim()) {
      const p = document.createElement("p");
      p.textContent = text.trim();
      fragment.append(p);
    }
    return fragment;
  }
  const html = marked.parse(text);
  const fragment = purify.sanitize(html, PURIFY_OPTIONS);
  for (const node of [...fragment.childNodes]) {
    if (node.nodeType === Node.TEXT_NODE && !node.data.trim()) node.remove(); // newlines between blocks
  }
  for (const a of fragment.querySelectorAll("a:not([href])")) a.replaceWith(...a.childNodes);
  for (const img of fragment.querySelectorAll("img[data-remote-src]")) {
    img.replaceWith(remoteImageLink(img.getAttribute("data-remote-src"), img.getAttribute("alt")));
  }
  for (const img of fragment.querySelectorAll("img:not([src])")) {
    const alt = img.getAttribute("alt");
    img.replaceWith(document.createTextNode(alt ? `[image: ${alt}]` : "[image]"));
  }
  for (const table of fragment.querySelectorAll("table")) {
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    wrap.tabIndex = 0; // a wide table scrolls sideways; the keyboard must reach it
    table.replaceWith(wrap);
    wrap.append(table);
  }
  for (const pre of fragment.querySelectorAll("pre")) wrapCodeBlock(pre);
  return fragment;
}

/** The language a fenced code block declared ("" if none). */
function languageOf(code) {
  const match = /^language-(.+)$/.exec(code?.getAttribute("class") ?? "");
  return match ? match[1] : "";
}

function wrapCodeBlock(pre) {
  const code = pre.querySelector("code");
  const language = languageOf(code);
  const block = document.createElement("div");
  block.className = "code-block";
  const head = document.createElement("div");
  head.className = "code-head";
  const label = document.createElement("span");
  label.className = "code-lang";
  label.textContent = language || "code";
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy";
  copy.dataset.action = "copy";
  copy.textContent = "Copy";
  copy.setAttribute("aria-label", `Copy ${language || "code"} code`);
  head.append(label, copy);
  pre.tabIndex = 0; // long lines scroll sideways
  pre.replaceWith(block);
  block.append(head, pre);
  if (language && code) queueHighlight(code, language);
}

// --- syntax highlighting, loaded on first use -----------------------------------------------

const LANGUAGES = [
  "bash", "c", "cpp", "css", "diff", "go", "java", "javascript", "json", "markdown",
  "plaintext", "python", "rust", "shell", "sql", "typescript", "xml", "yaml",
];
const MAX_HIGHLIGHT_CHARS = 20_000; // longer blocks stay plain: colour is not worth a long task
let highlighter = null;

function loadHighlighter() {
  highlighter ??= Promise.all([
    import("./vendor/highlight/core.min.js"),
    ...LANGUAGES.map((name) => import(`./vendor/highlight/languages/${name}.min.js`)),
  ]).then(([core, ...grammars]) => {
    const hljs = core.default.newInstance();
    grammars.forEach((grammar, i) => hljs.registerLanguage(LANGUAGES[i], grammar.default));
    return hljs;
  });
  return highlighter;
}

function queueHighlight(code, language) {
  const text = code.textContent;
  if (text.length > MAX_HIGHLIGHT_CHARS) return;
  loadHighlighter().then(
    (hljs) => {
      if (!hljs.getLanguage(language) || code.textContent !== text) return;
      const html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
      // highlight.js escapes the text it wraps; sanitizing again costs little and trusts nothing.
      code.replaceChildren(purify.sanitize(html, { ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"], RETURN_DOM_FRAGMENT: true }));
      code.classList.add("hljs");
    },
    () => {}, // no colours, same text
  );
}
