// The official suite, as its README says to run it (programmatically: its own
// CLI skips files under node_modules). DS_URL is the server under test;
// DS_LONG_POLL_MS how long that server's long-poll waits (its
// stream_long_poll_s), which the suite's timeouts must exceed.
import { runConformanceTests } from "@durable-streams/server-conformance-tests";

runConformanceTests({
  baseUrl: process.env.DS_URL,
  longPollTimeoutMs: Number(process.env.DS_LONG_POLL_MS ?? 20000),
});
