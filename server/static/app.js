// The chat page: the transcript list at "/" and one transcript, live, at "/t/{id}".
// Everything is rendered with textContent and attributes, never innerHTML:
// message bodies are whatever someone appended.

import { TsyncClient, attachmentBytes } from "/v1/client.js";

const params = new URLSearchParams(location.search);
const token = params.get("token");
const $ = (id) => document.getElementById(id);

/** A same-origin path that keeps ?token= so that links work on a protected server. */
function withToken(path) {
  return token ? `${path}?token=${encodeURIComponent(token)}` : path;
}

/** fetch() with the bearer token; throws an Error carrying problem+json's detail. */
async function api(path, init = {}) {
  const headers = { Accept: "application/json", ...(init.headers ?? {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...init, headers });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const detail = body?.detail ?? body?.title ?? response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

$("home").href = withToken("/");

// --- the list ------------------------------------------------------------------------

async function showList() {
  $("list-view").hidden = false;
  document.title = "Transcripts · transcript-sync";
  setStatus("idle", "Not connected (list view)");
  $("create-form").addEventListener("submit", createTranscript);
  $("refresh").addEventListener("click", loadList);
  await loadList();
}

async function loadList() {
  const state = $("list-state");
  const table = $("transcripts");
  state.textContent = "Loading…";
  try {
    const { transcripts } = await api("/v1/transcripts?limit=1000");
    const rows = transcripts.map((t) =>
      el(
        "tr",
        {},
        el("td", {}, el("a", { href: withToken(`/t/${encodeURIComponent(t.transcriptId)}`), text: t.transcriptId })),
        el("td", { text: String(t.length) }),
        el("td", { text: String(t.revision) }),
        el("td", {}, el("time", { datetime: new Date(t.updatedAt).toISOString(), text: new Date(t.updatedAt).toLocaleString() })),
      ),
    );
    table.tBodies[0].replaceChildren(...rows);
    table.hidden = rows.length === 0;
    state.textContent = rows.length ? `${rows.length} transcript${rows.length === 1 ? "" : "s"}` : "No transcripts yet.";
  } catch (err) {
    table.hidden = true;
    state.textContent = `Could not load the list: ${err.message}`;
  }
}

async function createTranscript(submit) {
  submit.preventDefault();
  const input = $("new-id");
  const error = $("create-error");
  error.textContent = "";
  const id = input.value.trim();
  if (id && !input.checkValidity()) {
    error.textContent = "An id is 1 to 128 letters, digits or . _ : -";
    input.focus();
    return;
  }
  try {
    const created = await api("/v1/transcripts", { method: "POST", body: JSON.stringify(id ? { id } : {}) });
    location.assign(withToken(`/t/${encodeURIComponent(created.transcriptId)}`));
  } catch (err) {
    error.textContent = `Could not create it: ${err.message}`;
    input.focus();
  }
}

// --- connection state ------------------------------------------------------------------

const STATUS_TEXT = {
  idle: "Not connected",
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Connection lost: reconnecting…",
  resyncing: "Frames were lost: resyncing…",
  resynced: "Live (resynced)",
  closed: "Closed",
  unauthorized: "Unauthorized: open the page with ?token=…",
};

function setStatus(state, text) {
  $("status").dataset.state = state;
  $("status-text").textContent = text ?? STATUS_TEXT[state] ?? state;
}

// --- one transcript ----------------------------------------------------------------

const blobUrls = new Set();

function renderTranscript(transcriptId) {
  $("transcript-view").hidden = false;
  $("transcript-title").textContent = transcriptId;
  document.title = `${transcriptId} · transcript-sync`;

  const list = $("messages");
  const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/ws`;
  const client = new TsyncClient(wsUrl, { token });
  window.tsyncClient = client; // for the console and the end-to-end tests

  let probing = false;
  client.on("status", ({ state, delayMs, attempt }) => {
    let text = STATUS_TEXT[state];
    if ((state === "reconnecting" || state === "connecting") && delayMs !== undefined) {
      const what = state === "connecting" ? "Cannot connect" : "Connection lost";
      text = `${what}: trying again in ${(delayMs / 1000).toFixed(1)} s (attempt ${attempt})…`;
      // A refused WebSocket handshake does not say why; the HTTP API does.
      if (!probing) {
        probing = true;
        probeAccess(client, transcriptId).finally(() => {
          probing = false;
        });
      }
    }
    setStatus(state, text);
    renderOutbox(client);
  });

  client.on("baseline", ({ mirror, epochChanged }) => {
    list.setAttribute("aria-busy", "true");
    for (const url of blobUrls) URL.revokeObjectURL(url);
    blobUrls.clear();
    const items = [];
    if (mirror.start > 0) {
      items.push(el("li", { class: "note", text: `Messages before #${mirror.start} are not loaded.` }));
    }
    const starts = new Set(mirror.segments.map((s) => s.start).filter((s) => s > 0));
    mirror.messages.forEach((message, i) => {
      const index = mirror.start + i;
      if (starts.has(index)) items.push(segmentItem(mirror, index));
      items.push(messageItem(message, index));
    });
    if (starts.has(mirror.length)) items.push(segmentItem(mirror, mirror.length));
    list.replaceChildren(...items);
    list.removeAttribute("aria-busy");
    if (epochChanged) {
      $("transcript-error").textContent =
        "This transcript was recreated on the server: showing its new history.";
    }
    renderMeta(mirror);
  });

  client.on("messages", ({ start, messages, mirror }) => {
    messages.forEach((message, i) => list.append(messageItem(message, start + i)));
    renderMeta(mirror);
  });

  client.on("segment", ({ start, mirror }) => {
    const before = list.querySelector(`li.message[data-index="${start}"]`);
    const item = segmentItem(mirror, start);
    if (before) before.before(item);
    else list.append(item);
    renderMeta(mirror);
  });

  client.on("stop", ({ code, message }) => {
    $("transcript-error").textContent =
      code === "not-found" ? `There is no transcript “${transcriptId}”.` : `${code}: ${message}`;
    $("send").disabled = true;
  });

  client.on("ack", () => renderOutbox(client));

  setUpCompose(client, transcriptId);
  client.subscribe(transcriptId);
  client.connect();
}

/** Ask the HTTP API why the WebSocket fails: a wrong token or no such transcript end the page. */
async function probeAccess(client, transcriptId) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  let response;
  try {
    response = await fetch(`/v1/transcripts/${encodeURIComponent(transcriptId)}?start=0&end=0`, { headers });
  } catch {
    return; // the server is away: keep trying
  }
  if (response.status === 401 || response.status === 403) {
    client.close();
    setStatus("unauthorized");
    $("transcript-error").textContent = token
      ? "The server refused this token."
      : "This server needs a token: open the page with ?token=…";
    $("send").disabled = true;
  }
}

function renderMeta(mirror) {
  const parts = [
    `${mirror.length} message${mirror.length === 1 ? "" : "s"}`,
    `revision ${mirror.revision}`,
    `${mirror.segments.length} segment${mirror.segments.length === 1 ? "" : "s"}, the active one from #${mirror.activeStart}`,
  ];
  const meta = $("meta");
  meta.textContent = parts.join(" · ");
  meta.dataset.revision = String(mirror.revision);
  meta.dataset.length = String(mirror.length);
}

function segmentItem(mirror, start) {
  const number = mirror.segments.findIndex((s) => s.start === start) + 1;
  const label = `Segment ${number || "?"} starts at message #${start}`;
  return el("li", { class: "segment", role: "separator", "aria-label": label, "data-start": String(start) },
    el("span", { text: label }));
}

function messageItem(message, index) {
  const role = typeof message.role === "string" ? message.role : "unknown";
  const item = el("li", { class: `message role-${role}`, "data-index": String(index), "data-role": role });
  const header = el("p", { class: "who" },
    el("span", { class: "role", text: role }),
    message.name ? el("span", { class: "name", text: message.name }) : null,
    el("span", { class: "index", text: `#${index}` }),
  );
  const body = el("div", { class: "body" });
  const content = message.content;
  if (typeof content === "string") {
    body.append(el("p", { class: "text", text: content }));
  } else if (Array.isArray(content)) {
    content.forEach((part, n) => body.append(partNode(part, index, n)));
  }
  if (message.tool_call_id) body.append(el("p", { class: "hint", text: `answer to tool call ${message.tool_call_id}` }));
  if (Array.isArray(message.tool_calls)) {
    body.append(el("pre", { class: "tool-calls", text: JSON.stringify(message.tool_calls, null, 2) }));
  }
  if (role === "context") {
    // Narrative preamble, not a chat turn: shown, but folded.
    const details = el("details", {}, el("summary", { text: "Context (narrative preamble)" }), body);
    item.append(header, details);
  } else {
    item.append(header, body);
  }
  return item;
}

function safeImageUrl(url) {
  return typeof url === "string" && /^(https?:|data:image\/|blob:)/i.test(url);
}

function partNode(part, index, n) {
  if (part?.type === "text") return el("p", { class: "text", text: part.text });
  if (part?.type === "image_url") {
    const url = part.image_url?.url;
    if (!safeImageUrl(url)) return el("p", { class: "hint", text: `image with an unsupported URL` });
    return el("figure", { class: "image" },
      el("img", { src: url, alt: `Image ${n + 1} of message #${index}`, loading: "lazy", decoding: "async" }));
  }
  if (part?.type === "attachment") {
    const bytes = attachmentBytes(part);
    const url = URL.createObjectURL(new Blob([bytes], { type: part.mime || "application/octet-stream" }));
    blobUrls.add(url);
    const name = part.name || "attachment";
    return el("p", { class: "attachment" },
      el("a", { href: url, download: name, text: `⬇ ${name}` }),
      el("span", { class: "hint", text: ` ${part.mime || "application/octet-stream"}, ${formatSize(bytes.length)}` }));
  }
  return el("pre", { class: "unknown-part", text: JSON.stringify(part) });
}

function formatSize(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

// --- composing ------------------------------------------------------------------------

function setUpCompose(client, transcriptId) {
  const form = $("compose");
  const text = $("text");
  const files = $("files");
  const error = $("compose-error");

  text.addEventListener("keydown", (key) => {
    if (key.key === "Enter" && !key.shiftKey && !key.ctrlKey && !key.altKey && !key.metaKey && !key.isComposing) {
      key.preventDefault();
      form.requestSubmit();
    }
  });

  form.addEventListener("submit", async (submit) => {
    submit.preventDefault();
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
    text.value = "";
    files.value = "";
    text.focus();
    const sending = client.append(transcriptId, [message]);
    renderOutbox(client);
    try {
      await sending;
    } catch (err) {
      error.textContent = `Not sent: ${err.message}`;
      if (!text.value) text.value = body; // give the words back
    } finally {
      renderOutbox(client);
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

function renderOutbox(client) {
  const waiting = client.state === "live" || client.state === "resynced" ? "sending…" : "waiting for the connection…";
  const items = client.pendingAppends.map(({ key, op }) => {
    const first = op.messages[0];
    const preview = typeof first?.content === "string" ? first.content : first?.content?.[0]?.text ?? "";
    return el("li", { "data-key": key }, el("span", { class: "hint", text: `${waiting} ` }), el("span", { text: preview }));
  });
  $("outbox").replaceChildren(...items);
}

// --- route ---------------------------------------------------------------------------

const match = location.pathname.match(/^\/t\/([^/]+)$/);
if (match) renderTranscript(decodeURIComponent(match[1]));
else showList();
