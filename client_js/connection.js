// What the client's connection needs around it: the reconnect backoff,
// idempotency keys, the server's URLs (WebSocket and HTTP) from any form of
// it, and the error of an error frame.

// --- backoff ----------------------------------------------------------------------

/**
 * Exponential backoff with full jitter: a uniform delay in
 * [0, min(maxMs, initialMs * 2^attempt)). attempt counts from 0.
 */
export function backoffDelay(attempt, { initialMs = 250, maxMs = 5000, random = Math.random } = {}) {
  const cap = Math.min(maxMs, initialMs * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * cap);
}

/** A fresh idempotency key: crypto.randomUUID where there is one. */
export function newIdempotencyKey() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  // randomUUID needs a secure context; getRandomValues does not.
  const bytes = new Uint8Array(16);
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(bytes);
  else for (let i = 0; i < 16; i += 1) bytes[i] = Math.floor(Math.random() * 256);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// --- the client ---------------------------------------------------------------------

/** Most messages one GET .../messages answers (protocol.limits.MAX_READ_MESSAGES). */
export const READ_MAX = 1000;

const WS_PATH = "/v1/ws";
/** The schemes a server URL may have, and the WebSocket's and HTTP's scheme of each. */
const URL_SCHEMES = {
  "http:": ["ws:", "http:"],
  "https:": ["wss:", "https:"],
  "ws:": ["ws:", "http:"],
  "wss:": ["wss:", "https:"],
};
const URL_FORMS = "http(s)://host[:port][/base] or ws(s)://host[:port][/base][/v1/ws]";

/**
 * The WebSocket URL and the HTTP base of a server given by any URL the Python client takes
 * (client_py.http.endpoints): http(s)://host[:port][/base], the form of the CLI and the
 * READMEs, gives ws(s)://host[:port][/base]/v1/ws; ws(s)://host[:port][/base], with or without
 * /v1/ws, gives http(s)://host[:port][/base]. A ws(s) URL keeps its query, a fragment is
 * dropped. Anything else (another scheme, no scheme, a relative URL, a user or password in
 * the URL) throws a TypeError at once: given to a WebSocket it would only fail to connect,
 * again and again. `what` names the argument in the error.
 */
export function serverUrls(url, what = "url") {
  const text = url instanceof URL ? url.href : url;
  if (typeof text !== "string") throw new TypeError(`${what}: expected the server's URL, ${URL_FORMS}, not ${url === null ? "null" : typeof url}`);
  let parsed = null;
  try {
    parsed = new URL(text.trim());
  } catch {
    // not an absolute URL: refused below
  }
  if (parsed === null || !Object.hasOwn(URL_SCHEMES, parsed.protocol) || !parsed.host) {
    throw new TypeError(`${what}: expected the server's URL, ${URL_FORMS}, not ${JSON.stringify(text)}`);
  }
  if (parsed.username || parsed.password) {
    // Not echoed: the URL holds a secret. fetch() refuses such URLs, and a token goes in getToken.
    throw new TypeError(`${what}: no user or password in the server's URL (${URL_FORMS}); give the client a token or getToken`);
  }
  const [wsScheme, httpScheme] = URL_SCHEMES[parsed.protocol];
  let path = parsed.pathname.replace(/\/+$/, "");
  const base = path.endsWith(WS_PATH) ? path.slice(0, -WS_PATH.length) : path;
  path = `${base}${WS_PATH}`;
  const query = parsed.protocol.startsWith("ws") ? parsed.search : "";
  return { ws: `${wsScheme}//${parsed.host}${path}${query}`, http: `${httpScheme}//${parsed.host}${base}` };
}

/** The HTTP base of a server given any URL TsyncClient takes (ws(s)://host/.../v1/ws, http(s)://host/...). */
export function httpBase(url) {
  return serverUrls(url).http;
}

/** Raised (as a rejected append) when the server answered with an error frame. */
export class ServerError extends Error {
  constructor(frame) {
    super(`${frame.code}: ${frame.message}`);
    this.name = "ServerError";
    this.code = frame.code;
    this.frame = frame;
  }
}
