// The browser fold against the Python fold: every golden trace folds to exactly what
// tests/golden/<name>.fold.json (written by tests/golden/export_fold.py) says.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { applyEvent, applyEvents, createRun, eventsOf, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";
import { exportModel, exportRun } from "./golden_export.mjs";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
const names = readdirSync(GOLDEN).filter((f) => f.endsWith(".jsonl")).map((f) => f.slice(0, -6)).sort();

test("there are golden traces", () => {
  assert.ok(names.length > 0, `no .jsonl files in ${GOLDEN}`);
});

for (const name of names) {
  test(`${name}: fold.js agrees with the Python fold`, () => {
    const expected = JSON.parse(readFileSync(join(GOLDEN, `${name}.fold.json`), "utf8"));
    const events = parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"));
    const runs = [...runsOf(events).values()];
    assert.equal(runs.length, expected.runs.length, "number of runs");
    runs.forEach((runEvents, i) => {
      const want = expected.runs[i];
      const got = exportRun(runEvents, want.snapshots.map((s) => s.upto));
      // Compare piecewise first, so a failure names the part that drifted.
      for (const key of Object.keys(want)) {
        assert.deepStrictEqual(got[key], want[key], `${name} run ${want.run_id}: ${key}`);
      }
      assert.deepStrictEqual(got, want);
    });
  });

  test(`${name}: folding in overlapping batches equals folding at once`, () => {
    const events = parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"));
    for (const runEvents of runsOf(events).values()) {
      const stops = [runEvents.at(-1).seq];
      const batched = createRun();
      let seed = 7;
      for (let i = 0; i < runEvents.length;) {
        seed = (seed * 1103515245 + 12345) % 2147483648;
        const n = 1 + (seed % 9);
        // A resumed stream may resend what was applied: those are ignored.
        const from = Math.max(0, i - (seed % 3));
        applyEvents(batched, runEvents.slice(from, i + n));
        i += n;
      }
      assert.equal(batched.events.length, runEvents.length);
      assert.deepStrictEqual(exportModel(batched, runEvents, stops), exportRun(runEvents, stops));
    }
  });
}


test("an invocation's events are those of its path applied once it was known, in order, the last few when asked", () => {
  let invocations = 0;
  for (const name of names) {
    for (const events of runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()) {
      const run = createRun();
      /** @type {Map<string, number[]>} by path: the seqs a list of each invocation's would hold */
      const expected = new Map();
      for (const event of events) {
        const path = event.path || "";
        const counted = !run.interruption && run.invocations.has(path) && event.seq > run.lastSeq;
        if (applyEvent(run, event) && counted) expected.set(path, [...(expected.get(path) || []), event.seq]);
      }
      for (const [path, inv] of run.invocations) {
        const seqs = expected.get(path) || [];
        assert.deepStrictEqual(eventsOf(run, inv).map((e) => e.seq), seqs, `${name} ${path}`);
        assert.equal(inv.eventCount, seqs.length, `${name} ${path}`);
        assert.deepStrictEqual(eventsOf(run, inv, 2).map((e) => e.seq), seqs.slice(-2), `${name} ${path}: the last two`);
        invocations += 1;
      }
    }
  }
  assert.ok(invocations > 100, `the goldens hold invocations (${invocations})`);
});
