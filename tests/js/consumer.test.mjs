// Runs the shared frame-sequence cases (tests/cases/consumer/*.json) against
// the JavaScript port of the consumer core, the same way
// tests/protocol/test_consumer_cases.py runs them against
// protocol.consumer.Consumer: one file is one case, one step one input, and
// after every step exactly the ops and updates it must cause.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Consumer } from "../../client_js/client.js";

const CASES = join(dirname(fileURLToPath(import.meta.url)), "..", "cases", "consumer");
const FILES = readdirSync(CASES).filter((f) => f.endsWith(".json")).sort();
const INPUTS = ["subscribe", "unsubscribe", "connection", "receive", "statePresence"];

/** An update in the case files' words (the same projection as the Python runner's). */
function project(u) {
  switch (u.kind) {
    case "applied":
      return { kind: u.kind, transcriptId: u.transcriptId, revision: u.event.revision };
    case "replaced":
      return {
        kind: u.kind,
        transcriptId: u.transcriptId,
        revision: u.snapshot.revision,
        previousRevision: u.previousRevision,
        epochChanged: u.epochChanged,
      };
    case "resubscribed":
      return { kind: u.kind, transcriptId: u.transcriptId, reason: u.reason, fromRevision: u.fromRevision };
    case "stopped":
      return { kind: u.kind, transcriptId: u.transcriptId, code: u.code };
    case "answered":
      return { kind: u.kind, type: u.frame.type, ref: u.frame.ref ?? null };
    case "error":
      return { kind: u.kind, code: u.frame.code };
    case "invalid":
      return { kind: u.kind };
    case "frames-lost":
      return { kind: u.kind, missing: u.missing };
    case "synced":
      return { kind: u.kind, barrier: u.barrier };
    case "draft":
      return { kind: u.kind, transcriptId: u.transcriptId, draftId: u.draftId, n: u.n, delta: u.delta, text: u.text };
    case "draft-closed":
      return { kind: u.kind, transcriptId: u.transcriptId, draftId: u.draftId, state: u.state, revision: u.revision, text: u.text };
    case "presence": {
      const norm = ({ id, who, kind, state }) => ({ id, who, kind, state });
      return {
        kind: u.kind,
        transcriptId: u.transcriptId,
        members: u.presence.members === null ? null : u.presence.listed().map(norm),
        counts: { ...u.presence.counts },
      };
    }
    default:
      throw new Error(`unknown update ${JSON.stringify(u)}`);
  }
}

function copyOf(consumer, transcriptId, expected) {
  const sub = consumer.subscriptions.get(transcriptId);
  if (!sub || !sub.copy) return null;
  const c = sub.copy;
  const found = {
    revision: c.revision,
    epoch: c.epoch,
    start: c.start,
    length: c.length,
    activeStart: c.activeStart,
    segments: c.segments,
    messages: c.messages,
    resyncing: sub.continuity.resyncing,
  };
  if (c.views.length || c.viewChanges) Object.assign(found, { views: c.views, viewChanges: c.viewChanges });
  if (expected && "digest" in expected) found.digest = c.digest;
  return found;
}

function draftsOf(consumer, transcriptId) {
  const sub = consumer.subscriptions.get(transcriptId);
  if (!sub) return null;
  const found = {};
  for (const [id, d] of sub.drafts) {
    found[id] = { role: d.role, n: d.n, text: d.text, waiting: d.waiting, stale: d.stale, finalRevision: d.finalRevision };
  }
  return found;
}

function run(consumer, step) {
  const kinds = INPUTS.filter((k) => k in step);
  assert.equal(kinds.length, 1, `one input per step: ${JSON.stringify(step)}`);
  const [kind] = kinds;
  const value = step[kind];
  if (kind === "subscribe") consumer.subscribe(value, { window: step.window ?? null, presence: step.presence ?? false });
  else if (kind === "statePresence") consumer.statePresence(value);
  else if (kind === "unsubscribe") consumer.unsubscribe(value);
  else if (kind === "connection") {
    assert.ok(value === "made" || value === "lost", value);
    if (value === "made") consumer.connectionMade();
    else consumer.connectionLost();
  } else {
    consumer.receiveData(value.map((f) => (typeof f === "string" ? f : JSON.stringify(f))).join("\n"));
  }
}

test("the shared frame-sequence cases are there", () => {
  assert.ok(FILES.length >= 16, `only ${FILES.length} cases`);
});

for (const file of FILES) {
  test(`consumer case ${file}`, () => {
    const c = JSON.parse(readFileSync(join(CASES, file), "utf-8"));
    assert.equal(c.name, file.replace(/\.json$/, ""));
    const consumer = new Consumer({ keepMessages: c.keepMessages ?? true });
    c.steps.forEach((step, number) => {
      const where = `${file} step ${number}`;
      run(consumer, step);
      // Ops as they go on the wire: what JSON.stringify sends.
      assert.deepEqual(consumer.opsToSend().map((op) => JSON.parse(JSON.stringify(op))), step.ops, `${where}: ops`);
      assert.deepEqual(consumer.updatesReceived().map(project), step.updates, `${where}: updates`);
      for (const [transcriptId, expected] of Object.entries(step.copies ?? {})) {
        assert.deepEqual(copyOf(consumer, transcriptId, expected), expected, `${where}: copy of ${transcriptId}`);
      }
      for (const [transcriptId, expected] of Object.entries(step.drafts ?? {})) {
        assert.deepEqual(draftsOf(consumer, transcriptId), expected, `${where}: drafts of ${transcriptId}`);
      }
      if (step.followed) assert.deepEqual([...consumer.subscriptions.keys()].sort(), step.followed, where);
    });
    for (const [name, expected] of Object.entries(c.counters ?? {})) {
      if (name === "seq") {
        assert.deepEqual(consumer.seq.counters, expected, `${file}: seq counters`);
        continue;
      }
      const got = consumer.subscriptions.get(name).continuity.counters;
      for (const [counter, value] of Object.entries(expected)) {
        assert.ok(counter in got, `${file}: unknown counter ${counter}`);
        assert.equal(got[counter], value, `${file}: ${name} ${counter}`);
      }
    }
  });
}
