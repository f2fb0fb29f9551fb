// Types of @transcript-sync/client/render (render.js): one chat message as the chat page shows it.
// The libraries are passed in; their types here are only the parts render.js calls, so that
// this file needs none of their packages.

import type { Message } from "./client.js";

/** marked's `Marked` class (`import { Marked } from "marked"`, marked 13 or later). */
export type MarkedClass = new (...options: any[]) => { parse(text: string): string | Promise<string> };

/** DOMPurify's default export (`import DOMPurify from "dompurify"`, 3.1 or later). */
export type DOMPurifyFactory = (window: Window) => {
  sanitize(dirty: string, config: Record<string, unknown>): unknown;
  addHook(entryPoint: "afterSanitizeAttributes", hook: (node: Element) => void): void;
};

/** A highlight.js instance (`import hljs from "highlight.js"`), with the languages it knows. */
export interface Highlighter {
  getLanguage(name: string): unknown;
  highlight(code: string, options: { language: string; ignoreIllegals?: boolean }): { value: string };
}

/** KaTeX (`import katex from "katex"`, 0.16 or later); its CSS and fonts are the app's to load. */
export interface Katex {
  render(tex: string, element: HTMLElement, options?: Record<string, unknown>): void;
}

export interface RendererOptions {
  /** marked's `Marked` class. Required. */
  Marked: MarkedClass;
  /** DOMPurify's default export. Required. */
  DOMPurify: DOMPurifyFactory;
  /** The window to build elements in (default: globalThis.window; a jsdom window works too). */
  window?: Window;
  /** Colour code blocks at once with this highlight.js instance. */
  hljs?: Highlighter;
  /** Or load highlight.js on the first code block with a language (colours arrive later). */
  loadHighlighter?: () => Promise<Highlighter>;
  /** Typeset math at once with KaTeX. Without katex or loadKatex, math shows as its TeX. */
  katex?: Katex;
  /** Or load KaTeX on the first formula (the TeX shows until then). */
  loadKatex?: () => Promise<Katex>;
  /** Load Markdown images from other servers (default false: they become links). */
  remoteImages?: boolean;
}

/** Where a tool call and its result are: the page's timeline keeps these maps. */
export interface ToolIndex {
  /** The call a tool result answers: its message index and the tool's name. */
  callOf(id: string): { index: number; name: string } | undefined;
  /** The index of the message that answered a call. */
  resultOf(id: string): number | undefined;
}

export interface RenderMessageOptions {
  /** The message's place in the transcript (0-based; labels show it from 1). */
  index?: number | null;
  /** Links between tool calls and results; without it a call shows no result status. */
  tools?: ToolIndex;
  /** Receives the blob: URLs made for attachments: revoke them when the element goes. */
  blobUrls?: Set<string>;
  /** A message still being written: typing dots, aria-busy, no metadata toggle. */
  draft?: boolean;
}

export interface Renderer {
  /** One message as an <li class="message role-...">: Markdown, math, images, attachments, tool calls and results. */
  renderMessage(message: Message | Record<string, unknown>, options?: RenderMessageOptions): HTMLLIElement;
  /** Markdown (with math) as a sanitized fragment; code blocks carry a copy button (data-action="copy"). */
  markdownFragment(text: string): DocumentFragment;
  /** Markdown (with math) as a sanitized HTML string; colours and typeset math only with `hljs` and `katex`. */
  renderMarkdown(text: string): string;
  /** A link to an image that is not loaded: "[image: alt]". */
  remoteImageLink(url: string, alt: string | null): HTMLAnchorElement;
  /** The "result: message N" link of a tool call (or "waiting for the result…"). */
  resultLink(resultIndex: number | undefined): HTMLElement;
}

/** A renderer for one window, with the libraries it uses. */
export function createRenderer(options: RendererOptions): Renderer;

/** The highlight.js languages the chat page registers. */
export const HIGHLIGHT_LANGUAGES: readonly string[];

/** Create an element of this document: attrs.class, attrs.text (textContent), other attributes. */
export function el(tag: string, attrs?: Record<string, string | boolean | null | undefined>, ...children: (Node | string | null | undefined | false)[]): HTMLElement;
/** The text parts of a message, joined. */
export function textOf(message: { content?: unknown } | null | undefined): string;
/** The words a rendered element shows, on one line, cut at `limit` characters. */
export function readableText(node: Node, limit?: number): string;
/** Text on one line, whitespace collapsed, cut at `limit` characters with "…". */
export function oneLine(text: unknown, limit?: number): string;
/** The tool calls of a message: [{id, name, args}] (args as sent, usually a JSON string). */
export function toolCallsOf(message: unknown): { id: string; name: string; args: unknown }[];
/** Tool arguments as people read them: {city: "Paris"}; the raw text if they are not JSON. */
export function compactArgs(args: unknown): string;
/** The names of the files among a message's parts ("*image*": it has an image). */
export function fileNames(parts: unknown[]): Set<string>;
/** Text without the LMML inline fences of the files it carries as parts. */
export function withoutFences(text: string, files: Set<string>): string;
/** "12 B", "3.4 KiB", "1.2 MiB". */
export function formatSize(bytes: number): string;
/** The "result: message N" link of a tool call, in this document. */
export function resultLink(resultIndex: number | undefined, doc?: Document): HTMLElement;
