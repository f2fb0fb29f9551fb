// The app of docs/ai-sdk.md as Next.js would serve it, for
// tests/browser/test_ai_sdk_docs.py: argv[2] is the route handler's module
// (app/api/chat/route.ts as esbuild made it), argv[3] the folder of the page
// (index.html, app.js), argv[4] the port. POST /api/chat calls the module's
// exported POST with a real Request and streams its Response back; anything
// else is a file of the folder. Prints {"ready": true} once it listens.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pathToFileURL } from "node:url";

const [routeModule, folder, port] = process.argv.slice(2);
const route = await import(pathToFileURL(routeModule).href);
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8" };

async function handle(req, res) {
  const url = new URL(req.url, `http://${req.headers.host}`);
  if (url.pathname === "/api/chat") {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (typeof value === "string") headers.set(name, value);
    }
    const request = new Request(url, {
      method: req.method,
      headers,
      body: req.method === "POST" ? Buffer.concat(chunks) : undefined,
    });
    const response = await route[req.method](request);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (response.body === null) return res.end();
    // The reader may go away in the middle (a reload): the route's tee keeps writing to tsync.
    const body = Readable.fromWeb(response.body);
    res.on("close", () => body.destroy());
    body.on("error", () => res.destroy());
    body.pipe(res);
    return;
  }
  const name = url.pathname === "/" ? "index.html" : url.pathname.slice(1);
  const ext = name.slice(name.lastIndexOf("."));
  try {
    const data = await readFile(join(folder, name));
    res.writeHead(200, { "content-type": TYPES[ext] ?? "application/octet-stream" });
    res.end(data);
  } catch {
    res.writeHead(404).end();
  }
}

const server = createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(error);
    if (!res.headersSent) res.writeHead(500);
    res.end(String(error));
  });
});
server.listen(Number(port), "127.0.0.1", () => console.log(JSON.stringify({ ready: true })));
