// The page's renderer: @transcript-sync/client/render (client_js/render.js, served at
// /v1/render.js) with the libraries vendored under ./vendor. One copy of the rendering: an app
// that imports the npm package shows a message as this page does.
//
// highlight.js is loaded on first use: the first fenced code block with a language.

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
});

/** Markdown text as a sanitized DocumentFragment (code blocks with a copy button). */
export const { markdownFragment, remoteImageLink } = renderer;

/** One message as an <li>: `index` its place in the transcript (null for a draft). */
export function renderMessage(message, index, context = {}) {
  return renderer.renderMessage(message, { ...context, index });
}
