// The Durable Streams protocol's Node reference server (@durable-streams/server,
// pinned in package.json), in memory, for `tsync bench streams --compare`:
//   (cd scripts/ds_reference && npm ci)
//   node scripts/ds_reference/serve.mjs --port 8803 [--host 127.0.0.1]
// It serves every path, so /v1/stream/NAME is a stream here as on tsync serve.
// Stops on SIGTERM or SIGINT.
import { DurableStreamTestServer } from "@durable-streams/server"

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`)
  return at >= 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback
}

const port = Number(option("port", "4437"))
const host = option("host", "127.0.0.1")
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`serve.mjs: --port takes 0-65535, not ${option("port")}`)
  process.exit(2)
}
const server = new DurableStreamTestServer({ port, host })
await server.start()
console.log(`Durable Streams reference server on ${server.url} (pid ${process.pid})`)
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => {
    server.stop().finally(() => process.exit(0))
  })
}
