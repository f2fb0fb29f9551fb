// The shared digest vectors (tests/cases/digest/*.json) against the
// JavaScript port of protocol/digest.py, as tests/protocol/test_digest.py
// runs them against the Python one: the same canonical bytes and the same
// digest after every change, from the changes as JSON.parse gives them.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { canonicalJson, genesisDigest, nextDigest, sha256 } from "../../client_js/client.js";

const CASES = join(dirname(fileURLToPath(import.meta.url)), "..", "cases", "digest");
const FILES = readdirSync(CASES).filter((f) => f.endsWith(".json")).sort();

test("the digest vectors are there", () => {
  assert.ok(FILES.length >= 4, `only ${FILES.length} vectors`);
});

for (const file of FILES) {
  test(`digest vectors ${file}`, () => {
    const c = JSON.parse(readFileSync(join(CASES, file), "utf-8"));
    let digest = genesisDigest(c.transcriptId);
    assert.equal(digest, c.digests[0], `${file}: digest(0)`);
    c.changes.forEach((change, i) => {
      assert.equal(canonicalJson(change), c.canonical[i], `${file}: canonical bytes of change ${i + 1}`);
      digest = nextDigest(digest, change);
      assert.equal(digest, c.digests[i + 1], `${file}: digest(${i + 1})`);
    });
  });
}

test("sha256 is SHA-256 (against node:crypto, every padding length)", () => {
  for (let n = 0; n < 200; n++) {
    const bytes = new Uint8Array(n).map((_, i) => (i * 31 + n) & 0xff);
    const expected = createHash("sha256").update(bytes).digest("hex");
    assert.equal(Buffer.from(sha256(bytes)).toString("hex"), expected, `length ${n}`);
  }
});

test("nextDigest refuses what is not a digest", () => {
  assert.throws(() => nextDigest("xyz", { kind: "segment-started", previousStart: 0, start: 1, end: 1 }), /not a digest/);
});
