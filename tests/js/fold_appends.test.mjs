// A branch that appends to a channel many times, one contribution at a time: the fold keeps
// one list the branch's appends extend (k appends cost O(k), not k growing copies), and
// every view still holds exactly the items contributed up to its seq - after a replacement,
// beside a nested branch appending onto its caller's list, and after the replay cursor
// stepped back and forth over the appends.
import assert from "node:assert/strict";
import { test } from "node:test";

import { fold, viewAt } from "../../static/picoflow_web/js/fold.js";
import { appendTip } from "../../static/picoflow_web/js/fold/reduce.js";
import { createCursor } from "../../static/picoflow_web/js/fold/undo.js";
import { fork, request, trace } from "./trace_builder.mjs";

const appended = (value, order) => ({ step: "A", field: "log", value, order, draft: true, channel: "append", result: null });

/** One branch "0" that appends 0..n-1 to A.log (which holds ["seed"]); the seq of each. */
function appends(n) {
  const { events, add } = trace();
  add("session.loaded", { new_session: false, revision: 1, current_step: "Top", steps: { A: { log: ["seed"] } }, context: {}, tokens: {} });
  add("barrier.forked", fork("b0", [request(0, "0", "A", "a")]));
  add("branch.started", { barrier: "b0", index: 0, key: "a", step: "A" }, "0");
  const seqs = [];
  for (let i = 0; i < n; i += 1) seqs.push(add("state.contributed", appended(i, i + 1), "0"));
  return { events, add, seqs };
}

test("a branch's appends extend one list, and each view holds the items up to its seq", () => {
  const { events, seqs } = appends(400);
  const half = fold(events, seqs[199]);
  const tip = appendTip(half.invocations.get("0").changes, "A", "log");
  assert.ok(tip, "the branch's last append ends a list it can extend");
  const run = fold(events);
  const inv = run.invocations.get("0");
  // Folded apart, the two runs share nothing; within one run the appends share one list.
  assert.equal(appendTip(inv.changes, "A", "log").length, 401);
  assert.equal(tip.length, 201);
  for (const i of [0, 1, 199, 200, 399]) {
    assert.deepStrictEqual(viewAt(run, "0", seqs[i]).state.A.log, ["seed", ...Array.from({ length: i + 1 }, (_, j) => j)]);
  }
  const own = viewAt(run, "0").own;
  assert.equal(own.length, 400);
  assert.deepStrictEqual(own[2].value, ["seed", 0, 1, 2]);
  assert.deepStrictEqual(inv.changes[0].value, ["seed", 0]);
});

test("after a replacement the appends start from the new value, the earlier views unchanged", () => {
  const { events, add, seqs } = appends(3);
  const replaced = add("state.replaced", { step: "A", field: "log", value: ["fresh"], base: null, draft: true }, "0");
  const after = add("state.contributed", appended("x", 4), "0");
  const run = fold(events);
  assert.deepStrictEqual(viewAt(run, "0", seqs[2]).state.A.log, ["seed", 0, 1, 2]);
  assert.deepStrictEqual(viewAt(run, "0", replaced).state.A.log, ["fresh"]);
  assert.deepStrictEqual(viewAt(run, "0", after).state.A.log, ["fresh", "x"]);
});

test("a nested branch appends onto a copy of its caller's list, never into it", () => {
  const { events, add } = appends(2);
  const forked = add("barrier.forked", fork("0/b0", [request(0, "0.0", "A", "inner")], { base: "0" }), "0");
  add("branch.started", { barrier: "0/b0", index: 0, key: "inner", step: "A" }, "0.0");
  const inner = add("state.contributed", appended("in", 1), "0.0");
  const outer = add("state.contributed", appended("out", 3), "0");
  const run = fold(events);
  assert.deepStrictEqual(viewAt(run, "0.0", inner).state.A.log, ["seed", 0, 1, "in"]);
  assert.deepStrictEqual(viewAt(run, "0", outer).state.A.log, ["seed", 0, 1, "out"]);
  assert.deepStrictEqual(viewAt(run, "0", forked).state.A.log, ["seed", 0, 1]);
});

test("stepping the replay cursor back over appends and forward again gives the same views", () => {
  const { events, seqs } = appends(30);
  const cursor = createCursor(fold(events), { window: 8 });
  const at = (seq) => viewAt(cursor.moveTo(seq), "0").state.A.log;
  for (const seq of [seqs[29], seqs[25], seqs[27], seqs[10], seqs[29], seqs[0], seqs[29]]) {
    const n = seqs.indexOf(seq) + 1;
    assert.deepStrictEqual(at(seq), ["seed", ...Array.from({ length: n }, (_, j) => j)], `at ${seq}`);
    assert.deepStrictEqual(cursor.moveTo(seq), fold(events, seq));
  }
});
