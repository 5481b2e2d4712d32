// A join's critical path: the branch that finished last, and inside it the inner join it
// waited on, down the tree; checked against the end events of the golden traces.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { criticalPath } from "../../static/picoflow_web/js/critical_path.js";
import { fold, parseJsonl, runsOf } from "../../static/picoflow_web/js/fold.js";

const GOLDEN = join(dirname(fileURLToPath(import.meta.url)), "..", "golden");
// A golden may hold several turns; the first is the one with the barriers.
const events = (name) => [...runsOf(parseJsonl(readFileSync(join(GOLDEN, `${name}.jsonl`), "utf8"))).values()][0];

/** The branch of `barrier` whose end event has the greatest offset, straight from the events. */
function lastToEnd(list, barrier) {
  const ends = list.filter((e) => (e.type === "branch.fulfilled" || e.type === "branch.rejected") && e.barrier === barrier);
  return ends.reduce((a, b) => (b.offset > a.offset || (b.offset === a.offset && b.seq > a.seq) ? b : a)).path;
}

test("nested_fanout: the root join waited on the branch that ended last, and it on its slowest inner branch", () => {
  const list = events("nested_fanout");
  const cp = criticalPath(fold(list), "b0");
  const outer = lastToEnd(list, "b0");
  const inner = list.find((e) => e.type === "barrier.forked" && e.path === outer).barrier;
  assert.deepStrictEqual(cp.paths, [outer, lastToEnd(list, inner)]);
  assert.deepStrictEqual(cp.paths, ["0", "0.1"]);
  assert.deepStrictEqual(cp.steps.map((s) => s.barrier), ["b0", "0/b0"]);
  assert.equal(cp.decided, true);
  assert.equal(cp.sentence, "The join of ResearchDesk › barrier 0 (b0) waited on 0 (Planner), which waited on 0.1 (news).");
  const join0 = list.find((e) => e.type === "join.published" && e.barrier === "b0");
  assert.equal(cp.steps[0].joinedAt, join0.offset);
  assert.ok(cp.steps[0].finished <= join0.offset);
});

test("ab_timing: the slow B chain decided the root join", () => {
  const list = events("ab_timing");
  const cp = criticalPath(fold(list), "b0");
  assert.equal(cp.paths[0], lastToEnd(list, "b0"));
  assert.deepStrictEqual(cp.paths, ["1", "1.1:0"]);
  assert.equal(cp.sentence, "The join of Stopwatch › barrier 0 (b0) waited on 1 (B), which waited on 1.1:0 (B2).");
});

test("cancelled: the join of b1 waited for the last cancelled branch to be settled", () => {
  const list = events("cancelled");
  const cp = criticalPath(fold(list), "b1");
  assert.deepStrictEqual(cp.paths, [lastToEnd(list, "b1"), lastToEnd(list, "1:1/b0")]);
  assert.equal(cp.sentence, "The join of Archivist › barrier 1 (b1) waited on 1:1 (west), which waited on 1:1.2 (west-3).");
});

test("a join that has not run has no critical path yet", () => {
  const list = events("nested_fanout");
  const before = list.find((e) => e.type === "join.published" && e.barrier === "b0").seq - 1;
  const cp = criticalPath(fold(list, before), "b0");
  assert.equal(cp.decided, false);
  assert.deepStrictEqual(cp.paths, []);
  assert.equal(cp.sentence, "The join of ResearchDesk › barrier 0 (b0) has not run yet.");
  assert.equal(criticalPath(fold(list), "nope"), null);
});

test("two ends at the same offset: the one reported later finished last", () => {
  let seq = 0;
  const list = [];
  const add = (type, offset, fields, path = "") => list.push({ seq: seq++, offset, path, type, run_id: "r", session_id: "s", ...fields });
  add("turn.started", 0, { flow: "F", message: "go" });
  add("session.loaded", 0, { steps: {}, current_step: "Top", tokens: {} });
  add("barrier.forked", 0.1, { barrier: "b0", caller_step: "Top", policy: "retain-successes", checkpoint: "none", base: "canonical",
    requests: [0, 1].map((i) => ({ index: i, path: String(i), step: "S", key: `k${i}`, params: {} })) });
  add("branch.started", 0.2, { barrier: "b0", index: 1 }, "1");
  add("branch.started", 0.2, { barrier: "b0", index: 0 }, "0");
  add("branch.fulfilled", 0.5, { barrier: "b0", index: 1, output: 1 }, "1");
  add("branch.fulfilled", 0.5, { barrier: "b0", index: 0, output: 0 }, "0");
  add("join.published", 0.6, { barrier: "b0", target: "canonical", fields: [], discarded: [] });
  assert.deepStrictEqual(criticalPath(fold(list), "b0").paths, ["0"]);
});
