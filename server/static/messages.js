// The page's renderer: @transcript-sync/client/render (client_js/render.js, served at
// /v1/render.js) with the libraries vendored under ./vendor. One copy of the rendering: an app
// that imports the npm package shows a message as this page does.
//
// highlight.js and KaTeX are loaded on first use: the first fenced code block with a language,
// the first formula.

import { Marked } from "./vendor/marked/marked.esm.js";
import DOMPurify from "./vendor/dompurify/purify.es.mjs";
import { HIGHLIGHT_LANGUAGES, createRenderer } from "/v1/render.js";

export { el, fileNames, oneLine, readableText, resultLink, textOf, toolCallsOf, withoutFences } from "/v1/render.js";

/** Whether the server lets the page load images from other servers (<html data-remote-images>). */
export const REMOTE_IMAGES = globalThis.document?.documentElement?.dataset?.remoteImages === "on";

const renderer = createRenderer({
  Marked,
  DOMPurify,
  remoteImages: REMOTE_IMAGES,
  loadHighlighter: async () => {
    const [core, ...grammars] = await Promise.all([
      import("./vendor/highlight/core.min.js"),
      ...HIGHLIGHT_LANGUAGES.map((name) => import(`./vendor/highlight/languages/${name}.min.js`)),
    ]);
    const hljs = core.default.newInstance();
    grammars.forEach((grammar, i) => hljs.registerLanguage(HIGHLIGHT_LANGUAGES[i], grammar.default));
    return hljs;
  },
  // KaTeX's browser build is a UMD script: imported, it sets globalThis.katex.
  loadKatex: async () => {
    await import("./vendor/katex/katex.min.js");
    return globalThis.katex;
  },
});

/** Markdown text as a sanitized DocumentFragment (code blocks with a copy button, math typeset). */
export const { markdownFragment, remoteImageLink } = renderer;

/** One message as an <li>: `index` its place in the transcript (null for a draft). */
export function renderMessage(message, index, context = {}) {
  return renderer.renderMessage(message, { ...context, index });
}
