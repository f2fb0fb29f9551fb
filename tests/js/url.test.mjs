// The server URL TsyncClient takes: every form the Python client takes
// (client_py.http.endpoints), mapped to the WebSocket it dials and the HTTP
// base its fallback and loadEarlier use; anything else is refused at once,
// in the constructor, instead of a WebSocket that fails forever.

import assert from "node:assert/strict";
import { test } from "node:test";

import { TsyncClient, httpBase } from "../../client_js/client.js";

class FakeSocket {
  static all = [];
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.readyState = 0;
    FakeSocket.all.push(this);
  }
  send() {}
  close() {
    this.readyState = 3;
  }
}

/** A fetch that records each URL and never answers (until the client aborts it). */
function recordingFetch() {
  const urls = [];
  const fetch = (url, init = {}) => {
    urls.push(String(url));
    return new Promise((_, reject) => {
      init.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
    });
  };
  return { urls, fetch };
}

/** Until `condition()` holds, looked at every few milliseconds (at most 2 s). */
async function until(condition, what) {
  const deadline = Date.now() + 2000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`waited in vain for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

// [given, the WebSocket's URL, the HTTP base]
const ACCEPTED = [
  // http(s): the form of the Python client, the CLI and the READMEs
  ["http://127.0.0.1:8765", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["http://127.0.0.1:8765/", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["https://chat.example", "wss://chat.example/v1/ws", "https://chat.example"],
  ["https://chat.example:8443/sync/", "wss://chat.example:8443/sync/v1/ws", "https://chat.example:8443/sync"],
  ["http://[::1]:8765", "ws://[::1]:8765/v1/ws", "http://[::1]:8765"],
  ["HTTP://Host:8765", "ws://host:8765/v1/ws", "http://host:8765"],
  ["  http://127.0.0.1:8765  ", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["http://127.0.0.1:8765/v1/ws", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["http://127.0.0.1:8765/#token=secret", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  // ws(s), with or without /v1/ws (a ws URL keeps its query, as in Python)
  ["ws://127.0.0.1:8765/v1/ws", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["ws://127.0.0.1:8765/v1/ws/", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["ws://127.0.0.1:8765", "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
  ["wss://chat.example/sync/v1/ws", "wss://chat.example/sync/v1/ws", "https://chat.example/sync"],
  ["wss://chat.example/sync", "wss://chat.example/sync/v1/ws", "https://chat.example/sync"],
  ["ws://h/v1/ws?tenant=a", "ws://h/v1/ws?tenant=a", "http://h"],
  [new URL("http://127.0.0.1:8765/"), "ws://127.0.0.1:8765/v1/ws", "http://127.0.0.1:8765"],
];

const REFUSED = [
  "127.0.0.1:8765",
  "localhost:8765",
  "/v1/ws",
  "v1/ws",
  "",
  "   ",
  "ftp://127.0.0.1:8765",
  "file:///tmp/socket",
  "tcp://127.0.0.1:8765",
  "http://",
  "ws://",
  undefined,
  null,
  8765,
  {},
];

const EXPECTED = /^url: expected the server's URL, http\(s\):\/\/host\[:port\]\[\/base\] or ws\(s\):\/\/host\[:port\]\[\/base\]\[\/v1\/ws\], not /;

for (const [given, ws, http] of ACCEPTED) {
  test(`${JSON.stringify(String(given))} dials ${ws} and reads over HTTP from ${http}`, async () => {
    FakeSocket.all = [];
    const client = new TsyncClient(given, { WebSocket: FakeSocket, fetch: recordingFetch().fetch, heartbeatMs: 0 });
    assert.equal(client.url, ws);
    assert.equal(client.httpUrl, http);
    assert.equal(httpBase(given), http);
    client.connect();
    await until(() => FakeSocket.all.length === 1, "the WebSocket");
    assert.equal(FakeSocket.all[0].url, ws);
    client.close();
  });

  test(`${JSON.stringify(String(given))} on the HTTP fallback asks ${http}/v1/...`, async () => {
    const { urls, fetch } = recordingFetch();
    const client = new TsyncClient(given, { transport: "sse", fetch, heartbeatMs: 0 });
    client.subscribe("t1");
    client.connect();
    await until(() => urls.length > 0, "a request");
    assert.ok(
      urls.every((url) => url.startsWith(`${http}/v1/`) || url === `${http}/healthz`),
      `${urls} not under ${http}`,
    );
    client.close();
  });
}

for (const given of REFUSED) {
  test(`${String(JSON.stringify(given))} is refused in the constructor, saying what was expected`, () => {
    FakeSocket.all = [];
    assert.throws(() => new TsyncClient(given, { WebSocket: FakeSocket }), (error) => {
      assert.equal(error.name, "TypeError");
      assert.match(error.message, EXPECTED);
      return true;
    });
    assert.throws(() => httpBase(given), TypeError);
    assert.equal(FakeSocket.all.length, 0);
  });
}

test("a user or password in the URL is refused without repeating it", () => {
  for (const given of ["http://alice:s3cret@127.0.0.1:8765", "wss://token@chat.example/v1/ws"]) {
    assert.throws(() => new TsyncClient(given), (error) => {
      assert.equal(error.name, "TypeError");
      assert.match(error.message, /no user or password in the server's URL .*getToken/);
      assert.ok(!error.message.includes("s3cret") && !error.message.includes("token@"), error.message);
      return true;
    });
  }
});

test("the httpUrl option takes the same forms, and is refused the same way", () => {
  const client = new TsyncClient("ws://127.0.0.1:8765/v1/ws", { httpUrl: "https://api.example/sync/" });
  assert.equal(client.httpUrl, "https://api.example/sync");
  assert.equal(client.url, "ws://127.0.0.1:8765/v1/ws");
  assert.throws(() => new TsyncClient("http://127.0.0.1:8765", { httpUrl: "api.example" }), {
    name: "TypeError",
    message: /^httpUrl: expected the server's URL, http\(s\):\/\/host/,
  });
});
