// Reads a JSON array of chunk lists on stdin; for each list and each of its
// prefixes, the message the AI SDK's readUIMessageStream makes of it (its last
// snapshot, or null when it wrote none), and the index of the first chunk the
// SDK refused (null when none). Prints one JSON answer.
import { readUIMessageStream } from "ai";

async function read(chunks) {
  let error = null;
  const stream = new ReadableStream({
    start(controller) {
      for (const chunk of chunks) controller.enqueue(chunk);
      controller.close();
    },
  });
  let last = null;
  for await (const message of readUIMessageStream({ stream, onError: (e) => { error = e; } })) {
    last = message;
  }
  return { message: last === null ? null : JSON.parse(JSON.stringify(last)), error };
}

const input = [];
for await (const chunk of process.stdin) input.push(chunk);
const lists = JSON.parse(Buffer.concat(input).toString("utf8"));
const answers = [];
for (const chunks of lists) {
  const prefixes = [];
  let errorAt = null;
  for (let n = 1; n <= chunks.length; n++) {
    const { message, error } = await read(chunks.slice(0, n));
    if (error !== null) { errorAt = n - 1; break; }
    prefixes.push(message);
  }
  answers.push({ prefixes, errorAt });
}
process.stdout.write(JSON.stringify(answers));
