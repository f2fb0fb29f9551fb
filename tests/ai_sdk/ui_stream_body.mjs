// Prints the body the AI SDK's own createUIMessageStreamResponse makes of the
// chunks given as JSON on stdin (what toUIMessageStreamResponse() sends):
// the event stream a route handler would POST to tsync's /replies.
import { createUIMessageStream, createUIMessageStreamResponse } from "ai";

const input = [];
for await (const piece of process.stdin) input.push(piece);
const chunks = JSON.parse(Buffer.concat(input).toString("utf8"));
const stream = createUIMessageStream({
  execute({ writer }) {
    for (const chunk of chunks) writer.write(chunk);
  },
});
const response = createUIMessageStreamResponse({ stream });
process.stdout.write(
  JSON.stringify({
    headers: Object.fromEntries(response.headers.entries()),
    body: await response.text(),
  }),
);
