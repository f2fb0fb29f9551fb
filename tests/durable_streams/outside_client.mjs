// The official Durable Streams client reading a live transcript of ours:
// argv[2] the stream URL, argv[3] how many events to wait for, argv[4] the
// live mode ("sse" or "long-poll"). Prints {"ready":true} after the first
// event (the test appends then), then {"revisions":[...]}; exits 1 after 20 s.
import { stream } from "@durable-streams/client";

const [url, want, live] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 20000);
const response = await stream({ url, offset: "-1", live });
const revisions = [];
for await (const event of response.jsonStream()) {
  revisions.push(event.revision);
  if (revisions.length === 1) console.log(JSON.stringify({ ready: true }));
  if (revisions.length >= Number(want)) break;
}
response.cancel?.();
clearTimeout(timer);
console.log(JSON.stringify({ revisions, contentType: response.contentType }));
process.exit(0);
