// The official Durable Streams client following a draft of ours as text, in
// SSE mode, until the stream closes: argv[2] the draft's stream URL. Prints
// {"ready":true} after the first chunk (the test writes the rest and commits
// then), then {"text":..., "closed":..., "contentType":...}; exits 1 after 20 s.
import { stream } from "@durable-streams/client";

const [url] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.log(JSON.stringify({ error: "timed out" }));
  process.exit(1);
}, 20000);
const response = await stream({ url, offset: "-1", live: "sse" });
let text = "";
for await (const chunk of response.textStream()) {
  if (!text && chunk) console.log(JSON.stringify({ ready: true }));
  text += chunk;
}
clearTimeout(timer);
console.log(
  JSON.stringify({ text, closed: response.streamClosed, contentType: response.contentType }),
);
process.exit(0);
