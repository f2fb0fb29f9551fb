// client.writeUIMessageStream against a real server, with streams the AI SDK
// (`ai` from npm) makes: argv[2] is the server's http:// URL, argv[3] a
// transcript that holds one user message, argv[4] "finish" or "stop".
//
// finish: pipe a whole reply (simulateReadableStream of CHUNKS) and print
//   the ack, GET .../ui-messages and what readUIMessageStream makes of the
//   same chunks.
// stop: pipe a reply that never ends (createUIMessageStream); another
//   connection stops it once its draft shows text; print what the pipe
//   resolved with, whether the stream was cancelled and GET .../ui-messages.
// error, abort: a reply that ends with an error chunk, or whose signal
//   aborts; print what the pipe rejected with and what a reader saw.
//
// Prints {"ready": true}, then one JSON line; exits 1 on a failure or after 20 s.
import { createUIMessageStream, readUIMessageStream, simulateReadableStream } from "ai";
import { TsyncClient } from "@transcript-sync/client";
import { UIMessageState } from "@transcript-sync/client/ui-stream";

const [url, transcriptId, mode] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 20000);

const CHUNKS = [
  { type: "start", messageId: "reply-1", messageMetadata: { model: "m" } },
  { type: "start-step" },
  { type: "reasoning-start", id: "r" },
  { type: "reasoning-delta", id: "r", delta: "The user wants " },
  { type: "reasoning-delta", id: "r", delta: "the weather." },
  { type: "reasoning-end", id: "r" },
  { type: "tool-input-start", toolCallId: "c1", toolName: "weather" },
  { type: "tool-input-delta", toolCallId: "c1", inputTextDelta: '{"city": "Pa' },
  { type: "tool-input-delta", toolCallId: "c1", inputTextDelta: 'ris"}' },
  { type: "tool-input-available", toolCallId: "c1", toolName: "weather", input: { city: "Paris" } },
  { type: "tool-output-available", toolCallId: "c1", output: { celsius: 18 } },
  { type: "finish-step" },
  { type: "start-step" },
  { type: "text-start", id: "t" },
  { type: "text-delta", id: "t", delta: "It is 18 " },
  { type: "text-delta", id: "t", delta: "°C in Paris." },
  { type: "source-url", sourceId: "s", url: "https://example.com/w" },
  { type: "text-end", id: "t" },
  { type: "finish-step" },
  { type: "finish", finishReason: "stop" },
];

async function sdkFold(chunks) {
  let last = null;
  const stream = simulateReadableStream({ chunks, chunkDelayInMs: null });
  for await (const message of readUIMessageStream({ stream })) last = message;
  return JSON.parse(JSON.stringify(last));
}

async function uiMessages() {
  const response = await fetch(`${url}/v1/transcripts/${transcriptId}/ui-messages`);
  return (await response.json()).messages;
}

const writer = new TsyncClient(url, { heartbeatMs: 0 }).connect();
console.log(JSON.stringify({ ready: true }));

if (mode === "finish") {
  // Bursts of chunks with pauses between, as a model streams them.
  const stream = simulateReadableStream({ chunks: CHUNKS, initialDelayInMs: 0, chunkDelayInMs: 3 });
  const ack = await writer.writeUIMessageStream(transcriptId, stream, { draftId: "d-finish" });
  const out = { ack, stored: await uiMessages(), expected: await sdkFold(CHUNKS) };
  // The exported fold (the package's ui-stream entry) gives the same message.
  const ours = new UIMessageState();
  ours.applyAll(CHUNKS);
  out.ours = ours.message();
  console.log(JSON.stringify(out));
} else if (mode === "error" || mode === "abort") {
  const reader = new TsyncClient(url, { heartbeatMs: 0 }).connect();
  reader.subscribe(transcriptId);
  const drafts = [];
  const closed = new Promise((resolve) => {
    reader.on("draft", (event) => {
      drafts.push({ state: event.state, n: event.n });
      if (event.state !== "open") resolve();
    });
  });
  await new Promise((resolve) => reader.on("status", ({ state }) => state === "live" && resolve()));
  const controller = new AbortController();
  const stream = createUIMessageStream({
    execute: async ({ writer: w }) => {
      w.write({ type: "start-step" });
      w.write({ type: "text-start", id: "t" });
      w.write({ type: "text-delta", id: "t", delta: "Let me" });
      await new Promise((resolve) => setTimeout(resolve, 50));
      if (mode === "error") throw new Error("the model failed");
      controller.abort(new Error("the user left"));
      await new Promise((resolve) => setTimeout(resolve, 1000));
    },
    onError: (error) => error.message,
  });
  let rejected = null;
  try {
    await writer.writeUIMessageStream(transcriptId, stream, { draftId: `d-${mode}`, signal: controller.signal });
  } catch (err) {
    rejected = err.message;
  }
  await closed;
  console.log(JSON.stringify({ rejected, drafts, stored: await uiMessages() }));
  reader.close();
} else {
  const reader = new TsyncClient(url, { heartbeatMs: 0 }).connect();
  reader.subscribe(transcriptId);
  let cancelled = false;
  let written = 0;
  const stream = createUIMessageStream({
    execute: async ({ writer: w }) => {
      w.write({ type: "start", messageId: "reply-stopped" });
      w.write({ type: "start-step" });
      w.write({ type: "text-start", id: "t" });
      for (;;) {
        if (cancelled) return;
        w.write({ type: "text-delta", id: "t", delta: "word " });
        written += 1;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
  });
  // Watch the stream's cancel through a pass-through the writer reads.
  const watched = stream.pipeThrough(new TransformStream());
  const source = watched.getReader();
  const piped = new ReadableStream({
    pull: async (controller) => {
      const { done, value } = await source.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (reason) => {
      cancelled = true;
      return source.cancel(reason);
    },
  });
  let stopAck = null;
  let drafts = [];
  reader.on("draft", (event) => {
    drafts.push({ state: event.state, n: event.n, parts: event.message?.parts?.length ?? null });
    if (stopAck === null && event.state === "open" && event.text.length >= 10) {
      stopAck = reader.stopDraft(transcriptId, "d-stop");
    }
  });
  const result = await writer.writeUIMessageStream(transcriptId, piped, { draftId: "d-stop" });
  const writtenAtStop = written;
  await new Promise((resolve) => setTimeout(resolve, 50));
  const out = {
    result,
    stopAck: await stopAck,
    cancelled,
    writtenAfterStop: written - writtenAtStop,
    stored: await uiMessages(),
    drafts,
  };
  reader.close();
  console.log(JSON.stringify(out));
}
writer.close();
clearTimeout(timer);
