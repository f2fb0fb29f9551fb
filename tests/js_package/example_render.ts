// @transcript-sync/client/render as a TypeScript user writes it (checked, not run: see
// example.ts). The libraries' own types are not needed: render.d.ts names what it calls.
import {
  HIGHLIGHT_LANGUAGES,
  compactArgs,
  createRenderer,
  el,
  fileNames,
  formatSize,
  oneLine,
  readableText,
  resultLink,
  textOf,
  toolCallsOf,
  withoutFences,
  type Katex,
  type Renderer,
  type RendererOptions,
} from "@transcript-sync/client/render";

declare const Marked: RendererOptions["Marked"];
declare const DOMPurify: RendererOptions["DOMPurify"];
declare const katex: Katex;

const render: Renderer = createRenderer({
  Marked,
  DOMPurify,
  katex,
  loadHighlighter: async () => ({ getLanguage: () => undefined, highlight: (code: string) => ({ value: code }) }),
  remoteImages: false,
});
const blobUrls = new Set<string>();
const item: HTMLLIElement = render.renderMessage(
  { role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
  { index: 0, blobUrls, tools: { callOf: () => undefined, resultOf: () => 1 } },
);
const html: string = render.renderMarkdown("**bold** and $x^2$");
const fragment: DocumentFragment = render.markdownFragment("# title");
const link: HTMLAnchorElement = render.remoteImageLink("https://example.invalid/a.png", null);
const words: string = readableText(item, 80) + oneLine(textOf({ content: "x" })) + compactArgs("{}") + formatSize(3);
const calls: { id: string; name: string }[] = toolCallsOf({ tool_calls: [] });
const names: Set<string> = fileNames([]);
const kept: string = withoutFences("text", names);
const languages: readonly string[] = HIGHLIGHT_LANGUAGES;
document.body.append(item, fragment, link, el("p", { class: "x", text: words }), resultLink(undefined), render.resultLink(2));
console.log(html, calls, kept, languages);

// @ts-expect-error Marked is required
createRenderer({ DOMPurify });
// @ts-expect-error the index is a number
render.renderMessage({ role: "user", content: "hi" }, { index: "1" });
