// Bad input: the browser fold records the same anomalies as the Python fold and never
// throws. The traces (tests/js/bad_traces.json) are written by tests/contract/bad_traces.py,
// which says what each one is; tests/contract/test_fold_anomalies.py folds them in Python
// and compares both folds' exports.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvents, createRun, fold, viewAt } from "../../static/picoflow_web/js/fold.js";
import { exportModel, exportRun } from "./golden_export.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const traces = JSON.parse(readFileSync(join(HERE, "bad_traces.json"), "utf8"));

test("there are bad traces", () => {
  assert.ok(Object.keys(traces).length >= 4);
});

for (const [name, trace] of Object.entries(traces)) {
  test(`${name}: the fold records the anomalies and does not throw`, () => {
    const run = fold(trace.events);
    assert.deepStrictEqual(run.anomalies, trace.anomalies);
    assert.equal(run.status, trace.status ?? "finished");
    for (const path of run.invocations.keys()) viewAt(run, path);
    const last = trace.events.at(-1).seq;
    for (let seq = -1; seq <= last + 1; seq += 1) fold(trace.events, seq);
    const stops = [...new Set(trace.events.map((e) => e.seq))];
    assert.equal(exportRun(trace.events, stops).anomalies.length, trace.anomalies.length);
  });

  test(`${name}: folding in batches equals folding at once`, () => {
    const run = createRun();
    for (let i = 0; i < trace.events.length; i += 2) applyEvents(run, trace.events.slice(i, i + 3));
    const stops = [trace.events.at(-1).seq];
    assert.deepStrictEqual(exportModel(run, trace.events, stops), exportRun(trace.events, stops));
  });
}

test("a resent or late event is ignored", () => {
  const run = fold(traces.sequence.events);
  assert.deepStrictEqual(run.state.W, { x: 2 });
  assert.deepStrictEqual(run.invocations.get("0").drafts.map((d) => d.value), [1, 2]);
});

test("nothing after run.interrupted is applied", () => {
  const events = traces["after-interruption"].events;
  const run = fold(events);
  assert.equal(run.status, "interrupted");
  assert.deepStrictEqual(run.interruption, { seq: 6, reason: "no events or heartbeats for 30 s", silent_for: 30 });
  assert.equal(run.lastSeq, 12);
  assert.equal(run.events.length, events.length);
  const late = run.invocations.get("1");
  assert.deepStrictEqual([late.status, late.interrupted, late.drafts.length, late.output], ["running", true, 0, null]);
  assert.deepStrictEqual([run.invocations.get("0").status, run.invocations.get("0").interrupted], ["fulfilled", false]);
  assert.deepStrictEqual([run.barriers.get("b0").outcome, run.barriers.get("b0").interrupted], ["open", true]);
  assert.deepStrictEqual(run.barriers.get("b0").counts, { queued: 0, running: 1, fulfilled: 1, rejected: 0 });
  assert.deepStrictEqual(run.state, { Top: { a: 1 } });
  // The interruption is declared after the silence: the run's time ends at its last report.
  assert.equal(run.endOffset, 0.5);
  const ended = fold(traces["interrupted-after-the-end"].events);
  assert.deepStrictEqual([ended.status, ended.interruption], ["finished", null]);
});

test("an unknown base reads as empty, and so does a cycle of bases", () => {
  assert.deepStrictEqual(viewAt(fold(traces["unknown-invocation"].events), "7.0").state, { W: { z: 3 } });
  assert.deepStrictEqual(viewAt(fold(traces["fork-rules"].events), "0").state, { W: { x: 1 } });
});
