// Reads a JSON array of UIMessage lists on stdin and checks each with the AI
// SDK's own safeValidateUIMessages; prints one JSON answer: the failures.
import { safeValidateUIMessages } from "ai";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const lists = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const failures = [];
for (const [index, messages] of lists.entries()) {
  if (messages.length === 0) continue; // the SDK refuses an empty list; an empty chat is valid
  const result = await safeValidateUIMessages({ messages });
  if (!result.success) failures.push({ index, error: String(result.error?.message ?? result.error) });
}
process.stdout.write(JSON.stringify({ checked: lists.length, failures }));
