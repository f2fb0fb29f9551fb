// Runs the shared continuity cases (tests/cases/continuity/*.json) against the
// JavaScript port, the same way tests/protocol/test_continuity_cases.py runs
// them against protocol.continuity: one file is one case, one step one input.

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { Continuity, SeqTracker, SeqVerdict } from "../../client_js/client.js";

const CASES = join(dirname(fileURLToPath(import.meta.url)), "..", "cases", "continuity");
const FILES = readdirSync(CASES).filter((f) => f.endsWith(".json")).sort();
const INPUTS = ["baseline", "event", "error", "connection", "seq"];
const DECISIONS = ["apply", "replace", "ignore", "resubscribe", "reject", "stop"];

function runStep(machine, seq, step) {
  const kinds = INPUTS.filter((k) => k in step);
  assert.equal(kinds.length, 1, `one input per step: ${JSON.stringify(step)}`);
  const [kind] = kinds;
  const value = step[kind];
  if (kind === "seq") {
    const verdict = seq.observe(value);
    return [verdict === SeqVerdict.GAP ? machine.onSeqGap() : null, verdict];
  }
  if (kind === "connection") {
    assert.ok(value === "lost" || value === "new", value);
    if (value === "lost") return [machine.onConnectionLost(), null];
    seq.reset();
    return [machine.onNewConnection(), null];
  }
  // The frames as they come off the wire (the client dispatches on "type").
  if (kind === "baseline") return [machine.onFrame({ type: "baseline", seq: 1, snapshot: value }), null];
  if (kind === "event") return [machine.onFrame({ type: "increment", seq: 1, event: value }), null];
  return [machine.onFrame(value), null];
}

function checkDecision(decision, expect, where) {
  const kind = expect.decision;
  if (kind === undefined) {
    assert.equal(decision, null, `${where}: expected no decision, got ${JSON.stringify(decision)}`);
    return;
  }
  assert.ok(DECISIONS.includes(kind), `${where}: unknown decision ${kind} in the case file`);
  assert.ok(decision, `${where}: expected ${kind}, got no decision`);
  assert.equal(decision.kind, kind, `${where}: expected ${kind}, got ${JSON.stringify(decision)}`);
  if (decision.kind === "resubscribe") {
    assert.ok("fromRevision" in expect, `${where}: a resubscribe case must say fromRevision`);
    assert.equal(decision.fromRevision, expect.fromRevision, where);
    assert.equal(decision.epoch, expect.epoch, where);
    const op = decision.op();
    assert.equal(op.op, "subscribe", where);
    assert.equal(op.transcriptId, decision.transcriptId, where);
    assert.equal(op.fromRevision ?? null, expect.fromRevision, `${where}: ${JSON.stringify(op)}`);
    assert.equal(op.epoch ?? null, expect.epoch, `${where}: ${JSON.stringify(op)}`);
  }
  if ("reason" in expect) {
    assert.ok(["ignore", "resubscribe"].includes(decision.kind), where);
    assert.equal(decision.reason, expect.reason, where);
  }
  if ("code" in expect) {
    assert.equal(decision.kind, "stop", where);
    assert.equal(decision.code, expect.code, where);
  }
}

test("the shared case files are there", () => {
  const names = new Set(FILES.map((f) => f.replace(/\.json$/, "")));
  for (const required of [
    "baseline-then-increments", "repeat", "gap", "gap-while-resyncing",
    "epoch-change-via-increment", "epoch-change-via-baseline", "foreign-id", "lagged",
    "connection-lost-and-new", "seq-gap-and-repeat", "not-found",
  ]) {
    assert.ok(names.has(required), `missing case ${required}`);
  }
});

for (const file of FILES) {
  test(`continuity case ${file}`, () => {
    const c = JSON.parse(readFileSync(join(CASES, file), "utf-8"));
    assert.equal(c.name, file.replace(/\.json$/, ""));
    const machine = new Continuity(c.transcriptId);
    const seq = new SeqTracker();
    c.steps.forEach((step, number) => {
      const where = `${file} step ${number}`;
      const [decision, verdict] = runStep(machine, seq, step);
      const expect = step.expect;
      assert.ok(expect, `${where}: no expect`);
      if ("verdict" in expect) assert.equal(verdict, expect.verdict, `${where}: seq verdict`);
      checkDecision(decision, expect, where);
      if ("state" in step) {
        assert.deepEqual(
          { revision: machine.revision, epoch: machine.epoch, resyncing: machine.resyncing },
          step.state,
          where,
        );
      }
      // The op the machine would send now always matches its state.
      const request = machine.resubscribeRequest();
      assert.equal(request.fromRevision ?? null, machine.revision, where);
      assert.equal(request.epoch ?? null, machine.epoch, where);
    });
    const counters = machine.counters;
    const unknown = Object.keys(c.counters).filter((k) => !(k in counters));
    assert.deepEqual(unknown, [], `${file}: unknown counters`);
    for (const [name, value] of Object.entries(c.counters)) {
      assert.equal(counters[name], value, `${file}: counter ${name}`);
    }
    if (c.seqCounters) assert.deepEqual(seq.counters, c.seqCounters, `${file}: seq counters`);
  });
}

test("the counters have the names of protocol.continuity.Counters, in camelCase", () => {
  assert.deepEqual(Object.keys(new Continuity("t").counters).sort(), [
    "applied", "baselines", "dropped", "epochChanges", "foreign", "gaps", "lagged", "rebaselines",
    "repeatsIgnored", "resubscribes", "resumes", "skipped", "staleBaselines",
  ]);
});

test("a resubscribe answered with nothing ends the resync (as in Python)", () => {
  const c = new Continuity("t");
  const msg = { role: "user", content: "x" };
  c.onBaseline({ transcriptId: "t", epoch: "e", revision: 1, start: 0, messages: [msg], activeStart: 0, segments: [] });
  const event = (revision) => ({
    transcriptId: "t", epoch: "e", revision, occurredAt: 0,
    change: { kind: "messages-appended", start: revision - 1, messages: [msg] },
  });
  assert.equal(c.onConnectionLost().kind, "resubscribe");
  assert.equal(c.onEvent(event(3)).kind, "ignore");
  c.onResubscribeAnswered();
  assert.equal(c.resyncing, false);
  const decision = c.onEvent(event(4));
  assert.equal(decision.kind, "resubscribe");
  assert.equal(decision.fromRevision, 1);
});
