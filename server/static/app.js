// The chat page: the conversations at "/" and one conversation, live, at "/t/{id}".
//
// It talks to the server like any other client: the HTTP API for the list and for creating,
// /v1/client.js (TsyncClient) for the live conversation and for sending. Rendering lives in
// timeline.js (the scrolling list) and messages.js (one message, safe Markdown: the npm package's
// render.js, served at /v1/render.js, with the vendored libraries).

import { TsyncClient } from "/v1/client.js";
import { el, fileNames, markdownFragment, oneLine, readableText, textOf, withoutFences } from "./messages.js";
import { Timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);

// --- the token ------------------------------------------------------------------------------
//
// From the URL's fragment (/t/x#token=...: a fragment is never sent to a server, so it does not
// end up in request lines or their logs), else from a form the page shows when the server asks
// for one. Kept in this tab's sessionStorage only (gone with the tab) and taken off the address
// bar at once.

const TOKEN_KEY = "tsync.token";

function takeTokenFromFragment() {
  const fragment = new URLSearchParams(location.hash.slice(1));
  const given = fragment.get("token");
  if (given === null) return;
  if (given) sessionStorage.setItem(TOKEN_KEY, given);
  else sessionStorage.removeItem(TOKEN_KEY);
  fragment.delete("token");
  const rest = fragment.toString();
  history.replaceState(history.state, "", `${location.pathname}${location.search}${rest ? `#${rest}` : ""}`);
}
takeTokenFromFragment();

// A #token= link opened in a tab already on the page changes only the fragment: no load. The
// new token is taken as at load, and the page starts again with it (as the token form does).
window.addEventListener("hashchange", () => {
  if (!new URLSearchParams(location.hash.slice(1)).has("token")) return;
  takeTokenFromFragment();
  location.reload();
});

const currentToken = () => sessionStorage.getItem(TOKEN_KEY);

/** Ask for a token (the server refused the request without one, or refused this one). */
function askForToken(why) {
  const form = $("token-form");
  $("token-why").textContent = why;
  form.hidden = false;
  if (!form.dataset.ready) {
    form.dataset.ready = "1";
    form.addEventListener("submit", (submit) => {
      submit.preventDefault();
      const value = $("token-input").value.trim();
      if (!value) return;
      sessionStorage.setItem(TOKEN_KEY, value);
      location.reload();
    });
  }
  $("token-input").focus();
}

/** fetch() with the bearer token; throws an Error carrying problem+json's detail and status. */
async function api(path, init = {}) {
  const headers = { Accept: "application/json", ...(init.headers ?? {}) };
  const token = currentToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...init, headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = body?.detail ?? body?.title ?? response.statusText;
    const error = new Error(`${response.status}: ${detail}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

/** What the server said of a refused request (problem+json's detail), as a sentence. */
function detailOf(err) {
  const detail = String(err?.message ?? "").replace(/^\d+: /, "");
  return /[.!?]$/.test(detail) ? detail : `${detail}.`;
}

function showView(id, mainId) {
  for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
  document.querySelector("a.skip").href = `#${mainId}`;
}

// --- the conversations ----------------------------------------------------------------------

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const STEPS = [[60, "second"], [60, "minute"], [24, "hour"], [7, "day"], [4.35, "week"], [12, "month"], [Infinity, "year"]];

/** "5 minutes ago", "yesterday", ... */
function ago(ms, now = Date.now()) {
  let amount = (ms - now) / 1000;
  for (const [size, unit] of STEPS) {
    if (Math.abs(amount) < size) return relative.format(Math.round(amount), unit);
    amount /= size;
  }
  return "";
}

async function showList() {
  showView("list-view", "main");
  document.title = "Conversations · transcript-sync";
  $("new-conversation").addEventListener("click", () => createTranscript(null));
  $("create-form").addEventListener("submit", (submit) => {
    submit.preventDefault();
    const input = $("new-id");
    if (!input.checkValidity()) {
      $("create-error").textContent = "An id is 1 to 128 letters, digits or . _ : -";
      input.focus();
      return;
    }
    createTranscript(input.value.trim());
  });
  $("refresh").addEventListener("click", loadList);
  await loadList();
}

async function loadList() {
  const state = $("list-state");
  const list = $("transcripts");
  state.textContent = "Loading…";
  try {
    // The newest 1000, newest first: the server orders (?order=updated).
    const { transcripts } = await api("/v1/transcripts?order=updated&limit=1000");
    list.replaceChildren(...transcripts.map(conversationItem));
    state.textContent = transcripts.length
      ? `${transcripts.length} conversation${transcripts.length === 1 ? "" : "s"}, newest first`
      : "No conversations yet: start one with “New conversation”.";
  } catch (err) {
    list.replaceChildren();
    if (err.status === 401) {
      // Said once, in the token form.
      state.textContent = "";
      askForToken(currentToken() ? `The server refused this token: ${detailOf(err)}` : "This server needs a token.");
    } else {
      state.textContent = `Could not load the conversations: ${err.message}`;
    }
  }
}

function conversationItem(t) {
  const title = typeof t.title === "string" && t.title.trim() ? oneLine(t.title, 80) : null;
  const preview = typeof t.preview === "string" ? oneLine(t.preview, 140) : "";
  const updated = Number(t.updatedAt);
  const when = Number.isFinite(updated)
    ? el("time", { datetime: new Date(updated).toISOString(), title: new Date(updated).toLocaleString(), text: ago(updated) })
    : null;
  const count = `${t.length} message${t.length === 1 ? "" : "s"}`;
  return el("li", { class: "conversation", "data-id": t.transcriptId },
    el("a", { href: `/t/${encodeURIComponent(t.transcriptId)}` },
      el("span", { class: title ? "conversation-title" : "conversation-title id", text: title ?? t.transcriptId }),
      preview ? el("span", { class: "conversation-preview", text: preview }) : null,
      el("span", { class: "conversation-meta" }, count, when ? " · " : null, when)));
}

async function createTranscript(id) {
  const error = $("create-error");
  error.textContent = "";
  try {
    const created = await api("/v1/transcripts", { method: "POST", body: JSON.stringify(id ? { id } : {}) });
    location.assign(`/t/${encodeURIComponent(created.transcriptId)}`);
  } catch (err) {
    error.textContent =
      err.status === 409
        ? `There is already a conversation “${id}”.`
        : err.status === 403
          ? "This token may not create conversations."
          : `Could not create it: ${err.message}`;
  }
}

// --- connection state -----------------------------------------------------------------------

const STATUS_TEXT = {
  idle: "Not connected",
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  resyncing: "Catching up…",
  resynced: "Live",
  closed: "Offline",
  unauthorized: "Not allowed",
  refused: "Not allowed",
};

/** The connection's transport: "websocket", or "sse" on the HTTP fallback (SSE reads, HTTP appends). */
let transport = "websocket";

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status").dataset.transport = transport;
  let shown = text ?? STATUS_TEXT[state] ?? state;
  // The WebSocket cannot be opened here: the client reads and writes over plain HTTP.
  if (transport === "sse" && (state === "live" || state === "resynced")) {
    shown = `${shown} (HTTP fallback)`;
  }
  $("status-text").textContent = shown;
}

// --- one conversation ---------------------------------------------------------------------

const TITLE_CHARS = 80;
/** The page holds the newest messages only, and fetches older ones as the reader scrolls up. */
const OPEN_WITH = { tail: 100 };

/**
 * The conversation's title: its first user message as plain text (what its Markdown reads as,
 * without an imported file's @@@ fence), on one line, trimmed; as the server's list says it.
 */
function titleOf(messages) {
  const first = messages.find((m) => m?.role === "user" && textOf(m).trim());
  if (!first) return null;
  const parts = Array.isArray(first.content) ? first.content : [];
  const text = withoutFences(textOf(first), fileNames(parts)).slice(0, TITLE_CHARS * 8 + 256);
  return readableText(markdownFragment(text), TITLE_CHARS) || null;
}

function renderTranscript(transcriptId) {
  showView("transcript-view", "main-chat");
  $("empty-id").textContent = transcriptId;
  let client = null;
  const timeline = new Timeline({
    scroller: $("main-chat"),
    list: $("messages"),
    drafts: $("drafts"),
    loader: $("loader"),
    jump: $("jump"),
    announcer: $("announcer"),
    composer: $("text"),
    loadEarlier: (count) => client.loadEarlier(transcriptId, count),
  });
  const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/ws`;
  // Asked before every connection and before the token's exp: a token pasted into the form
  // in another view of this tab is picked up.
  client = new TsyncClient(wsUrl, currentToken() ? { getToken: currentToken } : {});
  // For the console and the end-to-end tests.
  window.tsyncClient = client;
  window.tsyncPage = { timeline, client };
  let title = null;
  let ended = false; // no such conversation, or not allowed: statuses no longer matter
  let loaded = false; // "Live" only once there is something live to show

  const showTitle = () => {
    $("title").textContent = title ?? transcriptId;
    $("title").classList.toggle("id", title === null);
    document.title = `${title ?? transcriptId} · transcript-sync`;
  };
  showTitle();

  let probing = false;
  client.on("status", ({ state, delayMs, reason, transport: over }) => {
    if (ended) return;
    transport = over ?? "websocket";
    if (state === "unauthorized" || state === "refused") {
      ended = true;
      setStatus(state);
      if (state === "refused") {
        const why = `The server does not serve this page here (${reason}).`;
        $("transcript-error").textContent = why;
        refuseWrites(why);
      } else {
        // Why the server refused it, as its close reason says ("the token has expired").
        const said = /unauthorized: (.+)\)$/.exec(String(reason ?? ""))?.[1];
        askForToken(
          !currentToken()
            ? "This server needs a token."
            : said
              ? `The server refused this token: ${said}.`
              : "The server refused this token (it may have expired).",
        );
        refuseWrites("a token is needed first.");
      }
      return;
    }
    if (!loaded && (state === "live" || state === "resynced")) {
      setStatus("connecting", "Loading…");
      return;
    }
    let text = STATUS_TEXT[state];
    if ((state === "reconnecting" || state === "connecting") && delayMs !== undefined) {
      text = `${state === "connecting" ? "Cannot connect" : "Reconnecting"}: retry in ${Math.ceil(delayMs / 1000)} s${transport === "sse" ? " over HTTP" : ""}`;
      // A refused WebSocket handshake does not say why; the HTTP API does.
      if (!probing) {
        probing = true;
        probeAccess().finally(() => {
          probing = false;
        });
      }
    }
    setStatus(state, text);
    renderOutbox();
  });

  client.on("baseline", ({ mirror, epochChanged }) => {
    timeline.load(mirror);
    $("messages").parentElement.dataset.loaded = ""; // an empty conversation now says so
    title = mirror.start === 0 ? titleOf(mirror.messages) : title;
    if (mirror.start > 0 && (title === null || epochChanged)) findTitle(mirror.epoch);
    showTitle();
    if (epochChanged) {
      $("transcript-error").textContent = "This conversation was recreated on the server: showing its new history.";
    }
    renderMeta(mirror);
    if (!loaded) {
      loaded = true;
      if (client.state === "live" || client.state === "resynced") setStatus(client.state);
    }
  });

  client.on("earlier", ({ start, messages }) => {
    timeline.prepend(start, messages);
    if (title === null && start === 0) {
      title = titleOf(messages);
      showTitle();
    }
  });

  /** The title of a conversation opened at its newest messages: its first messages say it. */
  async function findTitle(epoch) {
    try {
      const first = await api(`/v1/transcripts/${encodeURIComponent(transcriptId)}/messages?start=0&end=50&epoch=${encodeURIComponent(epoch)}`);
      if (title === null) {
        title = titleOf(first.messages);
        showTitle();
      }
    } catch {
      // No title then: the id stands in for it.
    }
  }

  client.on("messages", ({ start, messages, mirror }) => {
    if (!timeline.append(start, messages)) {
      timeline.load(mirror);
    }
    if (title === null && mirror.start === 0) {
      title = titleOf(messages);
      showTitle();
    }
    renderMeta(mirror);
  });

  // Drafts: answers being written, shown growing below the messages with a typing indicator,
  // at most once per frame each; a committed one is swapped for its message in the same task
  // as the message was added (the "messages" event comes right before), so nothing flickers.
  const drawing = new Map(); // draftId -> the message to show at the next frame
  let frame = null;
  const drawDrafts = () => {
    frame = null;
    for (const [draftId, message] of drawing) timeline.showDraft(draftId, message);
    drawing.clear();
  };
  client.on("draft", ({ draftId, role, state, text }) => {
    if (state === "open") {
      drawing.set(draftId, { role, content: text });
      frame ??= requestAnimationFrame(drawDrafts);
      return;
    }
    drawing.delete(draftId);
    if (state === "final") timeline.commitDraft(draftId, timeline.length - 1);
    else timeline.dropDraft(draftId);
  });

  client.on("segment", ({ start, mirror }) => {
    timeline.segment(start);
    renderMeta(mirror);
  });

  client.on("stop", ({ code, message }) => {
    if (code === "not-found") {
      showMissing();
      return;
    }
    if (code === "unauthorized") {
      // Said once, in the token form (the connection's close says it too).
      askForToken(currentToken() ? `The server refused this token: ${message}` : "This server needs a token.");
      refuseWrites("a token is needed first.");
      setStatus("unauthorized");
      return;
    }
    refuseWrites(code === "forbidden" ? "You may not read this conversation." : message);
    setStatus("closed", "Not allowed");
    $("transcript-error").textContent = `${code}: ${message}`;
  });

  client.on("ack", () => renderOutbox());

  // A change whose digest was not the copy's: the client takes a fresh
  // baseline (the "baseline" event redraws); say it happened.
  client.on("error", ({ code, message, transcriptId: about }) => {
    if (code === "digest" && about === transcriptId) $("transcript-error").textContent = message;
  });

  /** No such conversation: say so, and nothing else (no composer, no "Live"). */
  function showMissing() {
    ended = true;
    client.close();
    showView("missing-view", "main-missing");
    $("missing-id").textContent = transcriptId;
    document.title = "No such conversation · transcript-sync";
  }

  /** Ask the HTTP API why the WebSocket fails: a wrong token or no such conversation. */
  async function probeAccess() {
    try {
      await api(`/v1/transcripts/${encodeURIComponent(transcriptId)}?start=0&end=0`);
    } catch (err) {
      if (err.status === 404) {
        showMissing();
      } else if (err.status === 401 || err.status === 403) {
        ended = true;
        client.close();
        setStatus("unauthorized");
        if (err.status === 403) {
          const why = "This token may not read this conversation.";
          $("transcript-error").textContent = why;
          refuseWrites(why);
        } else {
          askForToken(currentToken() ? `The server refused this token: ${detailOf(err)}` : "This server needs a token.");
          refuseWrites("a token is needed first.");
        }
      }
      // Anything else: the server is away; the client keeps trying.
    }
  }

  /** What this token may do here: read-only says so and quiets the composer. */
  async function checkAccess() {
    try {
      const info = await api(`/v1/auth?transcriptId=${encodeURIComponent(transcriptId)}`);
      const rights = info.transcript;
      if (rights && rights.read && !rights.write) {
        $("access").hidden = false;
        refuseWrites("this token may read this conversation but not write to it (read-only).");
      }
      return info;
    } catch {
      // 401 and the like: the connection finds out and says so.
      return null;
    }
  }

  function renderMeta(mirror) {
    const rows = [
      ["Id", transcriptId],
      ["Messages", String(mirror.length)],
      ["Revision", String(mirror.revision)],
      ["Active segment from", `message ${mirror.activeStart + 1}`], // counted from 1, for people
    ];
    // The copy's digest, checked against every change's (docs/protocol.md, The digest).
    if (mirror.digest) rows.push(["Digest", mirror.digest]);
    const meta = $("meta");
    meta.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
    meta.dataset.revision = String(mirror.revision);
    meta.dataset.digest = mirror.digest ?? "";
    meta.dataset.length = String(mirror.length);
    $("segments").replaceChildren(
      ...mirror.segments.map((s, n) =>
        el("li", { text: `Segment ${n + 1}: messages ${s.start + 1} to ${s.end === null ? "now" : s.end}${s.end === null ? " (active)" : ""}` }),
      ),
    );
  }

  function renderOutbox() {
    const waiting = client.state === "live" || client.state === "resynced" ? "Sending…" : "Waiting for the connection…";
    const items = client.pendingAppends.map(({ key, op }) => {
      const preview = oneLine(textOf(op.messages[0] ?? {}), 140);
      return el("li", { "data-key": key }, el("span", { class: "hint", text: `${waiting} ` }), el("span", { text: preview }));
    });
    $("outbox").replaceChildren(...items);
  }

  // Clicks inside the conversation: copy buttons and links between tool calls and results.
  $("main-chat").addEventListener("click", (click) => {
    const target = click.target.closest("[data-action]");
    if (!target) return;
    if (target.dataset.action === "copy") {
      click.preventDefault();
      copyCode(target);
    } else if (target.dataset.action === "reveal") {
      click.preventDefault();
      timeline.reveal(Number(target.dataset.target));
    }
  });

  const presence = setUpPresence({ client, transcriptId });
  setUpCompose({ client, transcriptId, timeline, renderOutbox, presence });
  checkAccess().then((info) => presence.known(info));
  client.subscribe(transcriptId, { window: OPEN_WITH, presence: true });
  presence.join();
  client.connect();
}

// --- presence: who is here, who is typing --------------------------------------------------

/** A composer that saw no key for this long stops saying it is typing. */
const TYPING_IDLE_MS = 5000;

/** The name this tab goes by on a server that asks for no credentials (?name= sets it). */
function myName() {
  const given = new URLSearchParams(location.search).get("name");
  if (given) localStorage.setItem("tsync-name", given.slice(0, 64));
  let name = localStorage.getItem("tsync-name");
  if (!name) {
    name = `Guest ${Math.floor(Math.random() * 0x10000).toString(16).padStart(4, "0")}`;
    localStorage.setItem("tsync-name", name);
  }
  return name;
}

/** "3 watching, Ana is typing": everyone here, and who else types now. */
function presenceText(counts, members, me) {
  const total = counts.viewers + counts.writers + counts.agents;
  let text = `${total} watching`;
  if (members === null) return text;
  const typing = [...new Set(members.filter((m) => m.state?.typing === true && m.who !== me).map((m) => m.who))];
  if (typing.length === 1) text += `, ${typing[0]} is typing`;
  else if (typing.length === 2) text += `, ${typing[0]} and ${typing[1]} are typing`;
  else if (typing.length > 2) text += `, ${typing.length} people are typing`;
  return text;
}

function setUpPresence({ client, transcriptId }) {
  const line = $("presence");
  const named = !currentToken(); // with credentials the server names us by the token's sub
  let me = named ? myName() : null;
  let typing = false;
  let idle = null;
  let last = null;
  const render = () => {
    if (!last) return;
    line.textContent = presenceText(last.counts, last.members, me);
    line.hidden = false;
  };
  client.on("presence", (detail) => {
    last = detail;
    render();
  });
  const state = (fields) => {
    try {
      client.statePresence(transcriptId, fields);
    } catch {
      // not subscribed (the conversation is gone): nothing to say
    }
  };
  return {
    join() {
      state(named ? { name: me, kind: "viewer" } : { kind: "viewer" });
    },
    /** What /v1/auth said (or null): who we are, and whether we may write. */
    known(info) {
      if (info?.sub) me = info.sub;
      if (info?.transcript?.write) state({ kind: "writer" });
      render();
    },
    typed(empty) {
      if (empty) {
        this.stopped();
        return;
      }
      clearTimeout(idle);
      idle = setTimeout(() => this.stopped(), TYPING_IDLE_MS);
      if (!typing) {
        typing = true;
        state({ state: { typing: true } });
      }
    },
    stopped() {
      clearTimeout(idle);
      idle = null;
      if (!typing) return;
      typing = false;
      state({ state: {} });
    },
  };
}

async function copyCode(button) {
  const code = button.closest(".code-block")?.querySelector("pre code, pre");
  if (!code) return;
  const text = code.textContent.replace(/\n$/, ""); // Markdown ends a block's text with a newline
  let done = false;
  try {
    await navigator.clipboard.writeText(text);
    done = true;
  } catch {
    // Not a secure context, or no permission: select the text so Ctrl+C works.
    const range = document.createRange();
    range.selectNodeContents(code);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    done = document.execCommand?.("copy") ?? false;
  }
  button.textContent = done ? "Copied" : "Selected: press Ctrl+C";
  setTimeout(() => {
    button.textContent = "Copy";
  }, 2000);
}

/** The composer goes quiet, and says why. */
function refuseWrites(reason) {
  $("compose-fields").disabled = true;
  const note = $("compose-disabled");
  note.textContent = `You cannot send messages here: ${reason}`;
  note.hidden = false;
}

// --- composing ------------------------------------------------------------------------------

const REFUSALS = new Set(["unauthorized", "forbidden"]);

function setUpCompose({ client, transcriptId, timeline, renderOutbox, presence }) {
  const form = $("compose");
  const text = $("text");
  const files = $("files");
  const error = $("compose-error");

  const fit = () => {
    text.style.height = "auto";
    text.style.height = `${Math.min(text.scrollHeight + 2, Math.round(innerHeight * 0.4))}px`;
  };
  text.addEventListener("input", fit);
  text.addEventListener("input", () => presence.typed(!text.value.trim()));
  text.addEventListener("keydown", (key) => {
    if (key.key === "Enter" && !key.shiftKey && !key.ctrlKey && !key.altKey && !key.metaKey && !key.isComposing) {
      key.preventDefault();
      form.requestSubmit();
    }
  });
  files.addEventListener("change", () => {
    const names = [...files.files].map((f) => f.name);
    $("chosen-files").textContent = names.length ? `Attached: ${names.join(", ")}` : "";
  });

  form.addEventListener("submit", async (submit) => {
    submit.preventDefault();
    if ($("compose-fields").disabled) return;
    error.textContent = "";
    const body = text.value;
    const chosen = [...files.files];
    if (!body.trim() && chosen.length === 0) {
      error.textContent = "Write a message or attach a file first.";
      text.focus();
      return;
    }
    let content = body;
    if (chosen.length) {
      content = [{ type: "text", text: body }];
      for (const file of chosen) content.push(await filePart(file));
    }
    const message = { role: $("role").value, content };
    presence.stopped();
    text.value = "";
    files.value = "";
    $("chosen-files").textContent = "";
    fit();
    text.focus();
    const sending = client.append(transcriptId, [message]);
    renderOutbox();
    timeline.follow(); // your own message: show it arrive
    try {
      await sending;
    } catch (err) {
      if (REFUSALS.has(err.code)) refuseWrites(err.message);
      error.textContent = `Not sent: ${err.message}`;
      if (!text.value) {
        text.value = body; // give the words back
        fit();
      }
    } finally {
      renderOutbox();
    }
  });
}

async function filePart(file) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  const base64 = btoa(binary);
  const mime = file.type || "application/octet-stream";
  if (mime.startsWith("image/")) {
    return { type: "image_url", image_url: { url: `data:${mime};base64,${base64}` } };
  }
  let content;
  try {
    content = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    content = base64;
  }
  return { type: "attachment", name: file.name, mime, content };
}

// --- route ----------------------------------------------------------------------------------

const match = location.pathname.match(/^\/t\/([^/]+)$/);
if (match) renderTranscript(decodeURIComponent(match[1]));
else showList();
