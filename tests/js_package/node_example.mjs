// The package in Node (20: no global WebSocket, so `ws` is loaded), against a
// real server: argv[2] is its ws:// URL, argv[3] a transcript that holds one
// user message. Follows it through a store, appends, and waits for a draft
// the test writes (argv[4]: its text) to be committed. Prints one JSON line
// of what it saw; exits 1 on a failure or after 20 s.
import { TsyncClient, createTranscriptStore } from "@transcript-sync/client";

const [url, transcriptId, draftText] = process.argv.slice(2);
const seen = { globalWebSocket: typeof globalThis.WebSocket, statuses: [], draftTexts: [] };
const timer = setTimeout(() => {
  console.log(JSON.stringify({ ...seen, error: "timed out" }));
  process.exit(1);
}, 20000);

const client = new TsyncClient(url, { heartbeatMs: 0 });
client.on("status", ({ state }) => seen.statuses.push(state));
client.on("draft", ({ state, text }) => {
  if (state === "open") seen.draftTexts.push(text);
});
const store = createTranscriptStore(client, transcriptId);
const snapshots = new Set();
let appended = false;
const leave = store.subscribe(async () => {
  const snap = store.getSnapshot();
  snapshots.add(snap);
  if (snap.revision !== null && !appended) {
    appended = true;
    seen.ack = await client.append(transcriptId, [{ role: "user", content: "from node" }]);
    console.log(JSON.stringify({ ready: true })); // the test writes its draft now
  }
  const last = snap.messages.at(-1);
  if (last?.content === draftText && snap.drafts.length === 0) {
    seen.roles = snap.messages.map((m) => m.role);
    seen.sameSnapshotWhenUnchanged = store.getSnapshot() === snap;
    seen.snapshots = snapshots.size;
    leave();
    client.close();
    clearTimeout(timer);
    console.log(JSON.stringify(seen));
  }
});
client.connect();
