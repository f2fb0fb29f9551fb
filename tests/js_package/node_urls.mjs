// The package in Node against a real server, given its URL in each form:
// argv[2] is a transcript that holds messages, argv[3] a JSON list of URLs the
// client must take, argv[4] a JSON list it must refuse. Each URL it takes
// follows the transcript once over the WebSocket and once over the HTTP
// fallback (transport "sse"), all at once, each given 8 s to see its baseline.
// Prints {"ready": true}, then one JSON line: what each URL did.
import { TsyncClient } from "@transcript-sync/client";

const [transcriptId, accepted, refused] = [process.argv[2], JSON.parse(process.argv[3]), JSON.parse(process.argv[4])];
console.log(JSON.stringify({ ready: true }));

function follow(url, transport) {
  return new Promise((resolve) => {
    let client;
    const statuses = [];
    const done = (outcome) => {
      clearTimeout(timer);
      client?.close();
      resolve({ url, transport, statuses, ...outcome });
    };
    const timer = setTimeout(() => done({ error: "no baseline within 8 s" }), 8000);
    try {
      client = new TsyncClient(url, { transport, heartbeatMs: 0, initialBackoffMs: 50, maxBackoffMs: 500 });
    } catch (error) {
      done({ error: `${error.name}: ${error.message}` });
      return;
    }
    client.on("status", ({ state, transport: via }) => statuses.push(`${state}/${via}`));
    client.on("baseline", ({ mirror }) =>
      done({ wsUrl: client.url, httpUrl: client.httpUrl, via: client.transport, messages: mirror.length }),
    );
    client.subscribe(transcriptId);
    client.connect();
  });
}

function refuse(url) {
  try {
    new TsyncClient(url).close();
    return { url, error: null };
  } catch (error) {
    return { url, error: `${error.name}: ${error.message}` };
  }
}

const followed = await Promise.all(accepted.flatMap((url) => [follow(url, "websocket"), follow(url, "sse")]));
console.log(JSON.stringify({ followed, refused: refused.map(refuse) }));
